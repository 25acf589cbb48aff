"""`harness publish results/STUDY DIR` (harness.publish.bundle) and the harness source state new
records carry (harness.core.source)."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from harness.core import paths
from harness.core.errors import UserError
from harness.core.source import DIFF_FILE, harness_source, source_state
from harness.publish.bundle import publish

H200 = paths.RESULTS / "h200"


@pytest.fixture()
def study(tmp_path: Path) -> Path:
    if not (H200 / "report" / "REPORT.md").exists():
        pytest.skip("results/h200 has no rendered report")
    d = tmp_path / "results" / "h200"
    shutil.copytree(H200, d)
    return d


def test_source_state_of_this_checkout(tmp_path: Path) -> None:
    state, diff = source_state()
    assert len(state["commit"]) == 40 or state["commit"] == "unknown"
    assert state["dirty"] == bool(diff)
    got = harness_source(tmp_path)["harness_source"]
    assert got["commit"] == state["commit"]
    assert (tmp_path / DIFF_FILE).exists() == bool(got["dirty"])


def test_bundle_holds_what_a_dataset_repository_needs(study: Path, tmp_path: Path) -> None:
    # One record as a new one is written: measured from a dirty checkout, the diff beside it.
    rec_path = sorted((study / "runs").rglob("results.json"))[0]
    rec = json.loads(rec_path.read_text())
    rec["manifest"]["harness_source"] = {"commit": "a" * 40, "dirty": True, "diff_sha256": "b" * 64,
                                         "diff": DIFF_FILE}
    rec_path.write_text(json.dumps(rec))
    (rec_path.parent / DIFF_FILE).write_text("diff --git a/x b/x\n")
    b = publish(study, tmp_path / "bundle")
    out = b.out
    for name in ("README.md", "REPORT.md", "CANONICAL.md", "MANIFEST.md", "REGENERATE.md", "logs.tar.gz"):
        assert (out / name).is_file(), name
    n_logs = len(list((study / "runs").rglob("run.log")))
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    assert len(names) == n_logs == b.logs and all(n.endswith("run.log") for n in names)
    assert len(list((out / "results" / "runs").rglob("results.json"))) == b.records
    assert len(list((out / "results" / "runs").rglob("run.jsonl"))) >= 1
    assert not list((out / "results" / "runs").rglob("run.log"))       # logs live in the archive only
    assert (out / "patches" / "legs" / "h200-0.26.0.yaml").is_file()
    assert list((out / "patches" / "scenarios").glob("*.yaml"))
    assert (out / "patches" / "harness" / f"{'b' * 16}.diff").read_text() == "diff --git a/x b/x\n"
    manifest = (out / "MANIFEST.md").read_text()
    assert "## Harness source state at measuring time" in manifest and f"`{'a' * 12}` | yes" in manifest
    assert "python -m harness report BUNDLE/results" in (out / "REGENERATE.md").read_text()
    # Deterministic archive: publishing again (over its own bundle: --replace) gives the same bytes.
    first = (out / "logs.tar.gz").read_bytes()
    assert publish(study, tmp_path / "bundle", replace=True).out == out and (out / "logs.tar.gz").read_bytes() == first


def test_bundle_refuses_an_unrendered_study_and_a_bad_destination(study: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="inside the study"):
        publish(study, study / "bundle")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="is a file"):
        publish(study, tmp_path / "file")
    shutil.rmtree(study / "report")
    with pytest.raises(UserError, match="no rendered report"):
        publish(study, tmp_path / "b2")


def test_a_study_keeps_one_copy_of_each_change_set(tmp_path: Path, monkeypatch) -> None:
    from harness.core import source

    monkeypatch.setattr(source, "source_state", lambda: ({"commit": "c" * 40, "dirty": True, "diff_sha256": "d" * 64},
                                                         "diff --git a/x b/x\n"))
    runs = [tmp_path / "s" / "runs" / "series" / "leg" / "m" / w / "default" / "r1" for w in ("w1", "w2")]
    for d in runs:
        d.mkdir(parents=True)
        got = source.harness_source(d)["harness_source"]
        assert (d / got["diff"]).resolve() == tmp_path / "s" / source.DIFFS_DIR / ("d" * 16 + ".diff")
        assert not (d / source.DIFF_FILE).exists()
    assert len(list((tmp_path / "s" / source.DIFFS_DIR).iterdir())) == 1
