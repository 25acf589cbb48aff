"""The transcribed B200 reference dataset: complete, faithful to the printed tables, reproducible."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import yaml

from harness.core import paths

from harness.schema import record
from harness.measure.leg import load_leg
from harness.schema.record import RunRecord
from harness.measure.scenario import load_scenario

try:
    from published_b200 import MISSING, PublishedTable, all_tables, plain, quote, ratio_agrees, value, values
except ImportError:  # tests/ imported as a package
    from tests.published_b200 import (MISSING, PublishedTable, all_tables, plain, quote, ratio_agrees,
                                      value, values)

REFERENCE = paths.RESULTS / "b200-reference"
LEGS = ["gpu-0.18.0", "gpu-0.26.0", "gpu-0.29.0"]
LABEL_TO_LEG = {"0.18": "gpu-0.18.0", "0.26": "gpu-0.26.0", "0.29": "gpu-0.29.0"}
# The falsification matrix's columns, and the models they are in the main table.
MATRIX_MODELS = {"whisper": "whisper-large-v3", "Qwen2-VL": "Qwen2-VL-7B-Instruct",
                 "Qwen3-VL-8B": "Qwen3-VL-8B-Instruct", "Omni": "Qwen2.5-Omni-7B"}
MODEL_235B = "Qwen3-VL-235B-A22B-Instruct-FP8"


@pytest.fixture(scope="module")
def tables() -> dict[str, PublishedTable]:
    return all_tables()


@pytest.fixture(scope="module")
def records() -> dict[str, RunRecord]:
    files = sorted((REFERENCE / "runs").rglob("results.json"))
    return {str(f.parent.relative_to(REFERENCE / "runs")): record.read(f) for f in files}


def series(records: dict[str, RunRecord], name: str) -> list[RunRecord]:
    return [r for r in records.values() if r.series == name]


def one(records: dict[str, RunRecord], **key: object) -> RunRecord:
    found = [r for r in records.values() if all(getattr(r, k) == v for k, v in key.items())]
    assert len(found) == 1, f"{len(found)} records for {key}"
    return found[0]


def test_every_record_is_transcribed_with_a_source(records):
    assert len(records) == 246
    for run_dir, r in records.items():
        assert r.provenance == "transcribed"
        assert r.source is not None and r.source.document == "B200 study report (REPORT.md)"
        assert r.source.table and r.source.note
        assert r.study == "b200-reference"
        assert r.run_id == run_dir
        assert r.run_id == f"{r.series}/{r.leg}/{r.model}/{r.workload}/{r.arm}/r{r.repeat}"
        assert r.leg_label == load_leg(r.leg).label
        assert r.manifest["device"] == "8x NVIDIA B200"
        # Nothing here was timed by this harness.
        assert r.timing.wall_s is None and r.started_at is None and r.invocation_id is None
        assert (r.status == "ok") == (r.failure is None)
    assert len({r.fingerprint for r in records.values()}) == len(records)


def test_counts_per_series(records, tables):
    counts = Counter(r.series for r in records.values())
    thr, lat = tables["throughput"], tables["latency"]
    missing = sum(cell == MISSING for t in (thr, lat) for row in t.rows for cell in row[3:6])
    assert missing == 8  # GLM-5.2-NVFP4 and gemma-4 on 0.18, two workloads per table
    assert counts["main"] == 3 * (len(thr.rows) + len(lat.rows)) == 198
    assert counts["rep235"] == 3 * 2 * len(tables["repeat_235b"].rows) == 18
    assert counts["moe_backend"] == len(tables["moe_arms"].rows) == 6
    assert counts["cutlass_falsification"] == 6 * 4 == 24
    assert set(counts) == {"main", "rep235", "moe_backend", "cutlass_falsification"}
    ok = Counter((r.leg, r.metrics.throughput_tok_s is not None) for r in series(records, "main")
                 if r.status == "ok")
    assert [ok[(leg, True)] for leg in LEGS] == [34 - 4, 34, 34]
    assert [ok[(leg, False)] for leg in LEGS] == [32 - 4, 32, 32]


@pytest.mark.parametrize("name,metric", [("throughput", "throughput_tok_s"), ("latency", "ms_per_token")])
def test_main_figures_are_the_printed_ones(records, tables, name, metric):
    t = tables[name]
    for row in t.rows:
        model, tp, workload = plain(row[0]), int(row[1]), row[2]
        for label, cell in zip(t.header[3:6], row[3:6]):
            r = one(records, series="main", leg=LABEL_TO_LEG[label], model=model, workload=workload)
            assert r.tp == tp and r.arm == "default" and r.repeat == 1
            if cell == MISSING:
                assert r.status == "failed"
                continue
            assert r.status == "ok"
            assert getattr(r.metrics, metric) == value(cell)
            other = "ms_per_token" if metric == "throughput_tok_s" else "throughput_tok_s"
            assert getattr(r.metrics, other) is None


def test_printed_ratios_agree_with_the_printed_figures(tables):
    # Throughput prints new/old ("26/18"), latency old→new as a speedup, old/new ("18→26").
    for name, speedup in (("throughput", False), ("latency", True)):
        t = tables[name]
        for row in t.rows:
            for old, new, printed in ((row[3], row[4], row[6]), (row[4], row[5], row[7])):
                if MISSING in (old, new):
                    assert printed == MISSING
                    continue
                assert ratio_agrees(printed, *((old, new) if speedup else (new, old))), row


def test_coverage_is_the_printed_one(records, tables):
    models = {r.model for r in series(records, "main")}
    assert len(models) == 15
    for row in tables["coverage"].rows:
        leg = LABEL_TO_LEG[row[0].rsplit(".", 1)[0]]
        runs = [r for r in series(records, "main") if r.leg == leg]
        passing = {r.model for r in runs if r.status == "ok"}
        failing = {r.model for r in runs} - passing
        assert f"{len(passing)}/{len(models)}" == row[1]
        printed = [] if row[2] == MISSING else [plain(m) for m in row[2].split(",")]
        assert len(printed) == len(failing)
        assert all(any(m.startswith(p) for m in failing) for p in printed)


def test_018_failures_carry_the_published_error(records, tables):
    failed = [r for r in series(records, "main") if r.status == "failed"]
    assert {(r.leg, r.model) for r in failed} == {("gpu-0.18.0", "GLM-5.2-NVFP4"),
                                                  ("gpu-0.18.0", "gemma-4-26B-A4B-it")}
    assert len(failed) == 8
    group_a = tables["failure_attribution"].row("A · config not parseable by this leg's transformers")
    error = plain(group_a[2])
    for r in failed:
        model_type = {"GLM-5.2-NVFP4": "glm_moe_dsa", "gemma-4-26B-A4B-it": "gemma4"}[r.model]
        assert r.failure.reason == error.replace("glm_moe_dsa / gemma4", model_type)
        assert r.metrics.throughput_tok_s is None and r.metrics.ms_per_token is None
    # One failed record per workload the model has in the scenario.
    sc = load_scenario("b200-study")
    for model in ("GLM-5.2-NVFP4", "gemma-4-26B-A4B-it"):
        assert sorted(r.workload for r in failed if r.model == model) == \
            sorted(w.name for w in sc.workloads_for(sc.model(model)))


def test_repeats_are_the_printed_ones(records, tables):
    t = tables["repeat_235b"]
    for row in t.rows:
        workload = row[0]
        for label, column, median_column in (("0.18", 1, 2), ("0.26", 3, 4)):
            runs = sorted((r for r in series(records, "rep235")
                           if r.leg == LABEL_TO_LEG[label] and r.workload == workload),
                          key=lambda r: r.repeat)
            assert [r.repeat for r in runs] == [1, 2, 3]
            assert all(r.model == MODEL_235B and r.tp == 4 and r.status == "ok" for r in runs)
            figures = [r.metrics.throughput_tok_s for r in runs]
            assert figures == values(row[column])
            assert statistics.median(figures) == value(row[median_column])


def test_moe_arms_are_the_printed_ones(records, tables):
    refusal = quote("moe_refusal")[0]
    for row in tables["moe_arms"].rows:
        label, figure, prepare, split = row
        r = one(records, series="moe_backend", arm_spec=next(
            x.arm_spec for x in series(records, "moe_backend") if x.arm_spec["description"] == label))
        assert r.leg == LABEL_TO_LEG[label.split()[0]] and r.workload == "image" and r.model == MODEL_235B
        assert r.engine_args == {"moe_backend": r.arm}
        if figure == "refused":
            assert r.status == "failed" and r.failure.reason in refusal
            assert r.failure.reason.startswith("does not support quantization scheme QuantKey(f8e4m3fn")
            assert "moe_prepare_finalize" not in r.manifest and "moe_sm_split" not in r.manifest
        else:
            assert r.status == "ok" and r.metrics.throughput_tok_s == value(figure)
            assert (r.manifest["moe_prepare_finalize"], r.manifest["moe_sm_split"]) == (prepare, split)


def test_falsification_matrix_is_the_printed_one(records, tables):
    t = tables["cutlass_falsification"]
    runs = series(records, "cutlass_falsification")
    exceptions = quote("diag_traceback")
    # "Word for word the group B error."
    assert plain(tables["failure_attribution"].row("B · cutlass ThrMma relocation")[2]) == exceptions[0]
    for row in t.rows:
        arm_runs = [r for r in runs if r.arm_spec["description"] == row[0]]
        assert len(arm_runs) == 4 and len({r.arm for r in arm_runs}) == 1
        for column, cell in zip(t.header[1:], row[1:]):
            (r,) = [x for x in arm_runs if x.model == column]
            assert r.tp == 1 and r.metrics.throughput_tok_s is None and r.metrics.ms_per_token is None
            assert r.leg == ("gpu-0.26.0" if row[0] == "0.26 control" else "gpu-0.18.0")
            if cell == "rc=0":
                assert r.status == "ok"
            else:
                assert cell == "rc=1" and r.status == "failed" and r.failure.exit_code == 1
                assert r.failure.reason == exceptions[0]
                assert "has no attribute 'ThrMma'" in r.failure.reason
                assert r.failure.exceptions == exceptions
    pinned = [r for r in runs if r.arm == "cutlass-dsl-4.5.3"]
    assert all(r.pins == ["nvidia-cutlass-dsl==4.5.3"] and r.manifest["nvidia_cutlass_dsl"] == "4.5.3"
               for r in pinned)
    baseline = [r for r in runs if r.arm in ("baseline", "enforce-eager", "triton-attn", "gpu-mem-0.5")]
    assert all(r.pins == [] and r.manifest["nvidia_cutlass_dsl"] == "4.8.0" for r in baseline)


def test_manifests_follow_the_runtime_stack_table(records, tables):
    stack = {LABEL_TO_LEG[row[0]]: dict(zip(tables["runtime_stack"].header, row))
             for row in tables["runtime_stack"].rows}
    pinned_018 = set(load_leg("gpu-0.18.0").model_pins)
    assert len(pinned_018) == 6
    for r in records.values():
        s, m = stack[r.leg], r.manifest
        assert (m["vllm"], m["torch"], m["torch_cuda"]) == (s["vllm"], s["torch"], s["CUDA"])
        if r.series == "cutlass_falsification":
            continue  # checked per arm above
        if r.leg == "gpu-0.18.0":
            assert m["transformers"] == s["transformers"]
            pinned = r.model in pinned_018
            assert m["nvidia_cutlass_dsl"] == ("4.5.3" if pinned else "4.8.0")
            assert r.pins == (["nvidia-cutlass-dsl==4.5.3"] if pinned else [])
        elif r.leg == "gpu-0.26.0":
            gemma = r.model == "gemma-4-26B-A4B-it"
            assert m["transformers"] == ("5.14.1" if gemma else "5.17.0")
            assert m["nvidia_cutlass_dsl"] == s["nvidia-cutlass-dsl"] == "4.6.0"
            assert r.pins == (["transformers==5.14.1"] if gemma else [])
        else:
            assert m["transformers"] == s["transformers"] == "5.17.0"
            assert "nvidia_cutlass_dsl" not in m  # "not recorded"
            assert r.pins == []
    measured_018 = Counter(r.manifest["nvidia_cutlass_dsl"] for r in series(records, "main")
                           if r.leg == "gpu-0.18.0" and r.status == "ok")
    assert len({r.model for r in series(records, "main") if r.leg == "gpu-0.18.0" and r.status == "ok"
                and r.manifest["nvidia_cutlass_dsl"] == "4.8.0"}) == 7
    assert set(measured_018) == {"4.8.0", "4.5.3"}


def test_study_yaml(tables):
    meta = yaml.safe_load((REFERENCE / "study.yaml").read_text(encoding="utf-8"))
    assert meta["name"] == "b200-reference" and meta["provenance"] == "transcribed"
    assert meta["main_series"] == "main" and meta["title"]
    assert meta["legs"] == [{"name": leg, "label": load_leg(leg).label} for leg in LEGS]
    assert [x["label"] for x in meta["legs"]] == ["0.18", "0.26", "0.29"]
    assert "transcribed" in meta["description"] and "not measured" in meta["description"]
    assert meta["model_order"] == list(dict.fromkeys(plain(r[0]) for r in tables["throughput"].rows))
    for t in (tables["throughput"], tables["latency"]):
        for model in meta["model_order"]:
            printed = [r[2] for r in t.rows if plain(r[0]) == model]
            assert sorted(printed, key=meta["workload_order"].index) == printed


def test_transcription_is_reproducible(tmp_path):
    script = REFERENCE / "transcribe.py"
    for _ in range(2):  # the second run into the same folder must change nothing either
        subprocess.run([sys.executable, str(script), "--out", str(tmp_path)], check=True, cwd=tmp_path,
                       capture_output=True)
    committed = {p.relative_to(REFERENCE): p for p in [REFERENCE / "study.yaml",
                                                       *(REFERENCE / "runs").rglob("results.json")]}
    fresh = {p.relative_to(tmp_path): p for p in tmp_path.rglob("*") if p.is_file()}
    assert set(fresh) == set(committed)
    assert fresh[Path("study.yaml")].read_bytes() == committed[Path("study.yaml")].read_bytes()
    # The shipped records were written at record schema 2; a regeneration writes the current schema.
    # Read through the migration, every record is the same record.
    for rel, path in committed.items():
        if rel.name == "results.json":
            assert record.read(fresh[rel]) == record.read(path), rel


def test_transcription_removes_stale_records(tmp_path):
    stale = tmp_path / "runs" / "main" / "gpu-0.18.0" / "no-such-model" / "mixed" / "default" / "r1"
    stale.mkdir(parents=True)
    (stale / "results.json").write_text("{}")
    subprocess.run([sys.executable, str(REFERENCE / "transcribe.py"), "--out", str(tmp_path)], check=True,
                   capture_output=True)
    assert not (tmp_path / "runs" / "main" / "gpu-0.18.0" / "no-such-model").exists()


def test_legs_and_scenarios_load():
    for leg in LEGS:
        spec = load_leg(leg)
        assert spec.device == "cuda" and spec.vllm_dist == "vllm" and spec.python == "3.12"
        assert spec.buildable
    assert load_leg("gpu-0.18.0").model_pins[MODEL_235B] == ["nvidia-cutlass-dsl==4.5.3"]
    assert load_leg("gpu-0.26.0").model_pins == {"gemma-4-26B-A4B-it": ["transformers==5.14.1"]}
    for name, series_tag in (("b200-study", "main"), ("b200-repeat235b", "rep235"),
                             ("b200-moe-backend", "moe_backend"),
                             ("b200-cutlass-falsification", "cutlass_falsification")):
        sc = load_scenario(name)
        assert sc.series_tag == series_tag and sc.notes
    assert load_scenario("b200-repeat235b").repeats == 3


def test_study_scenario_is_the_published_table(tables):
    sc = load_scenario("b200-study")
    printed: dict[str, tuple[int, list[str]]] = {}
    for t in (tables["throughput"], tables["latency"]):
        for row in t.rows:
            tp, names = printed.setdefault(plain(row[0]), (int(row[1]), []))
            names.append(row[2])
    assert {m.name for m in sc.models} == set(printed)
    for m in sc.models:
        assert m.tp == printed[m.name][0]
        # Serve workloads go beyond the study (it measured offline only): the published rows are the rest.
        assert sorted(w.name for w in sc.workloads_for(m) if w.kind != "serve") == sorted(printed[m.name][1])
        assert m.path and m.path.endswith("/" + m.name)
    assert sc.legs == LEGS
    # A sweep of the scenario runs its rows in the order the study prints them.
    meta = yaml.safe_load((REFERENCE / "study.yaml").read_text(encoding="utf-8"))
    assert [m.name for m in sc.models] == meta["model_order"]
    assert [w.name for w in sc.workloads if w.kind != "serve"] == meta["workload_order"]
    # The two figures the study states for its workloads.
    wl = {w.name: w for w in sc.workloads}
    assert wl["image"].output_len == wl["video"].output_len == 512
    assert wl["image"].work["num_prompts"] == wl["video"].work["num_prompts"] == wl["text-only"].work["num_prompts"] == 1000


def test_arm_records_match_their_scenarios(records):
    for series_tag, name in (("moe_backend", "b200-moe-backend"),
                             ("cutlass_falsification", "b200-cutlass-falsification")):
        sc = load_scenario(name)
        arms = {a.name: a for a in sc.arms}
        models = {m.name: m for m in sc.models}
        for r in series(records, series_tag):
            arm = arms[r.arm]
            assert (arm.engine_args, arm.env, arm.pins) == \
                (r.arm_spec["engine_args"], r.arm_spec["env"], r.arm_spec["pins"])
            assert r.leg in sc.legs and r.model in models and r.tp == models[r.model].tp
            assert r.workload in [w.name for w in sc.workloads_for(models[r.model])]
    for m in load_scenario("b200-cutlass-falsification").models:
        assert m.path == load_scenario("b200-study").model(MATRIX_MODELS[m.name]).path


def test_committed_files_name_no_machine_paths():
    # The dataset must read the same on any checkout: no path of this machine in it.
    local = {str(paths.PROJ_ROOT), str(paths.PROJ_ROOT.parent), tempfile.gettempdir(), str(Path.home())}
    files = [*REFERENCE.rglob("*.py"), *REFERENCE.rglob("*.tsv"), *REFERENCE.rglob("*.txt"),
             REFERENCE / "study.yaml", *paths.SCENARIOS.glob("b200-*.yaml"), *paths.LEGS.glob("gpu-*.yaml"),
             *(REFERENCE / "runs").rglob("results.json")]
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert not [p for p in local if p + "/" in text], f
