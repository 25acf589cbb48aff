"""`harness compare studies A B` (harness.publish.compare_studies): the same (model, workload, step) of
two studies side by side, with a "does it transfer?" verdict; ratio-only figures from printed.yaml."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.core import paths
from harness.core.errors import UserError
from harness.analyze.compare_studies import Side, _verdict, compare_studies, find
from harness.publish.compare_studies import compare_studies_md

B200, H200REF = paths.RESULTS / "b200-reference", paths.RESULTS / "h200-reference"
needs_refs = pytest.mark.skipif(not (B200 / "study.yaml").exists() or not (H200REF / "study.yaml").exists(),
                                reason="reference studies not present")


def test_verdicts() -> None:
    assert _verdict(Side(ratio=1.5), Side(ratio=1.4), 0.05) == "transfers (faster)"
    assert _verdict(Side(ratio=1.5), Side(ratio=1.01), 0.05).startswith("does not transfer (faster in A, flat")
    assert _verdict(Side(ratio=2.0), Side(ratio=1.1), 0.05).startswith("direction only")
    assert _verdict(Side(ratio=2.0), Side(ratio=None, outcome="cannot run"), 0.05) == "cannot run in B"
    assert _verdict(Side(ratio=2.0), Side(ratio=None), 0.05) == "only in A"
    # A side reads as its study's verdict: an undecided cell has no effect to transfer, whatever its ratio;
    # an equivalent one reads flat; only a side without a test is read against the band.
    assert _verdict(Side(ratio=1.2, low=0.9, high=1.5, interval="95% t", cls="undecided"), Side(ratio=1.3), 0.05) \
        == "undecided in A (no decided effect to transfer)"
    assert _verdict(Side(ratio=1.01, low=0.99, high=1.03, cls="equivalent"), Side(ratio=1.0), 0.05) == "transfers (flat)"
    assert _verdict(Side(ratio=1.2, cls="faster"), Side(ratio=1.0, cls="slower"), 0.05).startswith("does not transfer")


@needs_refs
def test_b200_against_its_h200_companion() -> None:
    c = compare_studies(B200, H200REF)
    jump = find(c, "gpt-oss-120b", "mixed", "0.18->0.26")
    assert jump is not None and jump.a.text().startswith("3.31x") and jump.b.text() == "1.03x (printed ratio)"
    assert jump.verdict.startswith("does not transfer")
    reg = find(c, "Qwen3-VL-235B-A22B-Instruct-FP8", "image", "0.18->0.26")
    assert reg is not None and reg.verdict == "transfers (slower)" and not reg.b.printed   # from H200 figures
    glm = find(c, "GLM-5.2-NVFP4", "mixed", "0.26->0.29")
    assert glm is not None and glm.verdict == "cannot run in B" and "SM100" in glm.b.text()
    md = compare_studies_md(c)
    assert "| `gpt-oss-120b` · mixed | 0.18 → 0.26 |" in md and "only one study has are left out" in md
    assert md.count("\n| `") == 6                     # the cells both studies speak of


def test_cli_is_a_thin_verb_with_one_line_errors(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    p = subprocess.run([sys.executable, "-m", "harness", "compare", "studies", str(tmp_path / "empty"),
                        str(tmp_path / "empty")], capture_output=True, text=True, cwd=paths.PROJ_ROOT)
    assert p.returncode == 2 and "not a study folder" in p.stderr and "Traceback" not in p.stderr
    with pytest.raises(UserError, match="not a study folder"):
        compare_studies(tmp_path / "empty", B200)


@needs_refs
def test_cli_writes_the_comparison(tmp_path) -> None:
    out = tmp_path / "cmp.md"
    p = subprocess.run([sys.executable, "-m", "harness", "compare", "studies", str(B200), str(H200REF), "--out",
                        str(out)], capture_output=True, text=True, cwd=paths.PROJ_ROOT)
    assert p.returncode == 0, p.stderr
    assert out.read_text().startswith("# b200-reference vs h200-reference: does it transfer?")
