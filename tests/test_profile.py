"""Profiled runs: the trace summary and the two-leg kernel diff on real torch-profiler traces of the CPU
legs (tests/data/profile/, cut small by tests/data/profile/README.md's command), the arm/--profile
plumbing, the prefill/decode split, and the guard that keeps profiled runs out of canonical tables.
Study folders around the real traces are FAKE (studygen); the traces are not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.analyze import profile
from harness.analyze.canonical import canonicalize
from harness.analyze.dataset import load
from harness.analyze.studies import repeat
from harness.measure import sweep as sweepmod
from harness.measure.scenario import Arm, Profile
from harness.measure.worker import kernel_trace as kt
from harness.schema import record
from studygen import record_dict, simple_study, write_run, write_study_yaml

DATA = Path(__file__).parent / "data" / "profile"
TRACES = {"cpu-0.27.1": DATA / "cpu-0.27.1.pt.trace.json.gz", "cpu-0.32.0": DATA / "cpu-0.32.0.pt.trace.json.gz"}
META = json.loads((DATA / "traces.json").read_text()) if (DATA / "traces.json").exists() else {}


def _profiled_study(tmp_path: Path) -> Path:
    """A study with one unprofiled and one profiled run per CPU leg; the profiled runs carry the real traces."""
    d = tmp_path / "s"
    write_study_yaml(d, [("cpu-0.27.1", "0.27.1"), ("cpu-0.32.0", "0.32.0")])
    for leg, label in (("cpu-0.27.1", "0.27.1"), ("cpu-0.32.0", "0.32.0")):
        write_run(d, record_dict(leg=leg, leg_label=label, model="tiny-llama", value=1000.0))
        rec = record_dict(leg=leg, leg_label=label, model="tiny-llama", arm="profiled", value=800.0,
                          profile={"calls": 1, "output_tokens": META[leg]["output_tokens"]})
        run_dir = write_run(d, rec)
        (run_dir / kt.TRACE_DIR).mkdir()
        trace = shutil.copy(TRACES[leg], run_dir / kt.TRACE_DIR / TRACES[leg].name)
        kt.write_profile(run_dir, [Path(trace)], settings=kt.Settings(iterations=1), calls=1, seconds=1.0,
                         output_tokens=META[leg]["output_tokens"])
    return d


@pytest.mark.parametrize("leg", sorted(TRACES))
def test_summary_of_a_real_cpu_trace(leg):
    s = kt.summarize(kt.read_trace(TRACES[leg]))
    assert s.device == "cpu" and s.profiled_s > 0 and 0 < s.op_s <= s.profiled_s
    # Families partition the profiled time: every operator counted once, shares of one total.
    assert sum(s.families.values()) == pytest.approx(s.profiled_s)
    assert sum(o.share for o in s.ops) == pytest.approx(sum(o.self_s for o in s.ops) / s.profiled_s)
    assert [o.self_s for o in s.ops] == sorted((o.self_s for o in s.ops), reverse=True)
    # A Llama forward pass on the CPU: matrix products and attention are there, with many calls.
    assert s.families["GEMM"] > 0 and s.families["attention"] > 0 and s.family_calls["GEMM"] >= 10
    assert all(o.calls >= 1 and o.self_s >= 0 for o in s.ops)


def test_self_time_subtracts_nested_operators():
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
          {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 10, "dur": 80, "pid": 1, "tid": 1},
          {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 150, "dur": 50, "pid": 1, "tid": 1}]
    s = kt.summarize(ev)
    by = {o.name: o for o in s.ops}
    assert by["aten::linear"].self_s == pytest.approx(20e-6) and by["aten::addmm"].self_s == pytest.approx(80e-6)
    # 200 µs span, 150 µs inside top-level operators: 50 µs outside any operator.
    assert by[kt.OUTSIDE].self_s == pytest.approx(50e-6) and s.profiled_s == pytest.approx(200e-6)
    gpu = kt.summarize(ev + [{"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "ts": 0, "dur": 7}])
    assert gpu.device == "cuda" and [o.name for o in gpu.ops] == ["sm90_xmma_gemm"] and gpu.families["GEMM"] > 0


@pytest.mark.parametrize("name,fam", [("aten::addmm", "GEMM"), ("_C::onednn_mm", "GEMM"),
                                      ("vllm::unified_attention", "attention"), ("aten::multinomial", "sampling"),
                                      ("aten::copy_", "memcpy"), ("aten::silu", "elementwise"),
                                      ("fused_moe_kernel", "MoE"), ("ncclDevKernel_AllReduce", "communication"),
                                      ("Memcpy HtoD (Pinned -> Device)", "memcpy"), ("zzz", "other")])
def test_families(name, fam):
    assert kt.family(name) == fam


def test_kernel_diff_of_two_real_traces(tmp_path):
    ds = load(_profiled_study(tmp_path))
    d = profile.kernel_diff(ds, model="tiny-llama", workload="mixed", legs=("cpu-0.27.1", "cpu-0.32.0"))
    # The per-family differences add up to the total gap, so their shares to one.
    assert d.families["diff"].sum() == pytest.approx(d.gap)
    assert d.families["share_of_gap"].sum() == pytest.approx(1.0)
    for leg, tot in zip(d.legs, d.total):
        s = json.loads((ds.root / ds.records.loc[(ds.records["leg"] == leg) & ds.records["profiled"], "run_dir"].iloc[0]
                        / "profile.json").read_text())["summary"]
        assert tot == pytest.approx(s["profiled_s"] / META[leg]["output_tokens"])
    # One-leg operators are listed with the leg, and hold zero on the other side.
    for r in d.only.itertuples():
        assert r.only in d.legs and (r.a == 0 if r.only == d.legs[1] else r.b == 0)
    md = profile.kernel_diff_md(d)
    assert "share of gap" in md and d.headline() in md
    # The per-run tables are in the dataset.
    ops = profile.operators(ds)
    assert set(ops["leg"]) == set(TRACES) and (ops["arm"] == "profiled").all()
    over = profile.profile_overhead(ds)
    assert over["overhead"].tolist() == pytest.approx([0.25, 0.25]) and (over["trace_mb"] > 0).all()


def test_profile_diff_names_a_leg_without_profiled_runs(tmp_path):
    from harness.core.errors import UserError

    ds = load(_profiled_study(tmp_path))
    with pytest.raises(UserError, match="no profiled run of tiny-llama / mixed on leg 'gpu-x'"):
        profile.kernel_diff(ds, model="tiny-llama", workload="mixed", legs=("cpu-0.27.1", "gpu-x"))


def test_profiled_runs_are_never_canonical(tmp_path):
    d = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [10.0], ("0.26", "m", "mixed"): [20.0]})
    # A scenario may profile its default arm: the record's profile field alone keeps it out.
    write_run(d, record_dict(leg="gpu-0.18.0", model="m", repeat=2, value=5.0, profile={"calls": 3}))
    canon = canonicalize(load(d))
    why = {(r.leg, r.repeat): r.reason for r in canon.exclusions.itertuples()}
    assert why == {("gpu-0.18.0", 2): why[("gpu-0.18.0", 2)]} and why[("gpu-0.18.0", 2)].startswith("profiled run")
    cell = canon.cells[canon.cells["leg"] == "gpu-0.18.0"].iloc[0]
    assert cell["samples"] == (10.0,)
    assert "not profiled" in canon.rule


def test_record_schema_7_lifts_version_6(tmp_path):
    rec = record_dict() | {"schema_version": 6}
    p = tmp_path / "results.json"
    p.write_text(json.dumps(rec))
    back = record.read(p)
    assert back.schema_version == record.SCHEMA_VERSION and back.profile is None and back.phases is None


def test_sweep_profile_makes_a_profiled_arm_under_its_own_name():
    arm = Arm(name="default")
    assert sweepmod.profiled_arm(arm, None) is arm
    p = sweepmod.profiled_arm(arm, 5)
    assert p.name == "default-profiled" and p.profile == Profile(iterations=5)
    # An arm that already profiles keeps its name and limits, with the iterations asked for.
    q = sweepmod.profiled_arm(Arm(name="prof", profile=Profile(iterations=1, max_steps=9)), 2)
    assert q.name == "prof" and q.profile.max_steps == 9 and q.profile.iterations == 2


def test_an_unprofiled_arm_hashes_as_before_profiles_existed():
    # The fingerprint leaves `profile` out when unset, so --resume still matches older records.
    dump = Arm(name="default").model_dump(exclude={"description", "profile"})
    assert dump == {"name": "default", "engine_args": {}, "env": {}, "pins": []}


def test_settings_travel_through_the_environment(tmp_path):
    env = {kt.ENV: Profile(iterations=2, max_steps=50).model_dump_json()}
    s = kt.settings_from_env(env)
    assert s == kt.Settings(iterations=2, max_steps=50, max_trace_mb=32.0) and kt.settings_from_env({}) is None
    cfg = kt.engine_kwargs(s, tmp_path / "traces")["profiler_config"]
    assert cfg["profiler"] == "torch" and cfg["max_iterations"] == 50 and cfg["torch_profiler_with_stack"] is False


@pytest.mark.skipif(not (DATA / "requests.json").exists(), reason="no recorded requests.json")
def test_the_split_of_a_real_run_is_what_its_requests_give():
    data = json.loads((DATA / "requests.json").read_text())
    got = kt.split(data["requests"])
    for k in ("ttft_s", "tpot_s", "decode_s", "decode_share"):
        assert got[k] == pytest.approx(data["split"][k])
    assert 0 < got["decode_share"] < 1 and got["requests"] == len(data["requests"])


def test_measured_decode_time_comes_before_token_counts(tmp_path):
    d = tmp_path / "s"
    write_study_yaml(d, [("a", "1.0"), ("b", "2.0")], main_series="rep")
    for leg, label, v in (("a", "1.0", [10, 11]), ("b", "2.0", [10, 11])):
        for i, x in enumerate(v, 1):
            write_run(d, record_dict(leg=leg, leg_label=label, series="rep", value=x, repeat=i, study="s",
                                     work={"num_seqs": 4, "prompt_tokens": 100, "output_tokens": 300},
                                     phases={"requests": 4, "ttft_s": 0.1, "decode_s": 0.3, "decode_share": 0.75}))
    t = repeat.repeat_study(load(d), series="rep").table
    assert t["decode_share"].iloc[0] == pytest.approx(0.75)
    assert t["decode_share_source"].iloc[0] == "measured decode time"


@pytest.mark.skipif(not any((Path(__file__).parents[1] / "results" / "cpu-profile" / "runs").glob("**/profile.json")),
                    reason="results/cpu-profile holds no profiled run")
def test_the_kernel_diff_notebook_runs_on_the_shipped_cpu_study(tmp_path):
    import nbformat
    import papermill as pm

    from harness.core import paths

    out = tmp_path / "kernel_diff.ipynb"
    pm.execute_notebook(str(paths.NOTEBOOKS / "kernel_diff.ipynb"), str(out), kernel_name="python3",
                        cwd=str(paths.PROJ_ROOT), progress_bar=False)
    nb = nbformat.read(out, as_version=4)
    text = "\n".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream")
    assert "tiny-llama / mixed" in text and "per output token" in text
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


def test_short_kernel_collapses_template_arguments_a_level_at_a_time_and_leaves_short_names_alone():
    cuda = ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t"
            "<c10::BFloat16, at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator()"
            "(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, c10::BFloat16, 4, 8> >"
            "(at::native::ReduceOp<c10::BFloat16, float, unsigned int, c10::BFloat16, 4, 8>)")
    assert profile.short_kernel(cuda) == "at::native::reduce_kernel<128, 4, at::native::ReduceOp<…> >(…)"
    assert profile.short_kernel("triton_red_fused_2") == "triton_red_fused_2"
    assert profile.short_kernel("void vllm::moe::k<8, 64>(float const*)") == "void vllm::moe::k<8, 64>(float const*)"
    flat = "x" * 200  # nothing to collapse: cut, and marked as cut
    assert profile.short_kernel(flat) == "x" * 89 + "…"
