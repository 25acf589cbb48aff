"""The answer as a picture (harness.publish.matrix, sections/answer.py): each cell's class, the per-step
sentence, model names wrapped only where they may break, and the matrix itself: narrow, a panel per
group of steps that do not fit side by side, a letter and a cause per missing cell."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from harness.core import paths
from harness.publish import matrix
from harness.analyze.verdicts import CellVerdict
from harness.publish.sections.answer import Answer, Cell, matrix_cells, step_lines, verdict_class

B200 = paths.RESULTS / "b200-reference"


def _cell(step: str, verdict: str, alone: str | None = None, ratio: float | None = 1.0, note: str = "",
          model: str = "m") -> Cell:
    old, new = step.split(" → ") if " → " in step else ("a", "b")
    v = CellVerdict(kind="throughput", model=model, workload="w", old=old, new=new, old_label=old, new_label=new,
                    family="steps", family_size=2, verdict=verdict, alone=alone or verdict, ratio=ratio)
    return Cell(v=v, note=note, workload="w")


def test_each_cell_gets_one_class_from_its_verdict_object():
    # A single pass per side is its own class whatever its ratio: only a test says faster or slower.
    assert verdict_class(_cell("a", "single pass", ratio=1.5)) == "single pass"
    assert verdict_class(_cell("a", "slower")) == "slower"
    assert verdict_class(_cell("a", "equivalent")) == "equivalent"
    assert verdict_class(_cell("a", "undecided", alone="faster")) == "undecided"
    assert verdict_class(_cell("a", "too few repeats")) == "undecided"
    assert verdict_class(_cell("a", "missing", ratio=None, note="fails on 0.18: x")) == "missing"


def test_one_sentence_per_step_counts_its_cells():
    cells = [_cell("0.18 → 0.26", "faster"), _cell("0.18 → 0.26", "missing", ratio=None, note="gone", model="n"),
             _cell("0.26 → 0.29", "undecided")]
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
    # Transcribed figures are one printed figure per side: no cell is called faster or slower.
    assert {c.verdict for c in cells} == {"single pass", "missing"}
