"""Crosscheck mechanics with the FAKE bench standing in for both the harness worker and vLLM's
benchmark (the real comparison needs real engines: see results/*/crosscheck*.md)."""

from __future__ import annotations

import pytest

import json

from harness.experiments import crosscheck as cc
from harness.experiments import crosscheck_md as ccmd
from harness.measure.sweep import SweepArgs
from tests.conftest import FAKE_BENCH, worker_module, write_scenario

SCENARIO = """
name: t
legs: [cpu-0.32.0]
repeats: 2
models:
  - {name: m, path: tiny, engine_args: {fake_tok_s: 100.0}}
workloads:
  - {name: thr, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}
  - {name: lat, kind: latency, input_len: 8, output_len: 4}
"""


def test_pairs_back_to_back_with_prefix_caching_off(tmp_path, fake_sweep, monkeypatch):
    monkeypatch.setattr(cc, "VLLM_BENCH", FAKE_BENCH)
    args = SweepArgs(scenario=str(write_scenario(tmp_path, SCENARIO)), results=tmp_path / "r")
    summary = cc.crosscheck(args)
    (row,) = summary["rows"]
    assert row["workload"] == "thr" and row["harness_tok_s"] == [100.0, 100.0] and row["ratio"] == 1.0
    index = json.loads(sorted((tmp_path / "r" / "t" / "sweeps").glob("*.json"))[-1].read_text())
    arms = [r["run_id"].split("/")[4] for r in index["runs"]]
    # Repetition outermost; the pair's order alternates with the repeat (odd: the harness first).
    assert arms == ["harness-no-prefix-cache", "vllm-bench-no-prefix-cache",
                    "vllm-bench-no-prefix-cache", "harness-no-prefix-cache"]
    for r in index["runs"]:
        spec = json.loads((tmp_path / "r" / "t" / "runs" / r["run_id"] / "spec.json").read_text())
        assert spec["engine_args"]["enable_prefix_caching"] is False
    assert (tmp_path / "r" / "t" / "crosscheck.md").read_text().count("| cpu-0.32.0 |") == 1
    assert row["pair_ratios"] == [1.0, 1.0]  # each repeat's back-to-back pair
    assert "Each repeat's pair on its own" in (tmp_path / "r" / "t" / "crosscheck.md").read_text()


def test_prefix_caching_on_reuses_the_sweeps_default_arm(tmp_path, fake_sweep, monkeypatch):
    from harness.measure.sweep import sweep

    monkeypatch.setattr(cc, "VLLM_BENCH", FAKE_BENCH)
    args = SweepArgs(scenario=str(write_scenario(tmp_path, SCENARIO)), results=tmp_path / "r")
    sweep(args)
    import dataclasses

    cc.crosscheck(dataclasses.replace(args, resume=True), prefix_caching=True)
    index = json.loads(sorted((tmp_path / "r" / "t" / "sweeps").glob("*.json"))[-1].read_text())
    reused = {r["run_id"].split("/")[4]: r["reused"] for r in index["runs"]}
    assert reused == {"default": True, "vllm-bench": False}
    assert (tmp_path / "r" / "t" / "crosscheck-prefix-caching.json").exists()


def test_dry_run_writes_nothing(tmp_path, fake_sweep):
    args = SweepArgs(scenario=str(write_scenario(tmp_path, SCENARIO)), results=tmp_path / "r", dry_run=True)
    cc.crosscheck(args)
    assert not (tmp_path / "r" / "t" / "crosscheck.json").exists()


@pytest.mark.engine
def test_tokenization_probe_measures_what_only_vllms_benchmark_times(tmp_path):
    # Real leg, real tokenizer, no engine: encoding the workload's prompts as text takes measurable time.
    from harness.experiments.crosscheck import study_rows
    from harness.experiments.crosscheck_tokenization import tokenization_cost, tokenization_md
    from harness.measure.sweep import SweepArgs

    rows = tokenization_cost(SweepArgs(scenario="cpu-tiny", results=tmp_path, legs=("cpu-0.32.0",),
                                       workloads=("mixed",)), crosscheck_rows=study_rows, repeats=2)
    assert len(rows) == 1 and rows[0]["tokenize_s"] > 0 and rows[0]["text_prompt_tokens"] > 0
    assert rows[0]["share"] is None  # no crosscheck in this fresh study: nothing to compare with
    assert "| cpu-0.32.0 | `tiny-llama` | mixed |" in tokenization_md(rows)


