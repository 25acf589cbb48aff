"""`harness explain` and the attribution behind it, on the labelled corpus of real vLLM failure
excerpts (tests/data/vllm_logs), plus the DEBUG re-run of a silent failure (harness.measure.diagnose)."""

from __future__ import annotations

import functools
import io
import json
import sys

import pytest

from harness import cli
from harness.analyze.dataset import load
from harness.analyze.failure import CATALOGUE, attribute, explain, explain_main, failure_table
from harness.core.logs import classify, has_specific_cause, root_cause, strip_prefix
from harness.measure import run as runmod
from harness.measure import sweep as sweepmod
from harness.measure.sweep import SweepArgs, sweep
from harness.schema import record
from harness.schema.record import FAILURE_CLASSES
from tests.conftest import write_scenario
from tests.vllm_logs import CLASSES, corpus

ENTRIES = corpus()


def test_the_vocabulary_is_the_corpus_vocabulary():
    assert tuple(FAILURE_CLASSES) == CLASSES
    assert {s.klass for s in CATALOGUE} <= set(CLASSES) - {"unknown"}


def test_corpus_classes_and_evidence_lines():
    misses = []
    right_class = right_line = 0
    for e in ENTRIES:
        att = explain(e.text)
        ok_c, ok_e = att.klass == e.klass, e.evidence in att.error
        right_class += ok_c
        right_line += ok_e
        if not (ok_c and ok_e):
            misses.append(f"{e.file}: class {att.klass} (want {e.klass}); evidence {att.error[:90]!r} "
                          f"(want {e.evidence[:60]!r})")
    print(f"\nclasses {right_class}/{len(ENTRIES)}, evidence lines {right_line}/{len(ENTRIES)}; misses:")
    print("\n".join(misses) or "none")
    assert right_class >= 0.9 * len(ENTRIES)
    assert right_line >= 0.9 * len(ENTRIES)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.klass != "unknown"], ids=lambda e: e.file)
def test_evidence_is_never_a_frame_caret_banner_or_wrapper(entry):
    ev = explain(entry.text).error
    assert not ev.startswith(("Traceback (most recent call last)", 'File "', "raise "))
    assert set(ev) - set("^~ ")
    assert "Engine core initialization failed" not in ev and "Worker failed with error" not in ev


@pytest.mark.parametrize("line, who, text", [
    ("(EngineCore_DP0 pid=45) ERROR 08-19 13:12:57 [core.py:708] ValueError: x", "EngineCore_DP0:45", "ValueError: x"),
    ("(VllmWorker rank=5 pid=77) INFO 05-28 17:47:14 [utils.py:993] Found nccl", "VllmWorker:77", "Found nccl"),
    ("(RayWorkerWrapper pid=270291, ip=10.175.94.190) [rank3]:[E219 x] boom", "RayWorkerWrapper:270291", "[E219 x] boom"),
    ("vllm-1  | ERROR 11-18 18:07:28 engine.py:366]   File \"w.py\"", "main", '  File "w.py"'),
    ("  | [rank0]:[E ProcessGroupNCCL.cpp:563] Watchdog", "main", "[E ProcessGroupNCCL.cpp:563] Watchdog"),
    ("\x1b[1;36m(EngineCore_DP0 pid=1)\x1b[0m ERROR 10-14 17:48:53 [core.py:700] ninja: build stopped",
     "EngineCore_DP0:1", "ninja: build stopped"),
])
def test_prefixes_are_peeled(line, who, text):
    assert strip_prefix(line) == (who, text)


def test_a_line_glued_to_a_progress_bar_is_split():
    log = ("Processed prompts:   6%|#| 29/512 [00:08<02:31](EngineCore_DP0 pid=3) ERROR 10-25 11:17:27 "
           "[core.py:720] ValueError: boom\n")
    assert root_cause(log).line == "ValueError: boom" and root_cause(log).who == "EngineCore_DP0:3"


