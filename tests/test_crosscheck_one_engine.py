"""The crosscheck's one-engine design (`--design paired`): both tools timed on one engine per block.

The controller, planner and summary run with the FAKE command-mode worker standing in for the engine
(it answers both sides' passes alike); the lent engine's argument check is a plain function; one real
block on the tiny Qwen2-VL-style model times the harness and vLLM's own benchmark main() on one CPU
engine, image prompts on both sides."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.core.errors import UserError
from harness.experiments import crosscheck as cc
from harness.experiments import crosscheck_paired
from harness.measure import paired
from harness.measure.paired import Design, block_plan
from harness.measure.sweep import SweepArgs
from harness.schema import record
from tests.conftest import FAKE_BENCH, worker_module, write_scenario

FAKE_COMMANDS = Path(__file__).parent / "fakes" / "fake_commands.py"

SCENARIO = """
name: t
legs: [cpu-0.27.1, cpu-0.32.0]
repeats: 2
models:
  - {name: m, path: tiny, engine_args: {fake_tok_s: 100.0, fake_steady: true}}
workloads:
  - {name: thr, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}
  - {name: lat, kind: latency, input_len: 8, output_len: 4}
"""


def test_the_two_sides_swap_places_every_round_and_every_block():
    d = Design(blocks=2, pairs=3, sides=True)
    firsts = []
    for block in (1, 2):
        passes = [s for s in block_plan(["L"], ["a:h", "a:v", "b:h", "b:v"], d, block) if s.what == "pass"]
        assert [s.round for s in passes] == [1] * 4 + [2] * 4 + [3] * 4
        for r in (1, 2, 3):
            mine = [s.workload for s in passes if s.round == r]
            # Each workload's two sides back to back; which side goes first swaps.
            assert {tuple(mine[:2]), tuple(mine[2:])} <= {("a:h", "a:v"), ("a:v", "a:h"), ("b:h", "b:v"), ("b:v", "b:h")}
            firsts.append(mine[0])
    assert firsts == ["a:h", "a:v", "a:h", "a:v", "a:h", "a:v"]
    # Without sides the order of an engine's workloads never changes.
    plain = [s.workload for s in block_plan(["L"], ["x", "y"], Design(blocks=1, pairs=2), 1) if s.what == "pass"]
    assert plain == ["x", "y", "x", "y"]


@pytest.fixture
def fake_one_engine(fake_sweep, monkeypatch, tmp_path):
    monkeypatch.setattr(paired, "COMMAND_WORKER", FAKE_COMMANDS)
    monkeypatch.setattr(cc, "VLLM_BENCH", FAKE_BENCH)

    def run(**kw):
        args = SweepArgs(scenario=str(write_scenario(tmp_path, SCENARIO)), results=tmp_path / "r", design="paired",
                         diagnose=False, **kw)
        return cc.crosscheck(args)
    return run


def test_one_engine_per_leg_and_block_both_sides_on_it_and_the_block_is_the_unit(fake_one_engine, tmp_path):
    summary = fake_one_engine(blocks=3, pairs=2)
    rows = {r["leg"]: r for r in summary["rows"]}
    assert set(rows) == {"cpu-0.27.1", "cpu-0.32.0"}  # the latency workload is not vLLM's throughput bench's
    for row in rows.values():
        assert row["design"] == "one engine" and row["workload"] == "thr"
        assert row["method"] == "paired" and row["n_pairs"] == 3          # blocks, not passes
        assert [len(b) for b in row["round_ratios"]] == [2, 2, 2]
        # A block's ratio is the geometric mean of its rounds' pass ratios.
        for block, ratio in zip(row["round_ratios"], row["pair_ratios"]):
            assert ratio == pytest.approx(math.exp(sum(map(math.log, block)) / len(block)))
    study = tmp_path / "r" / "t"
    for leg in ("cpu-0.27.1", "cpu-0.32.0"):
        engines = sorted(p.name for p in (study / "runs" / "t" / leg / "m").iterdir() if p.name.startswith("engine-"))
        assert engines == ["engine-sides-b1", "engine-sides-b2", "engine-sides-b3"]
        spec = json.loads((study / "runs" / "t" / leg / "m" / "engine-sides-b1" / "spec.json").read_text())
        arms = [Path(i["run_dir"]).parts[-2] for i in spec["runs"]]
        assert arms == ["harness-one-engine-no-prefix-cache", "vllm-bench-one-engine-no-prefix-cache"]
        assert spec["engine_args"]["enable_prefix_caching"] is False
    rec = json.loads((study / "runs" / "t" / "cpu-0.32.0" / "m" / "thr" / "vllm-bench-one-engine-no-prefix-cache"
                      / "r2" / "results.json").read_text())
    passes = rec["paired"]["passes"]
    assert [p["round"] for p in passes] == [1, 2] and [p["position"] for p in passes] == [0, 1]
    md = (study / "crosscheck.md").read_text()
    assert "thr (one engine)" in md and "the unit of replication is the engine block" in md


def test_one_engine_summary_is_kept_beside_a_per_run_one(fake_one_engine, fake_sweep, monkeypatch, tmp_path):
    fake_one_engine(blocks=3, pairs=1, legs=("cpu-0.32.0",))
    cc.crosscheck(SweepArgs(scenario=str(write_scenario(tmp_path, SCENARIO)), results=tmp_path / "r",
                            legs=("cpu-0.32.0",), diagnose=False))
    view = json.loads((tmp_path / "r" / "t" / "crosscheck.json").read_text())
    assert sorted(r["design"] for r in view["rows"]) == ["one engine", "per run"]
    assert len(list((tmp_path / "r" / "t" / "crosscheck").glob("*.json"))) == 2


@pytest.mark.parametrize("flag", [{"prime": True}, {"repeats": 3}, {"engine": "per-run"}])
def test_what_the_one_engine_design_cannot_take_is_refused_in_one_line(fake_one_engine, flag):
    with pytest.raises(UserError, match="does not combine with the crosscheck's one-engine design"):
        fake_one_engine(dry_run=True, **flag)


def test_the_lent_engine_is_checked_against_what_vllms_benchmark_asked_for():
    mod = worker_module("vllm_bench.py", "vllm_bench_worker_lent")
    engine = object()
    lent = mod.Lent(engine)

    import dataclasses

    # What vLLM's benchmark builds from its command line: an EngineArgs dataclass.

    Asked = dataclasses.make_dataclass("Asked", [("model", str), ("max_model_len", int), ("seed", int),
                                                 ("mm_processor_cache_gb", float), ("enable_prefix_caching", bool)])
    assert lent.from_engine_args(Asked("/m", 2048, 0, 0.0, False)) is engine
    resident = {"max_model_len": 2048, "seed": 0, "mm_processor_cache_gb": 0, "enable_prefix_caching": False,
                "disable_log_stats": False}
    assert lent.mismatch("/m", resident) == []
    assert lent.mismatch("/m", resident | {"max_model_len": 4096}) == ["max_model_len: engine 4096, benchmark 2048"]
    assert lent.mismatch("/other", resident) == ["model: engine '/other', benchmark '/m'"]
    assert lent.mismatch("/m", resident | {"enforce_eager": True}) == ["enforce_eager: engine True, benchmark '(not asked)'"]
    # The older construction, LLM(**asdict(engine_args)), is lent too.
    assert lent(model="/m", max_model_len=1) is engine and lent.asked == {"model": "/m", "max_model_len": 1}


REAL = """
name: one-engine-real
legs: [cpu-0.32.0]
timeout_s: 900
models:
  - name: tiny-qwen2-vl
    path: tiny-qwen2-vl
    dtype: float32
    engine_args: {max_model_len: 1024, gpu_memory_utilization: 0.2, enforce_eager: true, mm_processor_cache_gb: 0,
                  limit_mm_per_prompt: {image: 1, video: 0}}