def test_crosscheck_runs_one_engine_per_run_even_when_the_scenario_reuses_engines(tmp_path, fake_sweep, monkeypatch):
    # vLLM's benchmark script measures one workload per process: a per-group scenario must not group it.
    monkeypatch.setattr(cc, "VLLM_BENCH", FAKE_BENCH)
    path = write_scenario(tmp_path, SCENARIO + "engine: per-group\n")
    summary = cc.crosscheck(SweepArgs(scenario=str(path), results=tmp_path / "r"))
    (row,) = summary["rows"]
    assert len(row["harness_tok_s"]) == 2 and len(row["vllm_tok_s"]) == 2 and row["failed"] == []
    index = json.loads(sorted((tmp_path / "r" / "t" / "sweeps").glob("*.json"))[-1].read_text())
    assert all(r["status"] == "ok" for r in index["runs"])


def _cut_short(tmp_path, monkeypatch) -> tuple[SweepArgs, object]:
    """A crosscheck whose last vLLM-benchmark run never finished (its folder holds no record), as a
    lease ending mid-series leaves it; then the leg envs cannot be resolved, as off the machine."""
    from harness.measure import sweep as sweepmod

    monkeypatch.setattr(cc, "VLLM_BENCH", FAKE_BENCH)
    args = SweepArgs(scenario=str(write_scenario(tmp_path, SCENARIO)), results=tmp_path / "r")
    cc.crosscheck(args)
    runs = tmp_path / "r" / "t" / "runs" / "t" / "cpu-0.32.0" / "m" / "thr"
    (runs / "vllm-bench-no-prefix-cache" / "r2" / "results.json").unlink()

    def no_env(*a, **k):
        raise AssertionError("from_records must not resolve a leg env")

    monkeypatch.setattr(sweepmod, "resolve_envs", no_env)
    return args, runs


def test_from_records_summarises_a_crosscheck_cut_short_and_names_what_it_lacks(tmp_path, fake_sweep, monkeypatch):
    args, _ = _cut_short(tmp_path, monkeypatch)
    (row,) = cc.from_records(args)["rows"]
    assert row["harness_tok_s"] == [100.0, 100.0] and row["vllm_tok_s"] == [100.0]
    assert row["verdict"] == "too few repeats"
    assert row["unmeasured"] == ["t/cpu-0.32.0/m/thr/vllm-bench-no-prefix-cache/r2"]
    assert row["pair_ratios"] == [1.0]  # r2 has no vLLM side: no pair
    view = json.loads((tmp_path / "r" / "t" / "crosscheck.json").read_text())
    assert view["invocation_id"] == "from-records" and view["rows"][0]["unmeasured"] == row["unmeasured"]
    assert "Planned but without a finished record" in (tmp_path / "r" / "t" / "crosscheck.md").read_text()


def test_from_records_refuses_records_measured_with_other_settings(tmp_path, fake_sweep, monkeypatch):
    from harness.core.errors import UserError

    args, runs = _cut_short(tmp_path, monkeypatch)
    path = runs / "harness-no-prefix-cache" / "r2" / "results.json"
    data = json.loads(path.read_text())
    data["engine_args"] = {**data["engine_args"], "max_num_seqs": 7}
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match="measured with other settings"):
        cc.from_records(args)


def test_the_band_is_judged_by_the_whole_interval_and_only_where_the_study_sets_one(tmp_path):
    row = {"leg": "l", "model": "m", "workload": "w", "harness_tok_s": [1.0], "vllm_tok_s": [1.0], "ratio": 0.996,
           "ci_low": 0.992, "ci_high": 1.004, "spread_harness": None, "spread_vllm": None, "timed_share_harness": []}
    assert ccmd.band_verdict(row, 0.01) == "within"
    assert ccmd.band_verdict(row | {"ci_low": 0.95}, 0.01).startswith("undecided")
    assert ccmd.band_verdict(row | {"ratio": 0.9, "ci_low": 0.85, "ci_high": 0.95}, 0.01) == "below"
    assert ccmd.band_verdict(row | {"ci_low": None, "ci_high": None}, 0.01) == "no interval"
    assert "1 ± 0.01? |" in ccmd.crosscheck_md({"rows": [row]}, 0.01) and "| within |" in ccmd.crosscheck_md({"rows": [row]}, 0.01)
    assert "±" not in ccmd.crosscheck_md({"rows": [row]})
    (tmp_path / "study.yaml").write_text("name: s\ncrosscheck_band: 0.03\n")
    assert cc.study_band(tmp_path) == 0.03
    (tmp_path / "study.yaml").write_text("name: s\n")
    assert cc.study_band(tmp_path) is None