def test_source_lines_and_frames_are_not_exceptions():
    log = ('  File "vllm/worker.py", line 493, in raise_if_cache_size_invalid\n'
           '    raise ValueError("No available memory for the cache blocks. "\n'
           "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`\n")
    kinds = [ln.kind for ln in classify(log)]
    assert kinds == ["frame", "source", "exception"]
    assert explain(log).error.startswith("ValueError: No available memory")


USAGE_THREAD = """\
Exception in thread Thread-1 (_report_usage_worker):
Traceback (most recent call last):
  File "/usr/lib/python3.12/threading.py", line 1075, in _bootstrap_inner
    self.run()
  File "vllm/usage/usage_lib.py", line 166, in _report_usage_worker
    self._report_usage_once(model_architecture, usage_context, extra_kvs)
ValueError: Expecting value: line 1 column 1 (char 0)
"""
WRAPPER = """\
Traceback (most recent call last):
  File "bench.py", line 3, in main
    raise RuntimeError("Engine core initialization failed. See root cause above.")
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_the_usage_stats_thread_is_never_the_cause():
    log = USAGE_THREAD + WRAPPER
    assert not has_specific_cause(log)
    att = explain(log)
    assert att.klass == "unknown" and "Expecting value" not in att.error
    assert att.error.startswith("RuntimeError: Engine core initialization failed")
    assert att.found.startswith("only vLLM's generic wrapper")


def test_unknown_says_what_was_found():
    assert explain("INFO 11-20 10:45:57 [x.py:1] loading weights\n").found.startswith("no traceback at all")
    cause = explain("Traceback (most recent call last):\n  File \"a.py\", line 1, in f\nKeyError: 'rope_scaling'\n")
    assert cause.klass == "unknown" and cause.error == "KeyError: 'rope_scaling'"
    assert cause.found == "a cause outside the catalogue"


def test_a_dependency_problem_comes_with_the_window_command():
    e = next(x for x in ENTRIES if x.file.startswith("011-"))
    assert explain(e.text).window == 'harness search window transformers --probe "from transformers import DeepseekV2Config"'
    e = next(x for x in ENTRIES if x.file.startswith("017-"))
    assert explain(e.text).window.startswith("harness search window flashinfer-cubin --release 0.6.14 ")


def test_explain_cli_json_and_stdin(capsys, monkeypatch):
    files = [str(next(e for e in ENTRIES if e.file.startswith(p)).file) for p in ("026-", "042-")]
    from tests.vllm_logs import CORPUS_DIR

    monkeypatch.setattr(sys, "stdin", io.StringIO("Killed\n"))
    assert cli.main(["explain", "--json", *(str(CORPUS_DIR / f) for f in files), "-"]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [o["class"] for o in out] == ["out-of-memory", "killed", "killed"]
    assert out[0]["error"].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB.")
    assert cli.main(["explain", "/no/such/run"]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_explain_text_names_class_signature_evidence_fix():
    text = explain_main(["-"], as_json=False,
                        stdin=io.StringIO("AttributeError: module 'cutlass.cute.core' has no attribute 'ThrMma'\n"))
    assert "dependency-window (signature cutlass-thrmma)" in text and "pin `nvidia-cutlass-dsl==4.5.3`" in text
    assert "harness search window nvidia-cutlass-dsl" in text


def test_a_record_of_version_3_reads_as_4_without_a_class(tmp_path):
    from studygen import record_dict

    data = record_dict(leg="gpu-0.18.0", model="m", status="failed", reason="exit code 1")
    data["schema_version"] = 3
    (tmp_path / "results.json").write_text(json.dumps(data))
    rec = record.read(tmp_path / "results.json")
    assert rec.schema_version == record.SCHEMA_VERSION and rec.failure.failure_class is None and rec.failure.diagnosis is None


# --- the silent crash, re-run with DEBUG logging ---------------------------------------------------

# FAKE worker standing in for an engine whose cause only shows with DEBUG logging (the real engine
# case is in test_engine_diagnosis below when the CPU legs are built): without DEBUG it prints vLLM's
# wrapper only; with it, the usage-stats thread's harmless traceback and then the cause.
SILENT_WORKER = r'''
import os, sys
P = "(EngineCore_DP0 pid=7) "
if os.environ.get("VLLM_LOGGING_LEVEL") == "DEBUG":
    sys.stdout.write("".join(P + x + "\n" for x in USAGE.splitlines()))
    sys.stdout.write(P + "DEBUG 11-29 23:58:00 [core.py:1] Traceback (most recent call last):\n")
    sys.stdout.write(P + 'DEBUG 11-29 23:58:00 [core.py:1]   File "vllm/v1/worker/gpu_worker.py", line 3, in f\n')
    sys.stdout.write(P + "DEBUG 11-29 23:58:00 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
sys.stdout.write(P + "INFO 11-29 23:57:40 [gpu_model_runner.py:1] Encoder cache will be initialized with a budget of 16384 tokens\n")
sys.stdout.write(WRAPPER)
sys.exit(1)
'''


@pytest.fixture
def silent_sweep(tmp_path, fake_sweep, monkeypatch):
    worker = tmp_path / "silent_worker.py"
    worker.write_text(f"USAGE = {USAGE_THREAD!r}\nWRAPPER = {WRAPPER!r}\n" + SILENT_WORKER)
    monkeypatch.setattr(sweepmod, "RunSpec", functools.partial(runmod.RunSpec, worker=worker))
    body = """
    name: t
    legs: [cpu-0.32.0]
    timeout_s: 30
    models: [{name: m, path: tiny}]
    workloads: [{name: a, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}]
    """
    return lambda **kw: sweep(SweepArgs(scenario=str(write_scenario(tmp_path, body)),
                                        results=tmp_path / "results", **kw))


def test_a_silent_failure_is_rerun_with_debug_logging(silent_sweep):
    res = silent_sweep()
    rec = res.records[0]
    run_dir = res.study_dir / "runs" / rec.run_id
    d = rec.failure.diagnosis
    assert rec.status == "failed" and d is not None and d.surfaced and d.env == {"VLLM_LOGGING_LEVEL": "DEBUG"}
    assert d.reason.startswith("torch.OutOfMemoryError") and d.status == "failed"
    assert not any("Expecting value" in x for x in d.exceptions)
    assert (run_dir / "diagnosis" / "run.log").is_file() and not (run_dir / "diagnosis" / "results.json").exists()
    assert record.read(run_dir / "results.json").failure.diagnosis == d
    att = explain(run_dir)
    assert att.klass == "out-of-memory" and att.diagnosed and att.source == "diagnosis"
    # From the record alone (what a dataset loads), the same attribution.
    assert attribute(rec, (run_dir / "run.log").read_text()).klass == "out-of-memory"
    ds = load(res.study_dir)
    assert len(ds) == 1 and ds.records["failure_class"].tolist() == ["out-of-memory"]


def test_no_diagnose_skips_the_rerun(silent_sweep):
    res = silent_sweep(diagnose=False)
    rec = res.records[0]
    assert rec.failure.diagnosis is None
    assert not (res.study_dir / "runs" / rec.run_id / "diagnosis").exists()
    assert explain(res.study_dir / "runs" / rec.run_id).found.startswith("only vLLM's generic wrapper")


def test_record_class_keeps_the_class_in_the_record(silent_sweep):
    res = silent_sweep()
    from harness.analyze.failure import record_class

    run_dir = res.study_dir / "runs" / res.records[0].run_id
    att = record_class(run_dir)
    back = record.read(run_dir / "results.json")
    assert att.klass == back.failure.failure_class == "out-of-memory" and back.failure.signature == "cuda-oom"


def test_failure_table_has_the_class(tmp_path):
    from studygen import record_dict, simple_study, write_run

    d = simple_study(tmp_path / "s", {("0.18", "ok", "mixed"): [1.0], ("0.26", "ok", "mixed"): [1.0],
                                      ("0.26", "gone", "mixed"): [1.0]})
    write_run(d, record_dict(leg="gpu-0.18.0", model="gone", status="failed",
                             reason="ValueError: No available memory for the cache blocks."))
    t = failure_table(load(d), leg="0.18")
    assert list(t["class"]) == ["out-of-memory"]
