"""The paired design (harness.measure.paired): the pass order, the block plan, the controller with a
FAKE command-mode worker (crash, hang), the record's `paired` field, and one real-engine block."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest
import yaml

from harness.core.errors import UserError
from harness.measure import leg as legmod
from harness.measure import paired
from harness.measure.paired import Design, block_plan, round_order, williams
from harness.measure.run import orphans
from harness.measure.sweep import SweepArgs, sweep
from harness.schema import record
from tests.conftest import write_scenario

FAKE_COMMANDS = Path(__file__).parent / "fakes" / "fake_commands.py"
A, B = "cpu-0.27.1", "cpu-0.32.0"


# --- the order ------------------------------------------------------------------------------------

def test_two_legs_alternate_and_each_goes_first_equally_often():
    orders = [round_order([A, B], r) for r in range(1, 7)]
    assert orders == [[A, B], [B, A]] * 3
    assert Counter(o[0] for o in orders) == {A: 3, B: 3}
    # The next block starts one row on, so an odd number of rounds still balances over two blocks.
    firsts = [round_order([A, B], r, block=b)[0] for b in (1, 2) for r in range(1, 4)]
    assert Counter(firsts) == {A: 3, B: 3}


@pytest.mark.parametrize("n", [3, 4, 5])
def test_williams_rows_balance_first_place_and_neighbours(n):
    rows = williams(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n)
    for row in rows:
        assert sorted(row) == list(range(n))  # every leg in every round
    for pos in range(n):
        assert Counter(r[pos] for r in rows) == {leg: len(rows) // n for leg in range(n)}
    neighbours = Counter(p for r in rows for p in pairwise(r))
    assert set(neighbours.values()) == {len(rows) // n}  # each ordered neighbour pair equally often
    assert len(neighbours) == n * (n - 1)


def test_three_legs_rotate_and_random_order_is_seeded():
    legs = ["x", "y", "z"]
    orders = [round_order(legs, r) for r in range(1, 7)]
    assert all(sorted(o) == legs for o in orders)
    assert Counter(o[0] for o in orders) == {"x": 2, "y": 2, "z": 2}
    rnd = [round_order(legs, r, mode="random", seed=7) for r in range(1, 20)]
    assert rnd == [round_order(legs, r, mode="random", seed=7) for r in range(1, 20)]
    assert rnd != [round_order(legs, r, mode="random", seed=8) for r in range(1, 20)]
    assert all(sorted(o) == legs for o in rnd)


def test_block_plan_two_legs_warms_each_workload_once_per_engine_before_its_first_pass():
    steps = block_plan([A, B], ["w1", "w2"], Design(pairs=2), block=1)
    assert [s.what for s in steps[:2]] == ["start", "start"] and [s.what for s in steps[-2:]] == ["finish"] * 2
    passes = [(s.round, s.workload, s.leg) for s in steps if s.what == "pass"]
    assert passes == [(1, "w1", A), (1, "w1", B), (1, "w2", A), (1, "w2", B),
                      (2, "w1", B), (2, "w1", A), (2, "w2", B), (2, "w2", A)]
    warm = [(s.leg, s.workload) for s in steps if s.what == "warmup"]
    assert sorted(warm) == sorted({(leg, w) for leg in (A, B) for w in ("w1", "w2")})
    for i, s in enumerate(steps):
        if s.what == "warmup":
            assert steps[i + 1].what == "pass" and (steps[i + 1].leg, steps[i + 1].workload) == (s.leg, s.workload)


def test_block_plan_three_legs_with_sleep_wakes_before_and_sleeps_after_every_pass():
    legs = ["x", "y", "z"]
    steps = block_plan(legs, ["w"], Design(pairs=3, sleep=True), block=2)
    assert [s.what for s in steps[:6]] == ["start", "sleep"] * 3
    body = [s for s in steps if s.round]
    passes = [s for s in body if s.what == "pass"]
    assert len(passes) == 9 and all(sorted(s.leg for s in passes if s.round == r) == legs for r in (1, 2, 3))
    for i, s in enumerate(body):
        if s.what == "pass":
            before = body[i - 2] if body[i - 1].what == "warmup" else body[i - 1]
            assert before.what == "wake" and before.leg == s.leg
            assert body[i + 1].what == "sleep" and body[i + 1].leg == s.leg


def test_sleep_resolution_auto_on_off_and_a_cuda_leg_without_sleep_mode():
    cpu, gpu = legmod.load_leg(A), legmod.load_leg("h200-0.26.0")
    assert paired.resolve_sleep("auto", [cpu, legmod.load_leg(B)]) == (False, None)
    assert paired.resolve_sleep("auto", [gpu, legmod.load_leg("h200-0.24.0")]) == (True, None)
    assert paired.resolve_sleep("off", [gpu, gpu]) == (False, None)
    with pytest.raises(UserError, match="CPU leg"):
        paired.resolve_sleep("on", [cpu, gpu])
    old = gpu.model_copy(update={"name": "gpu-old", "vllm_version": "0.6.3"})
    sleep, why = paired.resolve_sleep("auto", [gpu, old])
    assert sleep is False and "gpu-old (vLLM 0.6.3) has no sleep mode" in why and "serial" in why


# --- the controller with the FAKE worker ----------------------------------------------------------

SCENARIO = """
name: pt
legs: [cpu-0.27.1, cpu-0.32.0]
design: paired
blocks: 2
pairs: 3
timeout_s: {timeout}
models:
  - name: tiny
    path: tiny
    engine_args: {engine_args}