def test_single_files_from_before_the_split_keep_their_prefix_caching_by_name(tmp_path):
    """A study from before crosscheck records said whether prefix caching was on: rewriting its views
    must not pour the prefix-caching rows into the view without it."""
    row = {"leg": "l", "model": "m", "workload": "w", "harness_tok_s": [1.0], "vllm_tok_s": [1.0]}
    (tmp_path / "crosscheck.json").write_text(json.dumps({"schema_version": 1, "rows": [row]}))
    (tmp_path / "crosscheck-prefix-caching.json").write_text(json.dumps({"schema_version": 1, "rows": [row, row]}))
    assert [r["prefix_caching"] for r in cc.load_all(tmp_path)] == [False, True]
    cc.write_views(tmp_path)
    assert len(json.loads((tmp_path / "crosscheck.json").read_text())["rows"]) == 1
    assert len(json.loads((tmp_path / "crosscheck-prefix-caching.json").read_text())["rows"]) == 2


def _set(runs, arm: str, rep: int, **fields) -> None:
    path = runs / arm / f"r{rep}" / "results.json"
    data = json.loads(path.read_text())
    for k, v in fields.items():
        if k == "tok_s":
            data["metrics"]["total_tok_s"] = v
        else:
            data[k] = v
    path.write_text(json.dumps(data))


def test_three_pairs_are_judged_by_the_paired_rule_with_welch_beside_it(tmp_path, fake_sweep, monkeypatch):
    # The host ran 3% faster in repeat 2 and 3% slower in repeat 3, both sides alike; inside each pair the
    # harness reads 0.4-0.6% below vLLM. Paired, that is a narrow interval; Welch sees mostly the host.
    monkeypatch.setattr(cc, "VLLM_BENCH", FAKE_BENCH)
    args = SweepArgs(scenario=str(write_scenario(tmp_path, SCENARIO)), results=tmp_path / "r", repeats=3)
    cc.crosscheck(args)
    runs = tmp_path / "r" / "t" / "runs" / "t" / "cpu-0.32.0" / "m" / "thr"
    for rep, host, gap in ((1, 1.0, 0.995), (2, 1.03, 0.996), (3, 0.97, 0.994)):
        _set(runs, "vllm-bench-no-prefix-cache", rep, tok_s=30000 * host)
        _set(runs, "harness-no-prefix-cache", rep, tok_s=30000 * host * gap)
    (row,) = cc.from_records(args)["rows"]
    assert row["method"] == "paired" and row["n_pairs"] == 3
    assert row["ratio"] == pytest.approx(0.995, abs=1e-3) and row["ci_high"] < 1.0 and row["verdict"] == "slower"
    assert row["welch"]["verdict"] == "undecided" and row["welch"]["ci_low"] < 0.95
    md = (tmp_path / "r" / "t" / "crosscheck.md").read_text()
    assert "paired, 3 pairs" in md and "Welch's rule over the same repeats, unpaired" in md


def test_a_pair_is_two_runs_of_one_invocation(tmp_path, fake_sweep, monkeypatch):
    # A side measured again by a later invocation (a lease ended between the two runs) pairs with nothing:
    # with two pairs left, Welch decides.
    monkeypatch.setattr(cc, "VLLM_BENCH", FAKE_BENCH)
    args = SweepArgs(scenario=str(write_scenario(tmp_path, SCENARIO)), results=tmp_path / "r", repeats=3)
    cc.crosscheck(args)
    runs = tmp_path / "r" / "t" / "runs" / "t" / "cpu-0.32.0" / "m" / "thr"
    for rep in (1, 2, 3):
        _set(runs, "harness-no-prefix-cache", rep, tok_s=100.0 + rep)
    _set(runs, "vllm-bench-no-prefix-cache", 3, invocation_id="a-later-lease")
    (row,) = cc.from_records(args)["rows"]
    assert row["n_pairs"] == 2 and len(row["pair_ratios"]) == 2 and row["method"] == "welch"
    assert row["ci_low"] == row["welch"]["ci_low"]


