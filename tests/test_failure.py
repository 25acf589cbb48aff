"""Failure signatures on logs shaped like vLLM's (subprocess lines prefixed
`(EngineCore_DP0 pid=12) ERROR 11-29 23:58:00 [core.py:1] `), and the failure attribution table
built from FAKE study folders (studygen)."""

from __future__ import annotations

import pytest

from harness.analyze.dataset import load
from harness.analyze.failure import CATALOGUE, attribute, attributions_by_model, failure_table
from harness.schema.record import Failure, RunRecord
from harness.core.logs import failure_reason, last_line, tracebacks
from studygen import record_dict, simple_study, write_run

P = "(EngineCore_DP0 pid=12) ERROR 11-29 23:58:00 [core.py:708] "
W = "(Worker_TP0 pid=31) ERROR 11-29 23:58:01 [multiproc_executor.py:597] "


def _prefixed(prefix: str, text: str) -> str:
    return "\n".join(prefix + line for line in text.strip("\n").splitlines()) + "\n"


def _failed_record(log: str, status: str = "failed") -> RunRecord:
    """What harness.measure.run.execute records for a failed run with this log."""
    tbs = tracebacks(log)
    reason = "timed out after 600 s" if status == "timeout" else failure_reason(tbs) or "exit code 1"
    return RunRecord(study="s", series="main", run_id="x", fingerprint="f", harness_version="0", leg="l",
                     leg_label="L", model="m", tp=1, workload="w", status=status,
                     failure=Failure(exit_code=1, reason=reason, traceback=tbs[-1] if tbs else "",
                                     exceptions=[last_line(t) for t in tbs]))


INFO = "(EngineCore_DP0 pid=12) INFO 11-29 23:57:40 [gpu_model_runner.py:2000] Encoder cache will be initialized " \
       "with a budget of 16384 tokens\n"
ENGINE_DEAD = """\
Traceback (most recent call last):
  File "vllm/entrypoints/llm.py", line 280, in __init__
    self.llm_engine = LLMEngine.from_engine_args(engine_args)
  File "vllm/v1/engine/core_client.py", line 97, in make_client
    raise RuntimeError("Engine core initialization failed. See root cause above.")
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""

LOGS: dict[str, str] = {
    "config-model-type": """\
INFO 11-29 23:57:01 [utils.py:253] non-default args: {'model': 'google/gemma-4-26B-A4B-it'}
Traceback (most recent call last):
  File "vllm/engine/arg_utils.py", line 1190, in create_model_config
    return ModelConfig(
  File "pydantic/_internal/_dataclasses.py", line 123, in __init__
    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)
pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
  Value error, The checkpoint you are trying to load has model type `gemma4` but Transformers does not recognize this architecture. This could be because of an issue with the checkpoint, or because your version of Transformers is out of date.

You can update Transformers with the command `pip install --upgrade transformers`. [type=value_error, input_value=ArgsKwargs((), {'model': 'google/gemma-4-26B-A4B-it'}), input_type=ArgsKwargs]
    For further information visit https://errors.pydantic.dev/2.12/v/value_error
""",
    "cutlass-thrmma": INFO + _prefixed(P, """\
Traceback (most recent call last):
  File "vllm/v1/engine/core.py", line 699, in run_engine_core
    engine_core = EngineCoreProc(*args, **kwargs)
  File "vllm/vllm_flash_attn/cute/utils.py", line 115, in <module>
    thr_mma: cute.core.ThrMma,
AttributeError: module 'cutlass.cute.core' has no attribute 'ThrMma'
""") + ENGINE_DEAD,
    "transformers-per-layer-attribute": _prefixed(P, """\
Traceback (most recent call last):
  File "vllm/config/model_arch_config_convertor.py", line 597, in get_head_size
    return self.hf_text_config.head_dim
  File "transformers/configuration_utils.py", line 210, in __getattribute__
    raise AmbiguousGlobalPerLayerAttributeError(key)
transformers.configuration_utils.AmbiguousGlobalPerLayerAttributeError: 'head_dim' is a per-layer attribute and
""") + P + "may vary across layers. Access it via the individual layer configs instead\n" + ENGINE_DEAD,
    "whisper-inconsistent-shapes": _prefixed(P, """\
