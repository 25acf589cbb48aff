"""The harness's own source state when a run is measured: the commit of its checkout, whether the
checkout had uncommitted changes, and a hash of those changes, so a record says exactly which code
measured it, and a published bundle can ship the changes themselves (`harness publish`).

`harness_source(run_dir)` returns the manifest entry and, for a dirty checkout, writes the diff
beside the record as `harness.diff` (the hash is of that file's bytes). Outside a git checkout, or
without git, the state is "unknown" rather than a guess.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

from harness.core.paths import PROJ_ROOT

DIFF_FILE = "harness.diff"
DIFFS_DIR = "harness-diffs"


def _git(*args: str) -> str | None:
    try:
        p = subprocess.run(["git", "-C", str(PROJ_ROOT), *args], capture_output=True, text=True, timeout=30,
                           check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout if p.returncode == 0 else None


def source_state() -> tuple[dict[str, Any], str]:
    """(state, diff text): commit, dirty, diff_sha256 of the harness's tracked files (harness/, the
    scenarios, legs and project files; the results tree is data, not source, and is left out)."""
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": "unknown", "dirty": None, "diff_sha256": None}, ""
    diff = _git("diff", "HEAD", "--binary", "--", ".", ":(exclude)results") or ""
    untracked = (_git("ls-files", "--others", "--exclude-standard", "--", "harness") or "").split()
    for path in sorted(untracked):
        # New source files count as changes too: a diff of each against nothing (exit 1: they differ).
        p = subprocess.run(["git", "-C", str(PROJ_ROOT), "diff", "--no-index", "--binary", "--", "/dev/null", path],
                           capture_output=True, text=True, check=False)
        diff += p.stdout
    dirty = bool(diff)
    return {"commit": commit.strip(), "dirty": dirty,
            "diff_sha256": hashlib.sha256(diff.encode()).hexdigest() if dirty else None}, diff


def harness_source(run_dir: Path) -> dict[str, Any]:
    """The record's `manifest.harness_source` entry. A dirty checkout's diff is written once per study
    and change set, `<study>/harness-diffs/<sha256[:16]>.diff` (a sweep's runs share one, and a diff of
    work in progress can be large), and the entry names it relative to the run's folder; outside a
    study's runs/ folder it goes beside the record as `harness.diff`."""
    state, diff = source_state()
    if diff:
        study = next((a.parent for a in run_dir.resolve().parents if a.name == "runs"), None)
        if study is None:
            target = run_dir / DIFF_FILE
        else:
            target = study / DIFFS_DIR / f"{state['diff_sha256'][:16]}.diff"
            target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            tmp = target.with_name(target.name + ".tmp")
            tmp.write_text(diff, encoding="utf-8")
            tmp.replace(target)
        state["diff"] = os.path.relpath(target, run_dir.resolve())
    return {"harness_source": state}
