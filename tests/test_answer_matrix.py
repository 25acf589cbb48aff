"""The answer as a picture (harness.publish.matrix, sections/answer.py): each cell's class, the per-step
sentence, model names wrapped only where they may break, and the matrix itself: narrow, a panel per
group of steps that do not fit side by side, a letter and a cause per missing cell."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from harness.core import paths
from harness.publish import matrix
from harness.publish.sections.answer import Answer, Cell, matrix_cells, step_lines, verdict_class

B200 = paths.RESULTS / "b200-reference"


def _cell(step: str, side: str, verdict: str, ratio: float | None = 1.0, note: str = "", model: str = "m") -> Cell:
    return Cell(model=model, workload="w", kind="throughput", step=step, ratio=ratio, low=None, high=None,
                interval=None, verdict=verdict, side=side, note=note)


def test_each_cell_gets_one_class():
    assert verdict_class(_cell("a", "above", "single pass")) == "faster"
    assert verdict_class(_cell("a", "below", "slower")) == "slower"
    assert verdict_class(_cell("a", "within", "equivalent within ±2%")) == "equivalent"
    assert verdict_class(_cell("a", "within", "undecided")) == "undecided"
    assert verdict_class(_cell("a", "within", "single pass")) == "undecided"
    assert verdict_class(_cell("a", "missing", "missing", None, "fails on 0.18: x")) == "missing"


def test_one_sentence_per_step_counts_its_cells():
    cells = [_cell("0.18 → 0.26", "above", "faster"), _cell("0.18 → 0.26", "missing", "missing", None, "gone", "n"),
             _cell("0.26 → 0.29", "within", "single pass")]
    lines = step_lines(Answer(summary=[], cells=cells, shown=cells))
    assert lines[0].startswith("**0.18 → 0.26:** faster on 1, slower on 0, missing on 1 of 2 (model, workload) cells")
    assert "root cause" in lines[0]
    assert lines[1] == "**0.26 → 0.29:** faster on 0, slower on 0, undecided on 1 of 1 (model, workload) cell."


def test_model_names_break_only_between_their_parts():
    assert matrix.wrap_name("Qwen3-VL-235B-A22B-Instruct-FP8", 16) == ["Qwen3-VL-235B-", "A22B-Instruct-", "FP8"]
    assert matrix.wrap_name("meta-llama/Llama-3.1-8B", 16) == ["meta-llama/", "Llama-3.1-8B"]
    assert matrix.wrap_name("tiny", 16) == ["tiny"]
    assert matrix.wrap_name("x" * 20, 16) == ["x" * 16, "xxxx"]     # one piece longer than a line: cut


def _png(df, note: str = "") -> Image.Image:
    buf = io.BytesIO()
    matrix.verdict_matrix(df, note=note).savefig(buf, format="png", dpi=matrix.DPI)
    return Image.open(io.BytesIO(buf.getvalue()))


def test_the_matrix_is_narrow_and_wraps_its_steps():
    steps = [f"0.{i} → 0.{i + 1}" for i in range(10, 16)]
    cells = [matrix.MatrixCell(model=m, workload=w, step=s, ratio=1.1, verdict="faster")
             for m in ("a", "b") for w in ("x", "y") for s in steps]
    cells[0] = matrix.MatrixCell(model="a", workload="x", step=steps[0], ratio=None, verdict="missing",
                                 cause="fails on 0.10: a root cause")
    one = _png(matrix.frame(cells[:1] + [c for c in cells if c.step == steps[0]][1:]))
    many = _png(matrix.frame(cells))
    assert one.width == many.width == round(matrix.WIDTH_IN * matrix.DPI)   # drawn for a phone's column
    assert len(matrix._panels(steps)) > 1 and many.height > 2 * one.height    # panels below each other


@pytest.mark.skipif(not (B200 / "study.yaml").exists(), reason="results/b200-reference not present")
def test_b200_matrix_names_the_missing_cells_cause():
    from harness.publish.sections.answer import answer
    from harness.publish.study import load_study

    cells = matrix_cells(answer(load_study(B200)))
    missing = [c for c in cells if c.verdict == "missing"]
    assert missing and all(c.cause.startswith("fails on 0.18: ") for c in missing)
    assert {c.verdict for c in cells} >= {"faster", "slower", "undecided", "missing"}
