"""One verdict per cell: every view of a study gives each step cell the verdict and interval of its one
verdict object (`harness.analyze.verdicts`), and no table of paired cells carries the repeat rule's
footnote.

Two kinds of check, both over every shipped study (and any `make main` study under results/ here):
- the rendered files as shipped (report/REPORT.md, its tables and export, the dataset card, derived/):
  they must have been re-derived with the code that computes the object, cell by cell;
- the views as the code builds them now, in this process (the answer, the kind tables, the figures'
  rows, the card's and the site's one-line answer, `compare studies`), for the same studies.
Real records throughout; nothing here is a stand-in."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from harness import workloads
from harness.analyze.fmt import short_labels
from harness.analyze.order import leg_pairs
from harness.analyze.significance import METHOD, NESTED_METHOD
from harness.analyze.verdicts import CellVerdict, StudyVerdicts, step_sentence, study_verdicts
from harness.core import paths

SERIAL_FOOTNOTE = f"verdict: {METHOD}, two-sided"


def _studies() -> list[Path]:
    out = []
    for y in sorted(paths.RESULTS.glob("*/study.yaml")):
        d = y.parent
        if (d / "runs").is_dir() and ((d / "report" / "REPORT.md").is_file() or (d / "derived" / "tables").is_dir()):
            out.append(d)
    return out


STUDIES = _studies()


def _cls(text: str) -> str:
    """The class a printed verdict reads as."""
    t = text.strip().replace("\\", "")
    if t in ("—", "", "missing"):
        return "missing"
    for k in ("faster", "slower", "equivalent", "single pass"):
        if t.startswith(k):
            return k
    if t.startswith(("undecided", "too few repeats")):
        return "undecided"
    raise AssertionError(f"not a verdict: {text!r}")


def _md_tables(text: str) -> list[pd.DataFrame]:
    """Every pipe table of a Markdown text, cells unescaped and stripped."""
    out, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if len(block) >= 2 and re.match(r"^\|[\s:|-]+\|$", block[1]):
            # Pandoc writes Markdown punctuation escaped ("\\[", "\\>"): the text a reader sees is unescaped.
            rows = [[re.sub(r"\\([^\w\s])", r"\1", c.strip()) for c in re.split(r"(?<!\\)\|", r)[1:-1]]
                    for r in block]
            out.append(pd.DataFrame(rows[2:], columns=rows[0]))
        block = []
    return out


def _load(study: Path):
    from harness.publish.study import load_study

    return load_study(study)


def _ratio_labels(sv: StudyVerdicts, kind: str) -> dict[str, tuple[str, str]]:
    """A kind table's ratio-column label -> (old leg, new leg), for every pair of legs."""
    legs = leg_pairs(sv.canon)
    short = short_labels([lb for _, lb in legs])
    m = workloads.metric_of(kind)
    return {m.ratio_label(short[a[1]], short[b[1]]): (a[0], b[0]) for i, a in enumerate(legs) for b in legs[i + 1:]}


def _check_kind_table(sv: StudyVerdicts, kind: str, df: pd.DataFrame, where: str, *, md: bool) -> int:
    """Every verdict column of a kind table against the object; returns the cells checked."""
    n = 0
    for lab, (old, new) in _ratio_labels(sv, kind).items():
        col = f"{lab} verdict"
        if col not in df.columns:
            continue
        for r in df.to_dict("records"):
            model = str(r["model"]).strip("`")
            v = sv.get(kind, model, str(r["workload"]), old, new)
            assert v is not None, f"{where}: {model} {r['workload']} {lab}: no verdict object"
            got = str(r[col]) if not pd.isna(r[col]) else "missing"
            if md:
                assert got == (v.text if v.verdict != "missing" else "—"), f"{where}: {model} {r['workload']} {lab}"
                ci = next((c for c in df.columns if c.startswith(f"{lab} ") and c.endswith(" CI")), None)
                if ci is not None:
                    assert r[ci] == v.interval_text, f"{where}: {model} {r['workload']} {lab} interval"
            else:
                assert got == v.verdict, f"{where}: {model} {r['workload']} {lab}: {got} != {v.verdict}"
                if v.confidence:
                    assert abs(float(r[f"{lab} low"]) - v.low) < 1e-9 and abs(float(r[f"{lab} high"]) - v.high) < 1e-9
            n += 1
    return n


def _check_answer(sv: StudyVerdicts, text: str, where: str, *, step_lines: bool = True) -> int:
    """The answer's table rows and (with `step_lines`) its per-step sentences against the object."""
    n = 0
    for step in dict.fromkeys(c.step for c in sv.cells) if step_lines else ():
        cells = [c for c in sv.cells if c.step == step]
        assert f"**{step}:** {step_sentence(cells)}" in text, f"{where}: the step line of {step}"
    for df in _md_tables(text):
        if not {"model · workload", "step", "verdict", "ratio [interval]"} <= set(df.columns):
            continue
        for r in df.to_dict("records"):
            model, _, wls = r["model · workload"].partition(" · ")
            for wl in wls.split(", "):
                cands = [c for c in sv.cells if (c.model, c.workload, c.step) == (model.strip("`"), wl, r["step"])]
                assert cands, f"{where}: answer row {r['model · workload']} {r['step']} has no cell"
                v = cands[0]
                assert r["verdict"].removesuffix(" (rounding interval)") == v.text, f"{where}: {model} {wl} {r['step']}"
                assert r["ratio [interval]"] == v.ratio_text, f"{where}: {model} {wl} {r['step']} ratio"
                n += 1
    return n