def test_a_version_2_record_reads_as_welch(tmp_path):
    from harness.schema import crosscheck as schema

    row = {"leg": "l", "model": "m", "workload": "w", "harness_tok_s": [1.0, 1.1], "vllm_tok_s": [1.0, 1.0],
           "ratio": 1.05, "ci_low": 0.9, "ci_high": 1.2, "verdict": "no difference detected", "pair_ratios": [1.0, 1.1]}
    (tmp_path / "x.json").write_text(json.dumps({"schema_version": 2, "rows": [row]}))
    rec = schema.read(tmp_path / "x.json")
    (r,) = rec.rows
    assert rec.schema_version == schema.SCHEMA_VERSION and r.method == "welch" and r.n_pairs == 2
    assert r.welch == {"ratio": 1.05, "ci_low": 0.9, "ci_high": 1.2, "verdict": "no difference detected"}


def test_prime_runs_one_engine_per_leg_first_keeps_it_apart_and_never_reuses_it(tmp_path, fake_sweep, monkeypatch):
    # The priming run fills a machine's compile caches before the leg's first pair: kept as a record of its
    # own arm, out of the summary; a later crosscheck on another machine primes again (a new repeat).
    monkeypatch.setattr(cc, "VLLM_BENCH", FAKE_BENCH)
    args = SweepArgs(scenario=str(write_scenario(tmp_path, SCENARIO)), results=tmp_path / "r")
    import dataclasses

    (row,) = cc.crosscheck(dataclasses.replace(args, prime=True))["rows"]
    assert row["harness_tok_s"] == [100.0, 100.0] and row["failed"] == []
    index = json.loads(sorted((tmp_path / "r" / "t" / "sweeps").glob("*.json"))[-1].read_text())
    ids = [r["run_id"].split("/", 4)[4] for r in index["runs"]]
    assert ids[0] == "harness-no-prefix-cache-prime/r1" and len(ids) == 5
    cc.crosscheck(dataclasses.replace(args, resume=True, prime=True))
    index = json.loads(sorted((tmp_path / "r" / "t" / "sweeps").glob("*.json"))[-1].read_text())
    measured = [r["run_id"].split("/", 4)[4] for r in index["runs"] if not r["reused"]]
    assert measured == []  # every pair reused: nothing to prime for
    cc.crosscheck(dataclasses.replace(args, resume=True, prime=True, repeats=3))
    index = json.loads(sorted((tmp_path / "r" / "t" / "sweeps").glob("*.json"))[-1].read_text())
    measured = [r["run_id"].split("/", 4)[4] for r in index["runs"] if not r["reused"]]
    assert measured == ["harness-no-prefix-cache-prime/r2", "harness-no-prefix-cache/r3", "vllm-bench-no-prefix-cache/r3"]
    assert (tmp_path / "r" / "t" / "runs" / "t" / "cpu-0.32.0" / "m" / "thr" / "harness-no-prefix-cache-prime" / "r1"
            / "results.json").exists()


def test_a_crosscheck_record_from_a_newer_harness_is_one_line_naming_it(tmp_path):
    from harness.core.errors import UserError
    from harness.schema import crosscheck as schema

    (tmp_path / "x.json").write_text(json.dumps({"schema_version": schema.SCHEMA_VERSION + 1, "rows": []}))
    with pytest.raises(UserError, match=rf"x\.json.*schema_version {schema.SCHEMA_VERSION + 1} is not one this harness reads"):
        schema.read(tmp_path / "x.json")


def test_a_legacy_record_gives_way_in_the_view_to_a_record_with_settings(tmp_path):
    """The split's legacy files (no settings) and a later record of the same row: the view shows the later
    one only; the legacy file stays, and a row only it holds is still shown."""
    row = {"leg": "l", "model": "m", "workload": "w", "harness_tok_s": [1.0], "vllm_tok_s": [1.0], "ratio": 0.9}
    other = row | {"workload": "w2"}
    folder = tmp_path / "crosscheck"
    folder.mkdir()
    (folder / "l--m--w--legacy.json").write_text(json.dumps(
        {"schema_version": 3, "rows": [row], "prefix_caching": True, "settings": None}))
    (folder / "l--m--w2--legacy.json").write_text(json.dumps(
        {"schema_version": 3, "rows": [other], "prefix_caching": True, "settings": None}))
    (folder / "l--m--w--abc.json").write_text(json.dumps(
        {"schema_version": 3, "rows": [row | {"ratio": 0.95}], "prefix_caching": True,
         "settings": {"prefix_caching": True}}))
    cc.write_views(tmp_path)
    rows = json.loads((tmp_path / "crosscheck-prefix-caching.json").read_text())["rows"]
    assert sorted((r["workload"], r["ratio"]) for r in rows) == [("w", 0.95), ("w2", 0.9)]
    assert (folder / "l--m--w--legacy.json").exists()


