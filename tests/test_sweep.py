"""Sweep mechanics with the FAKE bench worker (no vLLM): records, resume, failures, timeouts, guards."""

from __future__ import annotations

import json
import os
import time

import pytest

from harness.schema import record
from harness.core.errors import UserError
from harness.measure.guard import node_lock
from harness.measure.run import orphans
from harness.measure.sweep import SweepArgs, plan, sweep
from tests.conftest import write_scenario

SCENARIO = """
name: t
legs: [cpu-0.27.1, cpu-0.32.0]
repeats: 2
timeout_s: 30
models:
  - name: m
    path: tiny
    engine_args: {fake_tok_s: 1234.5}
workloads:
  - {name: a, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}
  - {name: b, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}
"""


def _args(tmp_path, **kw) -> SweepArgs:
    path = write_scenario(tmp_path, kw.pop("body", SCENARIO))
    return SweepArgs(scenario=str(path), results=tmp_path / "results", **kw)


def test_plan_order_repeat_outermost(tmp_path, fake_sweep):
    _, _, planned = plan(_args(tmp_path))
    keys = [(p.spec.repeat, p.spec.leg_env.leg.name, p.spec.workload.name) for p in planned]
    assert keys == sorted(keys, key=lambda k: k[0]) and len(keys) == 8
    assert [k[0] for k in keys] == [1, 1, 1, 1, 2, 2, 2, 2]


def test_sweep_writes_complete_records(tmp_path, fake_sweep):
    res = sweep(_args(tmp_path))
    assert res.measured == 8 and res.reused == 0
    for rec in res.records:
        d = res.study_dir / "runs" / rec.run_id
        assert {"results.json", "run.jsonl", "run.log", "manifest.json", "spec.json"} <= {p.name for p in d.iterdir()}
        back = record.read(d / "results.json")
        assert back == rec and back.status == "ok" and back.metrics.throughput_tok_s == 1234.5
        assert back.schema_version == record.SCHEMA_VERSION and back.invocation_id == res.invocation_id
        phases = [json.loads(x)["phase"] for x in (d / "run.jsonl").read_text().splitlines()]
        assert phases[0] == "spawn" and phases[-1] == "exit" and "timed_start" in phases
        assert back.work.num_seqs == 2 and back.work.output_tokens == 8
    index = json.loads(res.index_path.read_text())
    assert index["finished_at"] and len(index["runs"]) == 8 and not any(r["reused"] for r in index["runs"])
    meta = (res.study_dir / "study.yaml").read_text()
    assert "cpu-0.27.1" in meta and "main_series: t" in meta


def test_resume_reuses_only_identical_fingerprints(tmp_path, fake_sweep):
    first = sweep(_args(tmp_path))
    again = sweep(_args(tmp_path, resume=True))
    assert again.measured == 0 and again.reused == 8
    assert all(r.invocation_id == first.invocation_id for r in again.records)
    index = json.loads(again.index_path.read_text())
    assert all(r["reused"] and r["measured_by"] == first.invocation_id for r in index["runs"])
    # Changing an engine argument changes the fingerprint: nothing may be reused, and the finished
    # records are not measured over unless asked for.
    body = SCENARIO.replace("1234.5", "999.0")
    before = sorted(p.read_bytes() for p in first.study_dir.rglob("results.json"))
    with pytest.raises(UserError) as e:
        sweep(_args(tmp_path, resume=True, body=body))
    msg = str(e.value)
    assert "\n" not in msg and "results.json: holds a finished record" in msg and "engine arguments" in msg
    assert "(and 7 more finished runs)" in msg and "--supersede" in msg
    assert sorted(p.read_bytes() for p in first.study_dir.rglob("results.json")) == before
    changed = sweep(_args(tmp_path, resume=True, supersede=True, body=body))
    assert changed.measured == 8 and changed.reused == 0
    assert {r.metrics.throughput_tok_s for r in changed.records} == {999.0}
    # The earlier records are kept whole beside the study, and the index says where each went.
    index = json.loads(changed.index_path.read_text())
    assert index["schema_version"] == 2 and len(index["superseded"]) == 8
    for entry in index["superseded"]:
        old = record.read(changed.study_dir / entry["moved_to"] / "results.json")
        assert old.metrics.throughput_tok_s == 1234.5 and old.invocation_id == first.invocation_id
        assert entry["measured_by"] == first.invocation_id and entry["changed"] == ["engine arguments"]
        assert entry["moved_to"].startswith(f"superseded/{changed.invocation_id}/")
    # The dataset knows, and the report's limitations say so.
    from harness.analyze.dataset import load
    from harness.publish.sections.limitations import limitations
    from harness.publish.study import load_study

    assert len(load(changed.study_dir).superseded) == 8
    said = [x for x in limitations(load_study(changed.study_dir)) if x.startswith("**Re-measured runs.**")]
    assert said and "over 8 earlier records (8 finished, 0 failed or unreadable)" in said[0]


