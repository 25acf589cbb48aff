"""Bisect on a machine that cannot reach a package index, between prebuilt legs (the H200 legs):
the releases between are given (`--versions`), each is measured on its own reviewed leg file, and
a release without one is skipped. Measurement is a FAKE throughout (fixed samples per release), except
in the last test, which runs the real sweep machinery with the FAKE bench worker and FAKE leg envs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness import cli
from harness.core import paths
from harness.core.errors import UserError
from harness.experiments import bisect as bis
from harness.experiments import bisect_legs
from harness.experiments.bisect import BisectArgs, Measurement
from harness.measure import leg as legmod
from tests.conftest import write_scenario
from tests.test_bisect import _fake_leg_env

OLMOE = "OLMoE-1B-7B (dummy weights)"
H200 = dict(scenario="h200-ablation", good="h200-0.24.0", bad="h200-0.26.0", model=OLMOE,
            workload="fixed-batch-32", repeats=3)


@pytest.fixture(autouse=True)
def _no_index(monkeypatch):
    """As on the offline machine: no index is configured, and listing one fails the test."""
    for var in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(bis, "index_url", lambda: pytest.fail("asked for the package index"))
    monkeypatch.setattr(bis, "index_versions", lambda *a, **k: pytest.fail("listed releases from the index"))


class FakeMeasure:
    """FAKE measurement: ms per output token per release, 3 samples within +-0.5%; logs every call."""

    def __init__(self, centres: dict[str, float]):
        self.centres, self.calls = centres, []

    def __call__(self, versions):
        self.calls.append(list(versions))
        return [Measurement(leg=f"leg-{v}", samples=tuple(self.centres[v] * f for f in (0.995, 1.0, 1.005)))
                for v in versions]


# The OLMoE fixed-batch-32 cell as measured (0.1725 vs 0.1698 ms/tok), the change put at 0.25.1.
STEP_AT_0251 = {"0.24.0": 0.1725, "0.25.0": 0.1725, "0.25.1": 0.1698, "0.25.2": 0.1698, "0.26.0": 0.1698}


def test_fake_given_versions_use_the_reviewed_prebuilt_legs_and_no_index(tmp_path):
    fake = FakeMeasure(STEP_AT_0251)
    # Given out of order: searched from the good side.
    args = BisectArgs(**H200, threshold=0.01, versions=("0.25.1", "0.25.0"), results=tmp_path / "bisect")
    rec, path = bis.bisect(args, measure=fake)
    assert rec.releases == ["0.25.0", "0.25.1"]
    assert rec.inputs.releases_from == "given" and rec.inputs.index is None
    assert rec.legs == {"0.24.0": "h200-0.24.0", "0.25.0": "h200-0.25.0", "0.25.1": "h200-0.25.1",
                        "0.26.0": "h200-0.26.0"}
    assert fake.calls == [["0.24.0", "0.26.0"], ["0.25.0"], ["0.25.1"]]
    c = rec.conclusion
    assert c.kind == "first_differing" and c.first_differing == "0.25.1" and c.last_same == "0.25.0"
    # Prebuilt legs differ in the folder that holds their release, which is no difference of stack.
    assert c.notes == []
    assert bis.read_record(path) == rec and rec.schema_version == bis.SCHEMA_VERSION
    md = bis.summary_md(bis.summary(rec))
    assert "given (`--versions`; no index was consulted): 0.25.0, 0.25.1" in md
    assert "0.25.0 `h200-0.25.0`" in md


def test_reviewed_leg_files_point_at_their_own_folders(monkeypatch):
    for var in ("HARNESS_GPU_SITE_0250", "HARNESS_GPU_SITE_0251"):
        monkeypatch.delenv(var, raising=False)
    good, bad = legmod.load_leg("h200-0.24.0"), legmod.load_leg("h200-0.26.0")
    found = bisect_legs.release_legs(good, bad, ["0.25.0", "0.25.1"])
    assert [legmod.expand(p) for p in found.legs["0.25.0"].pythonpath] == ["/root/site-0.25.0"]
    assert [legmod.expand(p) for p in found.legs["0.25.1"].pythonpath] == ["/root/site-0.25.1"]
    assert found.legs["0.25.1"].vllm_version == "0.25.1" and not found.missing
    # What a derived leg would have been: the good leg's folder, which holds 0.24.0.
    assert bisect_legs.derived_leg(good, "0.25.0").pythonpath == good.pythonpath


def test_fake_a_release_without_a_leg_file_is_skipped_unmeasured(tmp_path):
    fake = FakeMeasure(STEP_AT_0251 | {"0.25.1": 0.1725})  # the change at 0.25.2 (no leg file)
    args = BisectArgs(**H200, threshold=0.01, versions=("0.25.0", "0.25.1", "0.25.2"), results=tmp_path)
    rec, _ = bis.bisect(args, measure=fake)
    assert all("0.25.2" not in call for call in fake.calls)
    step = next(s for s in rec.steps if s.version == "0.25.2")
    assert step.skipped and step.leg == "h200-0.25.2" and rec.legs["0.25.2"] == "h200-0.25.2"
    assert "no leg file" in step.reason and "h200-0.25.2.yaml" in step.reason
    c = rec.conclusion
    assert c.kind == "ambiguous" and c.suspects == ["0.25.2", "0.26.0"] and c.last_same == "0.25.1"


def test_fake_dry_run_lists_a_release_without_a_leg_as_skipped(tmp_path, capsys, monkeypatch):
    fake_env = legmod.LegEnv(leg=legmod.load_leg("h200-0.24.0"), pins=(), lock="vllm==0+fake\n",
                             compat_id="fake", root=tmp_path)
    monkeypatch.setattr(legmod, "resolve", lambda spec, pins=(), offline=False: fake_env)  # FAKE env
    rec, path = bis.bisect(BisectArgs(**H200, versions=("0.25.2",), dry_run=True, results=tmp_path / "b"))
    err = capsys.readouterr().err
    assert path is None and rec.steps == [] and not (tmp_path / "b").exists()
    assert "0.25.2" in err and "would be skipped: no leg file" in err


def _legs_dir(tmp_path: Path, monkeypatch, **files: str) -> None:
    """A legs folder holding the two real H200 endpoint legs plus `files` (name -> YAML text)."""
    legs = tmp_path / "legs"
    legs.mkdir()
    for name in ("h200-0.24.0", "h200-0.26.0"):
        shutil.copy(paths.LEGS / f"{name}.yaml", legs / f"{name}.yaml")
    for name, text in files.items():
        (legs / f"{name}.yaml").write_text(text)
    monkeypatch.setattr(paths, "LEGS", legs)


def test_a_leg_file_that_names_another_release_is_one_line(tmp_path, monkeypatch):
    text = (paths.LEGS / "h200-0.25.1.yaml").read_text().replace("name: h200-0.25.1", "name: h200-0.25.0")
    _legs_dir(tmp_path, monkeypatch, **{"h200-0.25.0": text})
    with pytest.raises(UserError, match=r"h200-0\.25\.0\.yaml: vllm_version is 0\.25\.1, not 0\.25\.0"):
        bis.bisect(BisectArgs(**H200, versions=("0.25.0",), results=tmp_path / "b"), measure=FakeMeasure({}))
    assert not (tmp_path / "b").exists()


def test_a_leg_file_of_another_kind_cannot_stand_for_a_prebuilt_release(tmp_path, monkeypatch):
    text = (paths.LEGS / "h200-0.25.0.yaml").read_text().replace("prebuilt_python: python3\n", "")
    _legs_dir(tmp_path, monkeypatch, **{"h200-0.25.0": text})
    with pytest.raises(UserError, match=r"h200-0\.25\.0\.yaml: not a prebuilt cuda leg of vllm"):
        bis.bisect(BisectArgs(**H200, versions=("0.25.0",), results=tmp_path / "b"), measure=FakeMeasure({}))


def test_a_reviewed_leg_with_another_stack_is_used_and_noted(tmp_path, monkeypatch):
    text = (paths.LEGS / "h200-0.25.0.yaml").read_text().replace('HF_HUB_OFFLINE: "1"', 'HF_HUB_OFFLINE: "0"')
    _legs_dir(tmp_path, monkeypatch, **{"h200-0.25.0": text})
    fake = FakeMeasure(STEP_AT_0251 | {"0.25.0": 0.1698})
    rec, _ = bis.bisect(BisectArgs(**H200, threshold=0.01, versions=("0.25.0",), results=tmp_path / "b"),
                        measure=fake)
    assert rec.legs["0.25.0"] == "h200-0.25.0" and rec.conclusion.first_differing == "0.25.0"
    assert any("h200-0.25.0 (0.25.0) differs from the good leg in more than the vLLM release (env)" in n
               for n in rec.conclusion.notes)


@pytest.mark.parametrize("extra, message", [
    (["--versions", "0.27.0"], "--versions: 0.27.0 is not strictly between the good leg h200-0.24.0's release "
                               "0.24.0 and the bad leg h200-0.26.0's 0.26.0"),
    (["--versions", "0.24.0", "0.23.1"], "--versions: 0.24.0, 0.23.1 are not strictly between"),
    (["--versions", "0.25.0", "0.25.0"], "--versions: '0.25.0' is given twice"),
    (["--versions", "0.25.x"], "--versions: '0.25.x' is not a version"),
    (["--versions", "0.25.0", "--index-url", "https://index.invalid/simple"],
     "--versions names the releases itself: --index-url and --pre would not be used"),
    (["--versions", "0.25.0", "--pre"], "--versions names the releases itself"),
])
def test_cli_bad_versions_are_one_line_and_touch_nothing(tmp_path, capsys, extra, message):
    rc = cli.main(["search", "bisect", "--scenario", "h200-ablation", "--good", "h200-0.24.0", "--bad", "h200-0.26.0",
                   "--model", OLMOE, "--workload", "fixed-batch-32", "--results", str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "out").exists()


def test_cli_versions_reach_the_bisect_as_given(monkeypatch, tmp_path):
    seen = {}

    def fake_bisect(args, measure=None):  # FAKE: records the arguments, measures nothing
        seen["args"] = args
        raise UserError("stop here")

    monkeypatch.setattr(bis, "bisect", fake_bisect)
    rc = cli.main(["search", "bisect", "--scenario", "h200-ablation", "--good", "h200-0.24.0", "--bad", "h200-0.26.0",
                   "--versions", "0.25.0", "0.25.1", "--threshold", "0.01", "--results", str(tmp_path)])
    assert rc == 2 and seen["args"].versions == ("0.25.0", "0.25.1") and seen["args"].threshold == 0.01


def test_a_version_1_record_reads_as_listed_from_the_index(tmp_path):
    rec = bis.bisect(BisectArgs(**H200, versions=("0.25.0",), results=tmp_path / "b"),
                     measure=FakeMeasure(STEP_AT_0251))[0]
    data = rec.model_dump(mode="json", exclude={"updated_at": True, "conclusion": {"unmeasured"}})
    data["schema_version"] = 1
    data["inputs"] = {k: v for k, v in data["inputs"].items() if k != "releases_from"} | {
        "index": "https://index.invalid/simple"}
    p = tmp_path / "v1.json"
    p.write_text(json.dumps(data))
    old = bis.read_record(p)  # migrated, as a version-1 record is read
    assert old.inputs.releases_from == "index" and old.schema_version == bis.SCHEMA_VERSION
    assert old.complete and old.updated_at == old.finished_at == rec.finished_at
    assert "between 0.24.0 and 0.26.0, on the index: 0.25.0" in bis.summary_md(bis.summary(old))


# --- through the sweep machinery, with the FAKE bench -------------------------------------------

SCENARIO = """
name: bt
legs: [cpu-0.27.1, cpu-0.32.0]
repeats: 1
timeout_s: 30
models:
  - name: m
    path: tiny