MM_SCENARIO = """
name: t
legs: [cpu-0.32.0]
repeats: 1
models:
  - {name: m, path: tiny, modality: multimodal, engine_args: {fake_tok_s: 100.0}}
workloads:
  - {name: img, kind: throughput, modality: image, input_len: 8, output_len: 4, num_prompts: 2, width: 56, height: 56}
"""


def test_image_and_video_are_planned_against_vllms_random_mm_with_the_workloads_sizes():
    # The argv vLLM's side runs (the worker passes it on unchanged): random-mm through the chat
    # backend, exactly the workload's item count, size, frames and lengths, and a dataset path, without
    # which vLLM 0.24.0-0.32.0 silently run the text-only `random` dataset (docs/defects.md).
    from harness import workloads

    work = {"input_len": 64, "output_len": 32, "images_per_prompt": 2, "videos_per_prompt": 1, "num_frames": 8,
            "width": 224, "height": 160}

    def flags(modality: str) -> dict[str, str]:
        argv = workloads.vllm_dataset_args(modality, work, "/some/path")
        return {a: b for a, b in zip(argv, argv[1:]) if a.startswith("--")}

    image, video = flags("image"), flags("video")
    for f in (image, video):
        assert f["--backend"] == "vllm-chat" and f["--dataset-name"] == "random-mm"
        assert f["--dataset-path"] == "/some/path"
        assert (f["--random-input-len"], f["--random-output-len"], f["--random-range-ratio"]) == ("64", "32", "0.0")
        assert f["--random-mm-num-mm-items-range-ratio"] == "0.0"
    assert image["--random-mm-base-items-per-request"] == "2"
    assert json.loads(image["--random-mm-limit-mm-per-prompt"]) == {"image": 2, "video": 0}
    assert image["--random-mm-bucket-config"] == "{(160, 224, 1): 1.0}"   # (height, width, frames)
    assert video["--random-mm-base-items-per-request"] == "1"
    assert json.loads(video["--random-mm-limit-mm-per-prompt"]) == {"image": 0, "video": 1}
    assert video["--random-mm-bucket-config"] == "{(160, 224, 8): 1.0}"
    text = workloads.vllm_dataset_args("text", work, "/some/path")
    assert text == ["--dataset-name", "random", "--random-input-len", "64", "--random-output-len", "32",
                    "--random-range-ratio", "0.0"]
    with pytest.raises(workloads.NotComparable, match="audio"):
        workloads.vllm_dataset_args("audio", work, "/some/path")
    with pytest.raises(workloads.NotComparable, match="from a folder"):
        workloads.vllm_dataset_args("image", work | {"source": "/imgs"}, "/some/path")


def test_a_modality_without_a_vllm_dataset_is_refused_in_one_line(tmp_path, fake_sweep, monkeypatch):
    # An extension point: a new modality that names no vLLM dataset is never timed against other work.
    import types

    from harness import workloads
    from harness.core.errors import UserError

    dummy = types.ModuleType("dummy_modality")
    monkeypatch.setitem(__import__("sys").modules, "dummy_modality", dummy)
    monkeypatch.setitem(workloads.MODALITIES, "dummy", "dummy_modality")
    with pytest.raises(workloads.NotComparable, match="the dummy modality names no dataset"):
        workloads.vllm_dataset_args("dummy", {}, ".")
    only_audio = write_scenario(tmp_path, MM_SCENARIO.replace(
        "{name: img, kind: throughput, modality: image, input_len: 8, output_len: 4, num_prompts: 2, width: 56, height: 56}",
        "{name: aud, kind: throughput, modality: audio, input_len: 8, output_len: 4, num_prompts: 2, duration_s: 1}"))
    with pytest.raises(UserError, match=r"no throughput workload .* vLLM's benchmark can do \(not comparable: aud "
                                        r"\(audio: vLLM's throughput benchmark has no synthetic audio"):
        cc.crosscheck(SweepArgs(scenario=str(only_audio), results=tmp_path / "r", dry_run=True))


