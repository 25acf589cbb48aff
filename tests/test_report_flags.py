"""`harness report --allow-different-work` / `--allow-reused`: the escapes `harness tables` has,
reaching the report's cells and its derived tables alike. Study folders are FAKE (studygen)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.core import paths
from harness.publish.study import tristate
from studygen import record_dict, write_run, write_study_yaml

LEGS = [("gpu-0.18.0", "0.18"), ("gpu-0.26.0", "0.26")]


def _study(tmp_path):
    """Two legs whose runs saw different prompts (different prompt hashes), three repeats each."""
    d = tmp_path / "s"
    write_study_yaml(d, LEGS)
    for (leg, label), sha, value in zip(LEGS, ("aaa", "bbb"), (1000.0, 1100.0)):
        for r in (1, 2, 3):
            write_run(d, record_dict(leg=leg, leg_label=label, repeat=r, value=value + r,
                                     work={"num_seqs": 100, "output_tokens": 51200, "prompts_sha256": sha}))
    return d


def _report(d, *extra):
    return subprocess.run([sys.executable, "-m", "harness", "report", str(d), "--no-quarto", *extra],
                          capture_output=True, text=True, cwd=paths.PROJ_ROOT)


def test_report_refuses_different_work_in_one_line_and_writes_nothing(tmp_path):
    d = _study(tmp_path)
    proc = _report(d)
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "refusing to compare" in err[0] and "--allow-different-work" in err[0]
    assert "Traceback" not in proc.stderr and not (d / "report").exists()


def test_report_allow_different_work_renders_and_says_so(tmp_path):
    d = _study(tmp_path)
    proc = _report(d, "--allow-different-work")
    assert proc.returncode == 0, proc.stderr[-2000:]
    canonical = (d / "report" / "CANONICAL.md").read_text()
    assert "## Different work" in canonical and "aaa" in canonical and "bbb" in canonical
    md = (d / "report" / "REPORT.md").read_text()
    assert "1.10" in md    # 0.26 ÷ 0.18 of the medians, 1102/1002
    assert "**Legs compared although their runs did different work.** 1 cell" in md and "bbb" in md


@pytest.mark.parametrize("value, want", [("auto", None), (True, True), ("true", True), ("False", False),
                                         (False, False), ("", None)])
def test_tristate_reads_what_papermill_and_quarto_pass(value, want):
    assert tristate(value) is want


def test_tristate_refuses_anything_else():
    with pytest.raises(ValueError):
        tristate("maybe")