def test_sweep_without_resume_refuses_to_measure_over_records(tmp_path, fake_sweep):
    first = sweep(_args(tmp_path, workloads=("a",)))
    with pytest.raises(UserError) as e:
        sweep(_args(tmp_path))
    assert "has no --resume" in str(e.value) and "--resume keeps finished runs" in str(e.value)
    assert first.invocation_id in str(e.value)
    # Workload b has no records yet: measuring it alone over nothing is fine.
    assert sweep(_args(tmp_path, workloads=("b",))).measured == 4


def test_retried_failures_are_kept_aside_without_asking(tmp_path, fake_sweep):
    body = SCENARIO.replace("repeats: 2", "repeats: 1").replace("{fake_tok_s: 1234.5}", '{fake_fail: "RuntimeError: boom"}')
    first = sweep(_args(tmp_path, body=body, workloads=("a",)))
    assert {r.status for r in first.records} == {"failed"}
    again = sweep(_args(tmp_path, body=body, workloads=("a",), resume=True, retry_failed=True))
    assert again.measured == 2
    index = json.loads(again.index_path.read_text())
    assert [e["status"] for e in index["superseded"]] == ["failed", "failed"]
    kept = again.study_dir / index["superseded"][0]["moved_to"]
    assert "RuntimeError: boom" in (kept / "run.log").read_text()


def test_study_yaml_left_alone_when_nothing_to_add(tmp_path, fake_sweep):
    res = sweep(_args(tmp_path, workloads=("a",), repeats=1))
    meta = res.study_dir / "study.yaml"
    edited = "# hand-written note kept by later sweeps\n" + meta.read_text()
    meta.write_text(edited)
    sweep(_args(tmp_path, workloads=("a",), repeats=1, resume=True))
    assert meta.read_text() == edited


def test_cli_sweep_exit_status_says_runs_failed(tmp_path, fake_sweep, capsys):
    from harness import cli

    ok = write_scenario(tmp_path, SCENARIO.replace("repeats: 2", "repeats: 1"))
    assert cli.main(["sweep", str(ok), "--results", str(tmp_path / "r1"), "--workload", "a"]) == 0
    bad = write_scenario(tmp_path, SCENARIO.replace("repeats: 2", "repeats: 1")
                         .replace("{fake_tok_s: 1234.5}", '{fake_fail: "RuntimeError: boom"}'))
    assert cli.main(["sweep", str(bad), "--results", str(tmp_path / "r2"), "--workload", "a"]) == cli.EXIT_RUNS_FAILED == 3
    assert "2 not ok" in capsys.readouterr().out


def test_resume_remeasures_a_run_without_results(tmp_path, fake_sweep):
    first = sweep(_args(tmp_path))
    victim = first.records[3]
    (first.study_dir / "runs" / victim.run_id / "results.json").unlink()
    again = sweep(_args(tmp_path, resume=True))
    assert again.measured == 1 and again.reused == 7
    assert next(r for r in again.records if r.run_id == victim.run_id).invocation_id == again.invocation_id


def test_fingerprint_stable_and_sensitive(tmp_path, fake_sweep):
    _, _, p1 = plan(_args(tmp_path))
    _, _, p2 = plan(_args(tmp_path))
    assert [p.spec.fingerprint for p in p1] == [p.spec.fingerprint for p in p2]
    assert len({p.spec.fingerprint for p in p1}) == len(p1)


