"""results/ holds data and what describes it (records, logs, derived tables, rendered reports, READMEs
and notes), not the code that made it: a driver or a helper script belongs under environment/ (or
harness/), where the tests and the reader look for code, and the study's README cites it there.

Each kind of file a study holds is named below with why it is data; a script is refused whatever its
name says (by suffix, by a `#!` first line, or by the executable bit), but for the two transcriptions
that are their studies' provenance: each study names its script as the way to regenerate its records."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.core import paths

# Suffix -> why a study holds files of that kind.
DATA_SUFFIXES: dict[str, str] = {
    ".json": "run records, sweep indexes, side-experiment records, output markers",
    ".jsonl": "run event streams (run.jsonl) and worker replies",
    ".gz": "kept outputs (outputs.jsonl.gz) and packed logs",
    ".log": "run and driver logs",
    ".out": "a lease driver's captured stdout",
    ".txt": "a lease's plan (the command lines it ran) and captured listings",
    ".md": "READMEs, notes, derived tables, rendered reports",
    ".yaml": "study.yaml, printed.yaml",
    ".csv": "derived tables and exports",
    ".tsv": "verbatim copies of a published source's tables",
    ".parquet": "derived exports",
    ".html": "the rendered report page",
    ".png": "the report's figures",
    ".diff": "the harness's code changes between the commits a history study measured",
}
SCRIPT_SUFFIXES = (".sh", ".bash", ".py", ".ipynb", ".pl", ".rb", ".js", ".ps1", ".bat")
# Path under the project -> why this script stays beside its data.
PROVENANCE: dict[str, str] = {
    "results/b200-reference/transcribe.py": "builds the study's records from its published/ tables; its "
                                            "study.yaml (and so its report) names it as the way to regenerate "
                                            "them, and tests/test_reference_dataset.py reruns it",
    "results/h200-reference/transcribe.py": "builds the study's records and printed.yaml from published/; "
                                            "its study.yaml (and so its report) names it as the way to "
                                            "regenerate them",
}


def _files() -> dict[str, bool]:
    """Every file under results/ (the tracked ones in a git checkout) -> whether it is executable."""
    root = paths.PROJ_ROOT
    if (root / ".git").exists():
        out = subprocess.run(["git", "ls-files", "-s", "--", "results"], cwd=root, capture_output=True,
                             text=True, check=True).stdout
        return {line.split("\t", 1)[1]: line.startswith("100755") for line in out.splitlines()}
    return {p.relative_to(root).as_posix(): p.stat().st_mode & 0o111 != 0
            for p in paths.RESULTS.rglob("*") if p.is_file() and not p.is_symlink()}


def _script_why(rel: str, executable: bool) -> str | None:
    """Why `rel` reads as a script, or None."""
    if rel.endswith(SCRIPT_SUFFIXES):
        return "a script's suffix"
    if executable:
        return "the executable bit"
    with (paths.PROJ_ROOT / rel).open("rb") as f:
        return "a #! first line" if f.read(2) == b"#!" else None


def scripts(files: dict[str, bool]) -> dict[str, str]:
    return {rel: why for rel, ex in files.items() if (why := _script_why(rel, ex)) is not None}


def test_results_holds_no_script_but_the_named_provenance() -> None:
    found = {rel: why for rel, why in scripts(_files()).items() if rel not in PROVENANCE}
    assert not found, ("scripts under results/: move each under environment/ (and cite it from the study's "
                       "README), or, if the study's records name it as their provenance, add it to PROVENANCE "
                       "with why:\n" + "\n".join(f"{rel} ({why})" for rel, why in sorted(found.items())))


def test_every_file_under_results_is_a_named_kind_of_data() -> None:
    odd = sorted(rel for rel in _files() if rel not in PROVENANCE and Path(rel).suffix not in DATA_SUFFIXES)
    assert not odd, "files under results/ of no kind named in DATA_SUFFIXES:\n" + "\n".join(odd)


def test_each_provenance_script_exists_and_its_study_cites_it() -> None:
    for rel in PROVENANCE:
        script = paths.PROJ_ROOT / rel
        assert script.is_file(), f"{rel}: named in PROVENANCE but gone"
        assert f"python {rel}" in (script.parent / "study.yaml").read_text(encoding="utf-8"), rel


def test_the_check_sees_each_form_of_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "PROJ_ROOT", tmp_path)
    (tmp_path / "results" / "s").mkdir(parents=True)
    for name, text in (("drive.sh", "cd x\n"), ("run", "#!/bin/sh\necho\n"), ("plan.txt", "harness sweep x\n"),
                       ("README.md", "# s\n")):
        (tmp_path / "results" / "s" / name).write_text(text)
    files = {"results/s/drive.sh": False, "results/s/run": False, "results/s/plan.txt": False,
             "results/s/README.md": False, "results/s/tool.md": True}
    (tmp_path / "results" / "s" / "tool.md").write_text("")
    assert scripts(files) == {"results/s/drive.sh": "a script's suffix", "results/s/run": "a #! first line",
                              "results/s/tool.md": "the executable bit"}
