"""Engine reuse: the per-group ÷ per-run comparison on FAKE records (made-up values), and how a sweep
plans and orders runs in each mode (no engine: plans only)."""

from __future__ import annotations

from studygen import record_dict, write_run, write_study_yaml

from harness.analyze.dataset import load
from harness.analyze.studies.engine_reuse import reuse_md, reuse_table
from harness.measure.sweep import SweepArgs, leg_order, plan
from tests.conftest import write_scenario

LEGS = [("cpu-0.27.1", "0.27"), ("cpu-0.32.0", "0.32")]


def _study(tmp_path, per_run: dict[str, list[float]], per_group: dict[str, list[float]]):
    d = tmp_path / "reuse"
    write_study_yaml(d, LEGS, main_series="per-run")
    for series, vals in (("per-run", per_run), ("per-group", per_group)):
        for wl, xs in vals.items():
            kind = "latency" if wl.startswith("single") else "throughput"
            for i, v in enumerate(xs, 1):
                write_run(d, record_dict(leg="cpu-0.32.0", leg_label="0.32", model="tiny", workload=wl, kind=kind,
                                         value=v, repeat=i, series=series,
                                         timing={"wall_s": 60.0 if series == "per-run" else 20.0, "timed_s": 2.0}))
    return load(d)


def test_equal_modes_give_no_difference_and_a_clear_shift_is_caught(tmp_path):
    ds = _study(tmp_path, {"mixed": [100, 101, 99, 100, 102], "single-request": [2.0, 2.02, 1.98, 2.01, 2.0]},
                {"mixed": [100, 100, 101, 99, 101], "single-request": [2.4, 2.42, 2.38, 2.41, 2.39]})
    rows = {r.workload: r for r in reuse_table(ds)}
    assert rows["mixed"].ratio.verdict == "undecided"
    # Latency is lower-is-better: 20% more ms/token on the reused engine reads as slower.
    assert rows["single-request"].ratio.verdict == "slower" and rows["single-request"].ratio.value < 0.9
    assert rows["mixed"].timed_share_per_run == 2.0 / 60.0 and rows["mixed"].timed_share_per_group == 0.1
    md = reuse_md(list(rows.values()))
    assert "per-group ÷ per-run" in md and md.count("| cpu-0.32.0 |") == 2


def test_only_the_same_arm_unprofiled_is_compared(tmp_path):
    """A crosscheck's arm (prefix caching off) or a profiled run in one series is not part of the
    default arm's comparison: on the H200 study the crosscheck's run had joined it once."""
    ds = _study(tmp_path, {"mixed": [100, 101, 99]}, {"mixed": [100, 100, 101]})
    d = tmp_path / "reuse"
    write_run(d, record_dict(leg="cpu-0.32.0", leg_label="0.32", model="tiny", workload="mixed", value=50.0,
                             series="per-group", arm="harness-no-prefix-cache"))
    write_run(d, record_dict(leg="cpu-0.32.0", leg_label="0.32", model="tiny", workload="mixed", value=40.0,
                             series="per-group", repeat=4, profile={"iterations": 1}))
    rows = reuse_table(load(d))
    assert [(r.arm, len(r.per_run), len(r.per_group)) for r in rows] == [("default", 3, 3)]
    assert rows[0].ratio.verdict == "undecided" and min(rows[0].per_group) == 100
    assert ds is not None


def test_leg_order_alternates_and_shuffles_reproducibly():
    legs = ["a", "b", "c"]
    assert leg_order(legs, 1, "alternate") == ["a", "b", "c"] and leg_order(legs, 2, "alternate") == ["c", "b", "a"]
    assert leg_order(legs, 2, "fixed") == legs
    assert leg_order(legs, 3, "shuffle", 7) == leg_order(legs, 3, "shuffle", 7)
    assert sorted(leg_order(legs, 3, "shuffle", 7)) == legs


def test_per_group_plans_each_group_contiguously_and_fingerprints_the_mode(tmp_path, fake_sweep):
    sc = write_scenario(tmp_path, """
name: t
legs: [cpu-0.27.1, cpu-0.32.0]
repeats: 2
models: [{name: m, path: tiny}]
workloads:
  - {name: w1, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}
  - {name: w2, kind: latency, input_len: 8, output_len: 4}
arms: [{name: a1}, {name: a2}]
""")
    _, _, runs = plan(SweepArgs(scenario=str(sc), results=tmp_path / "r", engine="per-group"))
    ids = [p.spec.run_id for p in runs]
    # repeat 1: legs in order, repeat 2 reversed; within a leg, each arm's workloads follow one another
    assert ids[:4] == ["t/cpu-0.27.1/m/w1/a1/r1", "t/cpu-0.27.1/m/w2/a1/r1", "t/cpu-0.27.1/m/w1/a2/r1",
                       "t/cpu-0.27.1/m/w2/a2/r1"]
    assert ids[8].startswith("t/cpu-0.32.0/") and ids[8].endswith("/r2")
    _, _, per_run = plan(SweepArgs(scenario=str(sc), results=tmp_path / "r", engine="per-run"))
    fp = {p.spec.run_id: p.spec.fingerprint for p in per_run}
    assert all(fp[p.spec.run_id] != p.spec.fingerprint for p in runs)
    assert [p.spec.run_id for p in per_run][1] == "t/cpu-0.27.1/m/w1/a2/r1"  # per-run: arms innermost, as before


def test_cli_prints_the_table_and_a_study_without_both_series_is_one_line(tmp_path):
    import subprocess
    import sys

    _study(tmp_path, {"mixed": [100, 101, 99]}, {"mixed": [100, 100, 101]})
    p = subprocess.run([sys.executable, "-m", "harness", "check", "engine-reuse", str(tmp_path / "reuse")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "| cpu-0.32.0 | `tiny` | mixed | 3 / 3 |" in p.stdout
    p = subprocess.run([sys.executable, "-m", "harness", "check", "engine-reuse", str(tmp_path / "reuse"), "--per-group", "nope"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().count("\n") == 0 and "'nope'" in p.stderr