def test_crash_in_subprocess_is_recorded_and_sweep_goes_on(tmp_path, fake_sweep):
    body = SCENARIO.replace("repeats: 2", "repeats: 1").replace(
        "engine_args: {fake_tok_s: 1234.5}\n", """engine_args: {}
  - name: broken
    path: tiny
    engine_args: {fake_fail: "AttributeError: module 'cutlass.cute.core' has no attribute 'ThrMma'"}
""")
    res = sweep(_args(tmp_path, body=body))
    bad = [r for r in res.records if r.model == "broken"]
    good = [r for r in res.records if r.model == "m"]
    assert len(bad) == 4 and all(r.status == "failed" for r in bad)
    assert len(good) == 4 and all(r.status == "ok" for r in good)
    f = bad[0].failure
    assert f.exit_code == 1
    assert f.reason == "AttributeError: module 'cutlass.cute.core' has no attribute 'ThrMma'"
    assert "Engine core initialization failed" in f.exceptions[-1]
    assert f.phase == "engine_init_start" and "Traceback" in f.traceback


def test_timeout_kills_the_whole_process_group(tmp_path, fake_sweep):
    body = SCENARIO.replace("repeats: 2", "repeats: 1").replace("timeout_s: 30", "timeout_s: 2").replace(
        "engine_args: {fake_tok_s: 1234.5}", "engine_args: {fake_sleep_s: 60, fake_child: true}")
    t0 = time.monotonic()
    res = sweep(_args(tmp_path, body=body, legs=("cpu-0.32.0",), workloads=("a",)))
    assert time.monotonic() - t0 < 30
    (rec,) = res.records
    assert rec.status == "timeout" and "timed out after 2 s" in rec.failure.reason
    time.sleep(0.5)
    assert orphans() == []


def test_lock_refuses_a_second_sweep(tmp_path, fake_sweep):
    with node_lock():
        with pytest.raises(UserError, match="another sweep is measuring on this node"):
            sweep(_args(tmp_path))
    assert not (tmp_path / "results" / "t" / "runs").exists()


def test_foreign_plugin_refused_unless_allow_dirty(tmp_path, fake_sweep, monkeypatch):
    from harness.measure import leg

    found = [{"group": "vllm.general_plugins", "name": "omni", "value": "vllm_omni:register", "dist": "vllm-omni"}]
    monkeypatch.setattr(leg, "plugins", lambda env: found)
    with pytest.raises(UserError, match="foreign vLLM plugins.*vllm-omni"):
        sweep(_args(tmp_path))
    res = sweep(_args(tmp_path, allow_dirty=True))
    assert all(r.allow_dirty and any("vllm-omni" in d for d in r.dirty) for r in res.records)


def test_gpu_busy_refused(tmp_path, fake_sweep, monkeypatch):
    """FAKE nvidia-smi answer: this machine has no GPU."""
    from harness.measure import guard

    monkeypatch.setattr(guard, "gpu_processes", lambda: ["1234, python, 1000 MiB"])
    with pytest.raises(UserError, match="GPU already has processes"):
        sweep(_args(tmp_path))


def test_dry_run_measures_nothing(tmp_path, fake_sweep):
    res = sweep(_args(tmp_path, dry_run=True))
    assert res.records == [] and not (tmp_path / "results" / "t" / "runs").exists()


def test_prime_starts_one_engine_per_leg_model_arm_before_its_first_measured_run(tmp_path, fake_sweep):
    # The plan with engine reuse; then a sweep with the FAKE bench: the priming runs are kept (arm
    # `default-prime`), stay out of the canonical cells, and a resume with nothing left to measure primes nothing.
    from harness.analyze.canonical import canonicalize
    from harness.analyze.dataset import load

    args = _args(tmp_path, prime=True, engine="per-group")
    _, _, planned = plan(args)
    keys = [(p.spec.repeat, p.spec.leg_env.leg.name, p.spec.arm.name, p.spec.workload.name, p.spec.engine)
            for p in planned]
    assert keys[0] == (1, "cpu-0.27.1", "default-prime", "a", "per-run") and keys[1][2] == "default"
    assert [k for k in keys if k[2] == "default-prime"] == [(1, "cpu-0.27.1", "default-prime", "a", "per-run"),
                                                            (1, "cpu-0.32.0", "default-prime", "a", "per-run")]
    assert [p.index for p in planned] == list(range(1, 11))
    sweep(_args(tmp_path, prime=True))  # the fake bench measures one engine per run
    canon = canonicalize(load(tmp_path / "results" / "t"))
    assert set(canon.runs["arm"]) == {"default"} and len(canon.runs) == 8
    _, _, again = plan(_args(tmp_path, prime=True, resume=True))
    assert all(p.reuse is not None for p in again) and len(again) == 8