workloads:
  - {name: image, kind: throughput, modality: image, input_len: 16, output_len: 8, num_prompts: 8, width: 56,
     height: 56}
"""


@pytest.mark.engine
def test_real_one_engine_block_times_both_tools_on_the_same_cpu_engine(tmp_path):
    """One block of two rounds on the tiny Qwen2-VL-style model: the harness's pass and vLLM's own
    benchmark main() (random-mm through its chat path) on one engine, the same work on both sides."""
    import os

    os.environ["HARNESS_LOCK"] = str(tmp_path / "measure.lock")
    args = SweepArgs(scenario=str(write_scenario(tmp_path, REAL)), results=tmp_path / "r", design="paired",
                     blocks=1, pairs=2, diagnose=False)
    summary = cc.crosscheck(args)
    (row,) = summary["rows"]
    assert row["design"] == "one engine" and row["failed"] == [], row["failed"]
    assert row["work_check"]["matched"] is True, row["work_check"]
    assert len(row["round_ratios"]) == 1 and len(row["round_ratios"][0]) == 2 and all(x > 0 for x in row["round_ratios"][0])
    runs = tmp_path / "r" / "one-engine-real" / "runs" / "one-engine-real" / "cpu-0.32.0" / "tiny-qwen2-vl"
    vllm_side = json.loads((runs / "image" / "vllm-bench-one-engine-no-prefix-cache" / "r1" / "worker.json").read_text())
    assert vllm_side["work"]["inputs"]["lent_engine"] is True and vllm_side["work"]["passes"] == 2
    assert vllm_side["work"]["inputs"]["vllm_dataset"] == "random-mm"
    # One engine for both tools: started once, then four passes on it.
    phases = [json.loads(x)["phase"] for x in (runs / "engine-sides-b1" / "run.jsonl").read_text().splitlines()]
    assert phases.count("engine_init_end") == 1
    replies = [json.loads(x) for x in (runs / "engine-sides-b1" / "replies.jsonl").read_text().splitlines()]
    assert sum(r.get("cmd") == "pass" for r in replies) == 4
    assert [p.name for p in runs.iterdir() if p.name.startswith("engine-")] == ["engine-sides-b1"]
    # Every pass split at its last request handed over: the timed call's 8 requests (vLLM's warm-up
    # call is not the one split), its parts adding up to the call, the call inside the pass's clock.
    for side in ("harness-one-engine-no-prefix-cache", "vllm-bench-one-engine-no-prefix-cache"):
        rec = record.read(runs / "image" / side / "r1" / "results.json")
        assert rec.schema_version == record.SCHEMA_VERSION and len(rec.paired.passes) == 2
        for p in rec.paired.passes:
            h = p.handover
            assert h is not None and h.requests == 8, (side, p)
            assert h.handover_s + h.tail_s == pytest.approx(h.call_s) and 0 < h.add_s <= h.handover_s
            assert 0.8 * p.seconds <= h.call_s <= p.seconds + 0.05, (side, p.seconds, h)
    assert set(row["handover"]) == {"harness", "vllm"} and row["handover"]["vllm"]["passes"] == 2
    # The harness's image workload on a real engine (tests/test_multimodal.py measures only audio for it):
    # 56x56 is 4x4 patches, merged 2x2: 4 placeholder tokens per image, counted from the engine.
    h = record.read(runs / "image" / "harness-one-engine-no-prefix-cache" / "r1" / "results.json")
    assert h.work.inputs["num_images"] == 8 and h.work.inputs["placeholder_tokens"] == 8 * 4
    assert h.work.prompt_tokens > h.work.inputs["text_prompt_tokens"]
    assert h.metrics.total_tok_s > h.metrics.output_tok_s > 0
    assert h.work.inputs["mm_processor_cache_gb"] == 0
    assert h.manifest["leg_patches"] and h.manifest["packages"]["torchvision"]


def test_a_version_4_record_reads_as_per_run(tmp_path):
    from harness.schema import crosscheck as crosscheck_file

    path = tmp_path / "c.json"
    path.write_text(json.dumps({"schema_version": 4, "rows": [{"leg": "L", "model": "m", "workload": "w",
                                                                "modality": "image"}]}))
    (row,) = crosscheck_file.read(path).rows
    assert row.design == "per run" and row.round_ratios == [] and row.modality == "image" and row.handover == {}
    path.write_text(json.dumps({"schema_version": 5, "rows": [{"leg": "L", "model": "m", "workload": "w",
                                                                "design": "one block"}]}))
    with pytest.raises(UserError, match="c.json"):
        crosscheck_file.read(path)


def test_from_records_summarises_one_engine_blocks_like_the_crosscheck_did(fake_one_engine, tmp_path):
    measured = fake_one_engine(blocks=3, pairs=2, legs=("cpu-0.32.0",))
    args = SweepArgs(scenario=str(write_scenario(tmp_path, SCENARIO)), results=tmp_path / "r", design="paired",
                     blocks=3, legs=("cpu-0.32.0",))
    again = cc.from_records(args)
    (a,), (b,) = measured["rows"], again["rows"]
    assert a["design"] == b["design"] == "one engine" and a["pair_ratios"] == b["pair_ratios"]
    assert a["round_ratios"] == b["round_ratios"] and b["unmeasured"] == []


def test_the_transport_share_is_of_one_timed_region_when_a_run_has_several_passes():
    # vLLM's side on one engine: timed_s sums its three calls, each of which decoded every request's
    # data URL; the share is of one call's region (it read a third of that before).
    from types import SimpleNamespace as NS

    from harness.experiments import crosscheck_work

    t = {"s_per_request": 0.005, "what": "MP4 video data URL"}
    one_call = NS(work=NS(inputs={"transport": t}, num_seqs=512, passes=None), timing=NS(timed_s=14.6))
    three = NS(work=NS(inputs={"transport": t}, num_seqs=512, passes=3), timing=NS(timed_s=3 * 14.6))
    for r in (one_call, three):
        assert crosscheck_work.transport([r])["share_of_vllm_timed"] == pytest.approx(0.005 * 512 / 14.6)


def test_more_blocks_with_resume_reuse_the_blocks_measured_whole(fake_one_engine, tmp_path):
    fake_one_engine(blocks=3, pairs=2, legs=("cpu-0.32.0",))
    more = fake_one_engine(blocks=4, pairs=2, legs=("cpu-0.32.0",), resume=True)
    (row,) = more["rows"]
    assert row["n_pairs"] == 4 and [len(b) for b in row["round_ratios"]] == [2, 2, 2, 2]
    index = json.loads(sorted((tmp_path / "r" / "t" / "sweeps").glob("*.json"))[-1].read_text())
    reused = {(e["run_id"].split("/")[-1], e["reused"]) for e in index["runs"]}
    assert reused == {("r1", True), ("r2", True), ("r3", True), ("r4", False)}