Traceback (most recent call last):
  File "vllm/v1/worker/gpu_model_runner.py", line 2311, in _batch_mm_kwargs
    return schema.validate()
  File "vllm/utils/tensor_schema.py", line 147, in _validate_nested_tensors
    raise ValueError(
ValueError: input_features contains inconsistent shapes: torch.Size([128, 3000]) (index 0) vs torch.Size([128, 3061]) (index 17)
"""),
    "flashinfer-ipcsocket": _prefixed(W, """\
Traceback (most recent call last):
  File "bench_vllm.py", line 88, in patch_comm
    flashinfer.comm.mnnvl.IpcSocket
AttributeError: module 'flashinfer.comm.mnnvl' has no attribute 'IpcSocket'
""") + ENGINE_DEAD,
    "cuda-oom": _prefixed(W, """\
Traceback (most recent call last):
  File "vllm/v1/worker/gpu_worker.py", line 301, in determine_available_memory
    self.model_runner.profile_run()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 178.35 GiB of which 1.06 GiB is free.
""") + ENGINE_DEAD,
    "cpu-memory-utilization": _prefixed(P, """\
Traceback (most recent call last):
  File "vllm/v1/worker/cpu_worker.py", line 84, in init_device
    raise ValueError(
ValueError: Available memory on node 0 (1.21/7.66 GiB) on startup is less than desired CPU memory utilization (0.9, 6.89 GiB). On the CPU backend, the `--gpu-memory-utilization` flag controls the fraction of CPU memory reserved (despite its name).
""") + ENGINE_DEAD,
    "moe-quant-scheme-refused": _prefixed(P, """\
Traceback (most recent call last):
  File "vllm/model_executor/layers/fused_moe/oracle.py", line 210, in select_backend
    raise ValueError(f"{backend} does not support quantization scheme {key}")
ValueError: FLASHINFER_CUTLASS does not support quantization scheme QuantKey(f8e4m3fn,scale(f32,static,per_tensor))
""") + ENGINE_DEAD,
}


@pytest.mark.parametrize("sig_id", sorted(LOGS))
def test_each_signature_is_found_in_a_vllm_style_log(sig_id):
    rec = _failed_record(LOGS[sig_id])
    att = attribute(rec, LOGS[sig_id])
    assert att.signature == sig_id
    assert "Engine core initialization failed" not in att.error
    assert not att.error.startswith("(")  # the process prefix is stripped from the evidence


def test_the_root_cause_is_found_in_the_record_even_without_the_log():
    # run.py already skips vLLM's generic wrapper when it picks failure.reason.
    rec = _failed_record(LOGS["cutlass-thrmma"])
    assert rec.failure.reason == "AttributeError: module 'cutlass.cute.core' has no attribute 'ThrMma'"
    att = attribute(rec, None)
    assert att.signature == "cutlass-thrmma" and att.source == "reason" and att.fixable == "yes"
    assert "nvidia-cutlass-dsl==4.5.3" in att.fix


def test_the_model_type_is_captured():
    att = attribute(_failed_record(LOGS["config-model-type"]), LOGS["config-model-type"])
    # The reason itself now carries pydantic's message (the line under the exception), so the
    # signature matches the reason, not only the log around it.
    assert att.detail == "model_type=gemma4" and att.source == "reason" and att.fixable == "no"


def test_the_per_layer_attribute_fix_is_the_transformers_pin():
    att = attribute(_failed_record(LOGS["transformers-per-layer-attribute"]), None)
    assert att.signature == "transformers-per-layer-attribute" and "transformers==5.14.1" in att.fix
    assert att.detail == "attribute=head_dim"


def test_a_timeout_is_a_timeout():
    rec = _failed_record("INFO 11-29 23:57:01 [llm.py:1] loading\n", status="timeout")
    att = attribute(rec, "INFO 11-29 23:57:01 [llm.py:1] loading\n")
    assert att.signature == "timeout" and att.error == "timed out after 600 s"


def test_anything_else_is_unknown_with_the_tracebacks_last_line():
    log = _prefixed(P, """\
Traceback (most recent call last):
  File "vllm/v1/engine/core.py", line 1, in f
    g()
KeyError: 'rope_scaling'
""") + ENGINE_DEAD
    att = attribute(_failed_record(log), log)
    assert att.signature == "unknown" and att.error == "KeyError: 'rope_scaling'"


def test_a_specific_cause_wins_over_an_error_that_follows_it():
    # An out-of-memory after the import failure is a consequence: the reason names the first cause.
    log = LOGS["cutlass-thrmma"] + _prefixed(W, "torch.OutOfMemoryError: CUDA out of memory.\n")
    assert attribute(_failed_record(log), log).signature == "cutlass-thrmma"


def test_record_json_is_accepted_as_well():
    data = _failed_record(LOGS["cuda-oom"]).model_dump(mode="json")
    assert attribute(data).signature == "cuda-oom"


def test_catalogue_ids_are_unique():
    ids = [s.id for s in CATALOGUE]
    assert len(ids) == len(set(ids)) and "unknown" not in ids


# --- the table -----------------------------------------------------------------------------------

def _study(tmp_path):
    """FAKE: on 0.18, `gone` fails to load (model type), `pinned` and `pinned2` pass only with the
    cutlass pin; `pinned` also has falsification runs that fail with the ThrMma error; `fine` passes
    but fails under a forced MoE backend arm (its own reason, not the model's)."""
    d = simple_study(tmp_path / "s", {(lb, m, "mixed"): [1000.0] for lb in ("0.18", "0.26")
                                      for m in ("fine", "pinned", "pinned2")}
                     | {("0.26", "gone", "mixed"): [500.0]})
    thrmma = "AttributeError: module 'cutlass.cute.core' has no attribute 'ThrMma'"
    for m in ("pinned", "pinned2"):
        rec = record_dict(leg="gpu-0.18.0", model=m, value=1000.0, pins=["nvidia-cutlass-dsl==4.5.3"])
        rec["manifest"]["nvidia_cutlass_dsl"] = "4.5.3"
        write_run(d, rec)
    for arm in ("baseline", "enforce-eager"):
        write_run(d, record_dict(leg="gpu-0.18.0", model="pinned", workload="single-image", kind="latency",
                                 series="falsification", arm=arm, status="failed", reason=thrmma))
    write_run(d, record_dict(leg="gpu-0.18.0", model="fine", series="moe", arm="cutlass", status="failed",
                             reason="ValueError: CUTLASS does not support quantization scheme QuantKey(fp8)"))
    write_run(d, record_dict(leg="gpu-0.18.0", model="gone", status="failed", reason="exit code 1"),
              log=LOGS["config-model-type"])
    return d


def test_failure_table_groups_models_by_root_cause_from_the_records(tmp_path):
    ds = load(_study(tmp_path))
    t = failure_table(ds, leg="0.18")
    assert list(t["group"]) == ["A", "B"]
    a, b = t.iloc[0], t.iloc[1]
    assert a["root cause"].startswith("A · config not parseable") and a["models"] == 1
    assert "model type `gemma4` not recognized" in a["error"] and a["fixable?"].startswith("No")
    assert b["root cause"].startswith("B · cutlass `ThrMma`") and b["models"] == 2
    assert b["model names"] == "`pinned`, `pinned2`"
    assert b["fixable?"] == "Yes — pin `nvidia-cutlass-dsl==4.5.3` (passes in the records)"
    assert "1 model: failed runs; passes under the fix's pin" in b["evidence"]
    assert "1 model: pin only" in b["evidence"]
    assert "no failed run of these models is recorded" not in b["error"]


def test_models_explained_and_on_what_evidence(tmp_path):
    by = attributions_by_model(load(_study(tmp_path))).set_index("model")
    assert set(by.index) == {"gone", "pinned", "pinned2"}        # `fine` passes unpinned: nothing to explain
    assert by.loc["pinned", "failed_runs"] == 2 and by.loc["pinned", "failed_series"] == ("falsification",)
    assert by.loc["pinned2", "evidence"].startswith("pin only")
    assert by.loc["gone", "status"] == "missing" and by.loc["gone", "signature"] == "config-model-type"


def test_no_failures_no_rows(tmp_path):
    d = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [1.0], ("0.26", "m", "mixed"): [2.0]})
    assert failure_table(load(d)).empty


def test_a_pydantic_validation_error_is_named_by_its_message_not_its_link():
    tb = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
          "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
          "  Value error, User-specified max_model_len (100000) is greater than the derived max_model_len "
          "[type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]\n"
          "    For further information visit https://errors.pydantic.dev/2.12/v/value_error\n")
    assert "User-specified max_model_len (100000)" in last_line(tb)
    assert failure_reason([tb]).startswith("Value error, User-specified max_model_len")