workloads:
  - {{name: w1, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}}
  - {{name: w2, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}}
"""


@pytest.fixture
def fake_paired(fake_sweep, monkeypatch, tmp_path):
    """Paired sweeps whose engines are the FAKE command-mode worker; everything else is real."""
    monkeypatch.setattr(paired, "COMMAND_WORKER", FAKE_COMMANDS)

    def run(engine_args: dict, timeout: float = 60, stop_rule=None, **kw):
        path = write_scenario(tmp_path, SCENARIO.format(timeout=timeout, engine_args=json.dumps(engine_args)))
        return sweep(SweepArgs(scenario=str(path), results=tmp_path / "results", diagnose=False, **kw),
                     stop_rule=stop_rule)
    return run


def test_paired_sweep_alternates_passes_and_records_every_pass(fake_paired, monkeypatch):
    monkeypatch.setattr(paired, "SETTLE_MAX_S", 0.3)  # the FAKE partner never goes idle: wait this long
    res = fake_paired({"fake_pass_s": 0.1, "fake_busy_idle": True, "fake_only_leg": B})
    assert len(res.records) == 8 and {r.status for r in res.records} == {"ok"}
    by = {(r.leg, r.workload, r.repeat): r for r in res.records}
    for block in (1, 2):
        for wl in ("w1", "w2"):
            a, b = by[(A, wl, block)], by[(B, wl, block)]
            assert a.paired.block == block and a.paired.legs == [A, B] and a.paired.incomplete == ""
            assert [p.round for p in a.paired.passes] == [1, 2, 3] == [p.round for p in b.paired.passes]
            for pa, pb in zip(a.paired.passes, b.paired.passes):
                first, second = (pa, pb) if pa.position == 0 else (pb, pa)
                assert {pa.position, pb.position} == {0, 1}
                assert first.ended_at <= second.started_at  # one at a time, adjacent
                assert pa.seconds >= 0.1 and pa.value > 0 and pb.value > 0
            # B's engine has a child burning CPU all along: while A is timed it is counted, and A's passes
            # waited the settle cap for B to go quiet, which it never does; A's engine is idle.
            assert sum(p.partner_cpu_s for p in a.paired.passes) > 0.05
            assert all(p.settle_s >= 0.3 for p in a.paired.passes)
            assert all(p.partner_cpu_s <= 0.02 and p.settle_s < 2 for p in b.paired.passes)
            firsts = [(pa.position == 0) for pa in a.paired.passes]
            assert firsts in ([True, False, True], [False, True, False])  # A B, B A, A B (or shifted)
            assert a.engine.mode == "paired" and a.engine.instance == block
            assert a.metrics.total_tok_s and len(a.timing.passes_s) == 3
            assert record.read(res.study_dir / "runs" / a.run_id / "results.json") == a
    # Blocks are fresh engines: block 2's passes start after block 1's end.
    end1 = max(p.ended_at for r in res.records if r.repeat == 1 for p in r.paired.passes)
    start2 = min(p.started_at for r in res.records if r.repeat == 2 for p in r.paired.passes)
    assert end1 < start2
    index = json.loads(res.index_path.read_text())
    assert len(index["runs"]) == 8 and index["design"]["design"] == "paired" and index["design"]["pairs"] == 3
    assert orphans() == []


def test_a_crashed_engine_fails_its_leg_and_the_other_leg_goes_on(fake_paired):
    res = fake_paired({"fake_crash_round": 2, "fake_only_leg": B}, blocks=2)
    b1 = [r for r in res.records if r.repeat == 1]
    bad = [r for r in b1 if r.leg == B]
    good = [r for r in b1 if r.leg == A]
    assert {r.status for r in bad} == {"failed"} and {r.status for r in good} == {"ok"}
    for r in bad:
        assert "FAKE engine died in a pass" in r.failure.reason and "Traceback" in r.failure.traceback
        assert r.failure.exit_code == 1
        assert "cpu-0.32.0 engine failed at round 2" in r.paired.incomplete
    assert [p.round for p in next(r for r in bad if r.workload == "w1").paired.passes] == [1]
    assert [p.round for p in good[0].paired.passes] == [1, 2, 3]
    assert all("cpu-0.32.0 engine failed" in r.paired.incomplete for r in good)  # the pairs say so
    assert {r.status for r in res.records if r.repeat == 2 and r.leg == A} == {"ok"}
    # An idle FAKE partner is quiet at once: one settle window before each pass, no CPU during it.
    passes = [p for r in res.records if r.repeat == 2 for p in r.paired.passes if p.round == 1]
    assert len(passes) == 4
    assert all(paired.SETTLE_WINDOW_S <= p.settle_s < 2 and p.partner_cpu_s <= 0.02 for p in passes), passes
    # Once the partner is gone there is nothing to wait for or to measure.
    alone = [p for r in res.records if r.repeat == 2 and r.leg == A for p in r.paired.passes if p.round == 3]
    assert alone and all(p.settle_s == 0 and p.partner_cpu_s is None for p in alone)


def test_a_hung_engine_is_killed_after_the_timeout(fake_paired):
    t0 = time.monotonic()
    res = fake_paired({"fake_hang_round": 1, "fake_only_leg": A}, timeout=3, blocks=2)
    assert time.monotonic() - t0 < 60
    hung = [r for r in res.records if r.leg == A]
    assert {r.status for r in hung} == {"timeout"}
    assert all(r.failure.reason == "timed out after 3 s" for r in hung)
    assert {r.status for r in res.records if r.leg == B} == {"ok"}
    assert all(len(r.paired.passes) == 3 for r in res.records if r.leg == B)
    assert orphans() == []


def test_dry_run_prints_the_paired_plan(fake_paired, capsys):
    res = fake_paired({}, dry_run=True, pairs=2)
    err = capsys.readouterr().err
    assert res.measured == 0 and not (res.study_dir / "runs").exists()
    assert "paired design: 2 engine block(s) x 2 round(s), balanced order (seed 0), sleep off" in err
    assert f"round 1: w1:{A}* w1:{B}* w2:{A}* w2:{B}*" in err
    assert f"round 2: w1:{B} w1:{A} w2:{B} w2:{A}" in err


def test_resume_reuses_whole_blocks_and_refuses_a_half_done_one(fake_paired):
    first = fake_paired({})
    again = fake_paired({}, resume=True)
    assert again.measured == 0 and again.reused == 8
    victim = first.study_dir / "runs" / next(r for r in first.records if r.repeat == 2 and r.leg == B).run_id
    (victim / "results.json").unlink()
    with pytest.raises(UserError, match=r"paired block 2 of \(tiny, default\) is half done \(3 of 4 runs"):
        fake_paired({}, resume=True)
    redo = fake_paired({}, resume=True, supersede=True)
    assert redo.reused == 4 and redo.measured == 4


def test_paired_flags_refuse_what_cannot_pair(fake_paired):
    with pytest.raises(UserError, match="use --blocks"):
        fake_paired({}, repeats=2)
    with pytest.raises(UserError, match="two legs or more"):
        fake_paired({}, legs=(A,))


# --- the record -----------------------------------------------------------------------------------

def test_paired_record_round_trip_and_migration_from_version_7(tmp_path):
    from tests.studygen import record_dict

    old = record_dict() | {"schema_version": 7}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "results.json").write_text(json.dumps(old))
    rec = record.read(tmp_path / "old" / "results.json")
    assert rec.schema_version == record.SCHEMA_VERSION >= 11 and rec.paired is None
    p = record.Paired(block=1, blocks=2, pairs=2, legs=[A, B], passes=[
        record.PairedPass(round=1, position=0, started_at=1.0, ended_at=2.0, seconds=0.9, value=100.0,
                          partner_cpu_s=0.01, wake_s=0.2, sleep_s=0.3)], incomplete="")
    new = rec.model_copy(update={"paired": p})
    record.write(new, tmp_path)
    back = record.read(tmp_path / "results.json")
    assert back == new and back.paired.passes[0].wake_s == 0.2


# --- one real block -------------------------------------------------------------------------------

REAL = """
name: paired-engine
legs: [cpu-0.27.1, cpu-0.32.0]
design: paired
blocks: 2
pairs: 2
timeout_s: 900
models:
  - name: tiny-llama
    path: tiny
    dtype: float32
    engine_args: {max_model_len: 512, gpu_memory_utilization: 0.2, enforce_eager: true}
