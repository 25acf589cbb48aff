"""Study notes (harness.publish.notes): front matter checked, placeholders computed from the data, a
note whose computed number no longer matches failing the render, quoted numbers marked; and the
shipped notes written by the rule (no digit outside a placeholder or a code span)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from harness.core import paths
from harness.core.errors import InvalidFileError, UserError
from harness.publish.notes import QUOTED_MARK, notes_md, read_note, study_notes
from harness.publish.study import load_study
from harness.analyze.strict import ClaimFailed

H200 = paths.RESULTS / "h200"
needs_h200 = pytest.mark.skipif(not (H200 / "study.yaml").exists(), reason="results/h200 not present")


def _note(d: Path, name: str, body: str, front: str = "title: T\nsection: answer\nprovenance: analysis\n") -> Path:
    (d / "notes").mkdir(parents=True, exist_ok=True)
    p = d / "notes" / name
    p.write_text(f"---\n{front}---\n{body}\n", encoding="utf-8")
    return p


@pytest.fixture()
def h200(tmp_path: Path) -> Path:
    if not (H200 / "study.yaml").exists():
        pytest.skip("results/h200 not present")
    d = tmp_path / "h200"
    shutil.copytree(H200, d, ignore=shutil.ignore_patterns("report", "notes"))
    return d


def _value(d: Path) -> str:
    st = load_study(d)
    c = st.canon.cells[(st.canon.cells["workload"] == "mixed")].iloc[0]
    return c["model"], f"{float(c['value']):,.0f}"


def test_front_matter_is_checked(tmp_path: Path) -> None:
    with pytest.raises(InvalidFileError, match="source"):
        read_note(_note(tmp_path, "a.md", "x", "title: T\nsection: answer\nprovenance: study\n"))
    with pytest.raises(InvalidFileError, match="section"):
        read_note(_note(tmp_path, "b.md", "x", "title: T\nsection: nowhere\nprovenance: analysis\n"))
    with pytest.raises(InvalidFileError, match="front matter"):
        (tmp_path / "notes" / "c.md").write_text("no front matter\n")
        read_note(tmp_path / "notes" / "c.md")


def test_placeholders_are_computed_and_quoted_numbers_marked(h200: Path) -> None:
    model, val = _value(h200)
    _note(h200, "n.md", f"Measured {{{{ value: model={model}, workload=mixed, leg=0.26, expect={val} }}}} tok/s; "
                        f"the source said {{{{ quoted: 42x }}}}.",
          "title: Numbers\nsection: answer\nprovenance: study\nsource: a paper\n")
    md = notes_md(load_study(h200), "answer")
    assert f"Measured {val} tok/s" in md and f"42x{QUOTED_MARK}" in md
    assert "restated in this project's words; source: a paper" in md and "quoted from a paper" in md
    assert notes_md(load_study(h200), "headline") == ""


def test_a_note_that_no_longer_matches_the_data_fails(h200: Path) -> None:
    model, val = _value(h200)
    _note(h200, "n.md", f"{{{{ value: model={model}, workload=mixed, leg=0.26, expect=1,234,567 }}}}")
    with pytest.raises(ClaimFailed, match=f"computes {val} from the data, the note says 1,234,567"):
        notes_md(load_study(h200), "answer")


def test_a_computed_number_needs_expect_and_a_known_cell(h200: Path) -> None:
    model, _ = _value(h200)
    _note(h200, "n.md", f"{{{{ value: model={model}, workload=mixed, leg=0.26 }}}}")
    with pytest.raises(UserError, match="no expect="):
        notes_md(load_study(h200), "answer")
    _note(h200, "n.md", "{{ value: model=nope, workload=mixed, leg=0.26, expect=1 }}")
    with pytest.raises(UserError, match="no canonical cell nope"):
        notes_md(load_study(h200), "answer")


def _bare_numbers(body: str, labels: list[str]) -> list[str]:
    """Numbers typed in a note's prose: not in a placeholder, a code span or a link, not a leg label
    ("0.26", "0.18 → 0.26") and not a list marker; digits inside names (H200, SM100, bf16) are names."""
    text = re.sub(r"\{\{.*?\}\}", "", body, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\[[^\]]*\]\([^)]*\)", "", text)
    text = re.sub(r"^\s*\d+\.\s", "", text, flags=re.M)
    for lb in sorted(labels, key=len, reverse=True):
        text = re.sub(rf"(?<![\w.]){re.escape(lb)}(?![\d.]\d)", "", text)
    return re.findall(r"(?<![\w.\-/])\d[\d,.]*(?:x|%)?(?![\w])", text)


@pytest.mark.parametrize("study", sorted(p.name for p in paths.RESULTS.iterdir() if (p / "notes").is_dir()))
def test_shipped_notes_resolve_and_type_no_number(study: str) -> None:
    """Every shipped note resolves against its study's data, and carries no number that is neither a
    placeholder nor a code span (versions, file:line references, settings)."""
    st = load_study(paths.RESULTS / study)
    for note in study_notes(st.root):
        labels = [lg.label for lg in st.canon.study.legs]
        assert _bare_numbers(note.body, labels) == [], f"{note.path}: typed numbers"
        for section in ("answer", "headline", "coverage", "failures", "supporting", "diagnostics", "stack",
                        "limitations", "defects", "about"):
            notes_md(st, section)


def test_the_typed_number_check_finds_typed_numbers() -> None:
    assert _bare_numbers("it is 1.23x and 45% and 7,004 tok/s on 0.18, H200", ["0.18"]) == ["1.23x", "45%", "7,004"]
    assert _bare_numbers("{{ value: leg=0.18, expect=7,004 }} `4.5.3` on 0.18 → 0.26", ["0.18", "0.26"]) == []


def _cpu_tiny_with_bisect(tmp_path: Path, edit_step=None) -> tuple[Path, dict]:
    """The shipped cpu-tiny study and its bisect record, copied under tmp_path/results; `edit_step`
    changes the 0.32.0 step first. Returns the study folder and the record as written."""
    import json

    d = tmp_path / "results" / "cpu-tiny"
    shutil.copytree(paths.RESULTS / "cpu-tiny-serial", d, ignore=shutil.ignore_patterns("report", "notes", "derived"))
    src = paths.RESULTS / "bisect" / "cpu-tiny--cpu-0.27.1--cpu-0.32.0--tiny-llama--mixed.json"
    (tmp_path / "results" / "bisect").mkdir()
    rec = json.loads(src.read_text())
    for step in rec["steps"]:
        if step["version"] == "0.32.0" and edit_step:
            edit_step(step)
    (tmp_path / "results" / "bisect" / src.name).write_text(json.dumps(rec))
    return d, rec


def test_a_bisect_placeholder_on_a_skipped_step_is_one_line(tmp_path: Path) -> None:
    """The shipped cpu-tiny study and its bisect record, copied; one step edited to be skipped."""
    d, _ = _cpu_tiny_with_bisect(tmp_path, lambda step: step.update(
        samples=[], median=None, ratio=None, skipped=True, verdict="skipped", reason="no wheel for this platform"))
    _note(d, "b.md", "The bisect read {{ bisect: version=0.32.0, stat=median, expect=1 }} tok/s.")
    with pytest.raises(UserError) as e:
        notes_md(load_study(d), "answer")
    assert "step 0.32.0" in str(e.value) and "no wheel for this platform" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_bisect_ratio_placeholder_quotes_the_step_with_its_interval_and_refuses_the_reference(tmp_path: Path) -> None:
    d, _ = _cpu_tiny_with_bisect(tmp_path, lambda step: step.update(ratio=0.9874, ci_low=0.9512, ci_high=1.0249))
    _note(d, "b.md", "0.32 ran at {{ bisect: version=0.32.0, stat=ratio, expect=0.987x [0.951, 1.025] }}.")
    assert "0.987x [0.951, 1.025]" in notes_md(load_study(d), "answer")
    _note(d, "b.md", "{{ bisect: version=0.27.1, stat=ratio, expect=1 }}")
    with pytest.raises(UserError, match="reference"):
        notes_md(load_study(d), "answer")


def test_a_bisect_placeholder_picks_its_record_by_model_and_workload_and_asks_when_two_match(tmp_path: Path) -> None:
    import copy
    import json

    d, rec = _cpu_tiny_with_bisect(tmp_path)
    other = copy.deepcopy(rec)  # a second bisect of the same legs, another workload
    other["inputs"]["workload"] = "long-context"
    for step in other["steps"]:
        step["median"] = 1234.5
    (tmp_path / "results" / "bisect" / "other.json").write_text(json.dumps(other))
    _note(d, "b.md", "{{ bisect: version=0.32.0, stat=median, expect=1 }}")
    with pytest.raises(UserError, match="name one with model= and workload="):
        notes_md(load_study(d), "answer")
    _note(d, "b.md", "{{ bisect: version=0.32.0, workload=long-context, stat=median, expect=1,234.50 }}")
    assert "1,234.50" in notes_md(load_study(d), "answer")
    # A bisect of a model the study does not have says nothing about it.
    other["inputs"]["model"] = "not-in-this-study"
    (tmp_path / "results" / "bisect" / "other.json").write_text(json.dumps(other))
    _note(d, "b.md", "{{ bisect: version=0.32.0, stat=median, expect=1 }}")
    with pytest.raises(UserError) as e:
        notes_md(load_study(d), "answer")
    assert "1,234.50" not in str(e.value) and "name one" not in str(e.value)