workloads:
  - {name: w, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}
"""


def test_fake_bench_given_versions_and_a_release_that_does_not_resolve(tmp_path, fake_sweep, monkeypatch):
    """FAKE bench and FAKE leg envs; plan, execute_plan, the node lock and the records are real. A
    release whose env cannot be resolved with a UserError (as a prebuilt leg whose folder does not hold
    its release) is skipped, and the bisect goes on."""
    tok_s = {"0.27.1": 1000.0, "0.29.0": 1000.0, "0.30.0": 700.0, "0.32.0": 700.0}

    def resolve(spec, pins=(), offline=False):
        if spec.vllm_version == "0.29.0":
            raise UserError(f"{legmod.leg_path(spec.name)}: prebuilt python python3 does not have vllm==0.29.0")
        return _fake_leg_env(tmp_path, spec, tok_s, set())

    monkeypatch.setattr(legmod, "resolve", resolve)
    sc = write_scenario(tmp_path, SCENARIO)
    rec, path = bis.bisect(BisectArgs(scenario=str(sc), good="cpu-0.27.1", bad="cpu-0.32.0", repeats=3,
                                      versions=("0.30.0", "0.29.0"), results=tmp_path / "bisect"))
    assert rec.inputs.releases_from == "given" and rec.releases == ["0.29.0", "0.30.0"]
    by_version = {s.version: s for s in rec.steps}
    assert by_version["0.29.0"].skipped and "does not have vllm==0.29.0" in by_version["0.29.0"].reason
    assert by_version["0.30.0"].differs and len(by_version["0.30.0"].run_ids) == 3
    assert rec.conclusion.kind == "ambiguous" and rec.conclusion.suspects == ["0.29.0", "0.30.0"]
    assert bis.read_record(path) == rec