workloads:
  - {name: thr, kind: throughput, input_len: 32, output_len: 16, num_prompts: 8}
  - {name: lat, kind: latency, input_len: 32, output_len: 16, batch_size: 2, iterations: 2}
"""


@pytest.mark.engine
def test_real_engines_one_block_of_two_pairs(tmp_path):
    """Both CPU legs' engines up at once on the tiny Llama: one block (of the scenario's two) of two
    rounds; the passes alternate, every pass is recorded with its clock and the idle engine's CPU."""
    lock = tmp_path / "measure.lock"
    os.environ["HARNESS_LOCK"] = str(lock)
    path = write_scenario(tmp_path, REAL)
    from harness.measure import sweep as sweepmod

    # Blocks are at least two; this test measures the first block of the plan only (a few minutes).
    args = SweepArgs(scenario=str(path), results=tmp_path / "results", diagnose=False)
    sc, study_dir, planned = sweepmod.plan(args)
    res = sweepmod.execute_plan(args, sc, study_dir, [p for p in planned if p.spec.repeat == 1])
    assert len(res.records) == 4 and {r.status for r in res.records} == {"ok"}, \
        [(r.run_id, r.failure.reason if r.failure else "") for r in res.records]
    by = {(r.leg, r.workload): r for r in res.records}
    for wl in ("thr", "lat"):
        a, b = by[(A, wl)], by[(B, wl)]
        assert [p.round for p in a.paired.passes] == [1, 2] == [p.round for p in b.paired.passes]
        assert [p.position for p in a.paired.passes] == [0, 1] and [p.position for p in b.paired.passes] == [1, 0]
        for pa, pb in zip(a.paired.passes, b.paired.passes):
            first, second = (pa, pb) if pa.position == 0 else (pb, pa)
            assert first.started_at < first.ended_at <= second.started_at < second.ended_at
            assert pa.partner_cpu_s is not None and pa.partner_cpu_s >= 0 and pa.value > 0
        assert a.manifest["vllm"] == "0.27.1" and b.manifest["vllm"] == "0.32.0"
    thr = by[(A, "thr")]
    assert thr.metrics.total_tok_s > 0 and len(thr.timing.passes_s) == 2 and thr.work.num_seqs == 8
    assert len(by[(B, "lat")].metrics.samples_ms_per_token) == 4
    assert orphans(lock) == []