def test_an_image_workload_is_crosschecked_and_named_as_random_mm(tmp_path, fake_sweep, monkeypatch):
    monkeypatch.setattr(cc, "VLLM_BENCH", FAKE_BENCH)
    args = SweepArgs(scenario=str(write_scenario(tmp_path, MM_SCENARIO)), results=tmp_path / "r")
    (row,) = cc.crosscheck(args)["rows"]
    assert row["modality"] == "image" and row["ratio"] == 1.0 and row["work_check"]["matched"] is True
    index = json.loads(sorted((tmp_path / "r" / "t" / "sweeps").glob("*.json"))[-1].read_text())
    vllm_run = next(r for r in index["runs"] if "/vllm-bench" in r["run_id"])
    rec = json.loads((tmp_path / "r" / "t" / "runs" / vllm_run["run_id"] / "results.json").read_text())
    assert "random-mm dataset" in rec["arm_spec"]["description"]
    assert "the same work" in (tmp_path / "r" / "t" / "crosscheck.md").read_text()


def test_other_work_on_vllms_side_is_refused_not_printed_as_a_ratio(tmp_path, fake_sweep, monkeypatch):
    # FAKE vLLM output with text-only prompt tokens (what random-mm's silent fallback gives: the 8
    # text tokens, none of the image's placeholders the harness's side processed).
    monkeypatch.setattr(cc, "VLLM_BENCH", FAKE_BENCH)
    scenario = MM_SCENARIO.replace("fake_tok_s: 100.0", "fake_tok_s: 100.0, fake_vllm_prompt_tokens: 5")
    args = SweepArgs(scenario=str(write_scenario(tmp_path, scenario)), results=tmp_path / "r")
    (row,) = cc.crosscheck(args)["rows"]
    assert row["ratio"] is None and row["ci_low"] is None and row["pair_ratios"] == [] and row["welch"] == {}
    assert row["verdict"].startswith("refused: the two sides did other work (prompt tokens per request: harness 8.0, "
                                     "vLLM 5.0 (-37.5%))")
    md = (tmp_path / "r" / "t" / "crosscheck.md").read_text()
    assert "refused: other work" in md and "**other work, no ratio printed**" in md
    assert "1.000" not in md


def test_the_worker_reads_vllms_printed_token_counts():
    # vLLM 0.24.0-0.32.0 print these two lines (from its request outputs) but keep them out of its JSON.
    mod = worker_module("vllm_bench.py", "vllm_bench_worker")
    printed = "Throughput: 1.00 requests/s\nTotal num prompt tokens:  5408\nTotal num output tokens:  2048\n"
    assert mod._counts(printed) == {"prompt": 5408, "output": 2048}
    assert mod._counts("nothing printed") == {}


def test_an_undecided_band_row_says_how_many_pairs_would_decide_it():
    import math
    import statistics

    from harness.analyze import significance
    from harness.experiments.crosscheck_md import crosscheck_md

    def row(name, pairs, *, low, high, method="paired", design="per run"):
        gm = math.exp(statistics.fmean(math.log(x) for x in pairs))
        return {"leg": name, "model": "m", "workload": "w", "design": design, "method": method, "n_pairs": len(pairs),
                "pair_ratios": pairs, "ratio": gm, "ci_low": low, "ci_high": high, "verdict": "undecided",
                "harness_tok_s": [1.0], "vllm_tok_s": [1.0], "spread_harness": 0.0, "spread_vllm": 0.0,
                "timed_share_harness": [], "round_ratios": [], "welch": {}, "cold_runs": [], "unmeasured": []}

    gap = [1.04, 1.07, 1.02, 1.06]          # about 5% apart: more blocks would clear 1.00
    near = [1.004, 0.996, 1.001]            # about 1: more pairs would fit inside ±3%
    rows = [row("gap", gap, low=0.99, high=1.11, design="one engine"), row("near", near, low=0.96, high=1.04),
            row("inside", near, low=0.99, high=1.01), row("welch", gap, low=0.9, high=1.2, method="welch")]
    md = crosscheck_md({"rows": rows}, band=0.03)
    (line,) = [x for x in md.splitlines() if x.startswith("What would decide")]
    logs = [math.log(x) for x in gap]
    n = significance.units_to_decide(statistics.fmean(logs), statistics.stdev(logs), 0.03)
    assert f"gap `m` w (one engine): about {n} blocks (it has 4;" in line and "would clear 1.00" in line
    assert "near `m` w: about" in line and "pairs (it has 3;" in line and "would fit inside the band" in line
    assert "inside `m`" not in line and "welch `m`" not in line   # decided, or not by the paired rule
    assert "What would decide" not in crosscheck_md({"rows": rows[2:]}, band=0.03)