def _no_serial_footnote_on_paired_tables(sv: StudyVerdicts, text: str, where: str) -> None:
    kinds_paired = {c.kind for c in sv.cells if c.rule == NESTED_METHOD}
    kinds_welch = {c.kind for c in sv.cells if c.rule == METHOD and c.confidence}
    for kind in kinds_paired - kinds_welch:
        title = workloads.metric_of(kind).title
        m = re.search(rf"### {re.escape(title)}\n(.*?)(?=\n#|\Z)", text, re.S)
        if m:
            assert SERIAL_FOOTNOTE not in m.group(1), f"{where}: the paired {kind} table carries the repeat rule's footnote"


@pytest.mark.parametrize("study", STUDIES, ids=[s.name for s in STUDIES])
def test_shipped_views_give_each_cell_its_one_verdict(study: Path) -> None:
    st = _load(study)
    sv = study_verdicts(st.canon)
    checked = 0
    for sub in ("report", "derived"):
        base = study / sub
        for kind in workloads.KINDS:
            md, csv = base / "tables" / f"{kind}.md", base / "tables" / f"{kind}.csv"
            if csv.is_file() and csv.stat().st_size > 1:
                try:
                    checked += _check_kind_table(sv, kind, pd.read_csv(csv), str(csv), md=False)
                except pd.errors.EmptyDataError:
                    pass
            if md.is_file():
                text = md.read_text(encoding="utf-8")
                for df in _md_tables(text):
                    checked += _check_kind_table(sv, kind, df, str(md), md=True)
                _no_serial_footnote_on_paired_tables(sv, text, str(md))
        ver = base / "export" / "verdicts.csv"
        if (base / "export").is_dir():
            assert ver.is_file(), f"{ver}: the export has no verdicts table"
            df = pd.read_csv(ver)
            for r in df.to_dict("records"):
                v = sv.get(r["kind"], r["model"], r["workload"], r["old"], r["new"])
                assert v is not None and r["verdict"] == v.verdict and r["verdict_text"] == v.text, f"{ver}: {r}"
                checked += 1
    report = study / "report" / "REPORT.md"
    if report.is_file() and len(leg_pairs(st.canon)) >= 2:
        text = report.read_text(encoding="utf-8")
        checked += _check_answer(sv, text, str(report))
        _no_serial_footnote_on_paired_tables(sv, text, str(report))
        card = study / "report" / "README.md"
        if card.is_file():
            checked += _check_answer(sv, card.read_text(encoding="utf-8"), str(card))
    assert checked or not [c for c in sv.cells if c.verdict != "missing"], f"{study}: no view was checked"


@pytest.mark.parametrize("study", STUDIES, ids=[s.name for s in STUDIES])
def test_views_built_now_read_the_one_object(study: Path) -> None:
    from harness.analyze import tables
    from harness.publish import figure_cells, site
    from harness.publish.sections import answer as sec

    st = _load(study)
    sv = study_verdicts(st.canon)
    assert study_verdicts(st.canon) is sv              # computed once per canonical selection
    ans = sec.answer(st)
    assert [c.v for c in ans.cells] == list(sv.cells)
    if len(leg_pairs(st.canon)) >= 2:
        _check_answer(sv, sec.answer_md(st), f"{study.name}: answer_md", step_lines=False)
        _check_answer(sv, "\n".join(sec.step_lines(ans)), f"{study.name}: step lines")
        for m in sec.matrix_cells(ans):
            v = next(c for c in sv.cells if (c.model, c.step) == (m.model, m.step) and m.workload.startswith(c.workload))
            assert m.verdict == v.cls
        rows = figure_cells.ratio_rows(st)
        for r in rows.to_dict("records"):
            v = sv.get(r["kind"], r["model"], r["workload"], r["old"], r["new"])
            assert v is not None and r["verdict"] == v.verdict
            if v.confidence:
                assert (r["low"], r["high"]) == (v.low, v.high)
        line = site.study_row(study).answer if hasattr(site, "study_row") else None
        if line is not None:
            for step in dict.fromkeys(c.step for c in sv.cells):
                assert step_sentence([c for c in sv.cells if c.step == step]) in line
    for kind in workloads.KINDS:
        t = tables.kind_table(st.canon, kind)
        _check_kind_table(sv, kind, t.data, f"{study.name}: {kind} data", md=False)
        _check_kind_table(sv, kind, t.display, f"{study.name}: {kind} display", md=True)
        _no_serial_footnote_on_paired_tables(sv, t.markdown(), f"{study.name}: {kind}")


def test_a_cell_decided_alone_but_not_across_its_family_says_so_next_to_its_interval() -> None:
    v = CellVerdict(kind="throughput", model="m", workload="w", old="a", new="b", old_label="0.27", new_label="0.32",
                    family="steps", family_size=4, verdict="undecided", alone="faster", ratio=1.06, low=1.002,
                    high=1.126, interval="95% t", p=0.0457, p_adj=0.0609, rule=NESTED_METHOD, unit="engine block",
                    units=4, n_old=12, n_new=12, blocks=4)
    assert v.text == "undecided across the 4 cells of its family (faster alone, p = 0.0457, adjusted 0.0609 > α)"
    assert v.cls == "undecided" and v.ratio_text == "1.06x [1.00, 1.13]"
    assert v.units_text == "4 engine blocks (12 pass pairs)"
    assert "4 engine blocks (12 pass pairs), engine-block means as units; 95% interval" in v.rule_text