def test_series_flag_names_the_records_series(fake_paired, monkeypatch):
    # Two designs of one scenario measured into one study need two series: `--series` sets the tag.
    monkeypatch.setattr(paired, "SETTLE_MAX_S", 0.3)
    res = fake_paired({"fake_pass_s": 0.01}, series="paired-x")
    assert res.records and all(r.series == "paired-x" and r.run_id.startswith("paired-x/") for r in res.records)


def _engine_span(res, block: int) -> dict[str, tuple[float, float]]:
    """Each leg's engine of `block`: (worker start, engine up), from its engine folder's run.jsonl."""
    out = {}
    for d in res.study_dir.rglob(f"engine-*-b{block}"):
        ev = [json.loads(line) for line in (d / "run.jsonl").read_text().splitlines()]
        t = {e["phase"]: e["t"] for e in ev}
        out[d.parents[1].name] = (t["worker_start"], t["engine_init_end"])
    return out


def test_cpu_engines_start_side_by_side_and_sleeping_ones_one_at_a_time(fake_paired, monkeypatch):
    # Without sleep mode the second engine is spawned before the first is up (a block costs one start,
    # not two); with sleep mode the second starts only after the first is up and asleep.
    res = fake_paired({"fake_init_s": 1.0}, blocks=1, pairs=1)
    span = _engine_span(res, 1)
    assert set(span) == {A, B}
    assert max(s for s, _ in span.values()) < min(u for _, u in span.values())
    monkeypatch.setattr(paired, "resolve_sleep", lambda setting, legs: (True, None))
    res = fake_paired({"fake_init_s": 1.0}, blocks=1, pairs=1, study="sleepy")
    span = _engine_span(res, 1)
    first, second = sorted(span.values())
    assert first[1] <= second[0]


# --- stop when decided ------------------------------------------------------------------------------

def test_until_decided_stops_once_every_cell_is_decided_and_the_tables_test_at_alpha_over_looks(fake_paired):
    # FAKE engines: leg B's tok/s 25% higher than A's, each pass within ±1% of its leg's (fake_steady: a
    # loaded host's stretched 20 ms sleeps must not decide the test): decided at the first look (block 3 of
    # at most 6), so blocks 4-6 are never measured.
    from harness.analyze.canonical import canonicalize
    from harness.analyze.dataset import load
    from harness.analyze.tables import throughput
    from harness.analyze.until_decided import until_decided

    res = fake_paired({"fake_pass_s": 0.02, "fake_steady": True, "fake_only_tok_s": 1250.0, "fake_only_leg": B},
                      blocks=6, pairs=3, until_decided=True, min_blocks=3, stop_rule=until_decided)
    assert sorted({r.repeat for r in res.records}) == [1, 2, 3]
    study = yaml.safe_load((res.study_dir / "study.yaml").read_text())
    assert study["looks"] == 4
    t = throughput(canonicalize(load(res.study_dir)))
    assert set(t.display.filter(like="verdict").iloc[:, 0]) == {"faster"}
    assert any("α/4" in n for n in t.notes) and any(c.endswith("98.8% CI") for c in t.display.columns)


def test_until_decided_goes_on_while_a_cell_is_undecided_and_is_refused_where_it_cannot_apply(fake_paired):
    from harness.analyze.until_decided import until_decided

    res = fake_paired({"fake_pass_s": 0.02, "fake_steady": True, "fake_only_tok_s": 1250.0, "fake_only_leg": B},
                      blocks=3, pairs=3,
                      until_decided=True, min_blocks=3, stop_rule=until_decided, study="probe")
    design = Design(blocks=6, pairs=3, until_decided=True, min_blocks=3)
    sc = type("Sc", (), {"margin": 0.05, "engine_sd": None})()
    assert until_decided(res.records, 2, design, sc) is None          # before the first look
    assert "every cell decided at look 1 of 4" in until_decided(res.records, 3, design, sc)
    # The same records with leg B's passes scattered by ±30% (alternately): no cell is decided, go on.
    noisy = [r if r.leg != B else r.model_copy(update={"paired": r.paired.model_copy(update={"passes": [
        p.model_copy(update={"value": p.value * (1.3 if (p.round + r.repeat) % 2 else 0.7)})
        for p in r.paired.passes]})}) for r in res.records]
    assert until_decided(noisy, 3, design, sc) is None
    with pytest.raises(UserError, match="the first look .block 5. is after the last block .4."):
        fake_paired({}, blocks=4, until_decided=True, min_blocks=5, stop_rule=until_decided, study="x")
    with pytest.raises(UserError, match="does not combine with --resume"):
        fake_paired({}, blocks=4, until_decided=True, resume=True, stop_rule=until_decided, study="y")
    with pytest.raises(UserError, match="needs its stop rule"):
        fake_paired({}, blocks=4, until_decided=True, study="z")


def test_until_decided_takes_true_or_false_only(tmp_path):
    from harness.measure.scenario import load_scenario

    text = SCENARIO.format(timeout=60, engine_args="{}") + "until_decided: \"yes\"\n"
    with pytest.raises(UserError, match="until_decided: Input should be a valid boolean"):
        load_scenario(write_scenario(tmp_path, text))
