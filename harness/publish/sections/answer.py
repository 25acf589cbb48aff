"""The answer, said first: a short summary and one table of (model, workload, step) with the ratio,
its interval, the units the rule counted and the verdict, all read from the study's verdict objects
(`harness.analyze.verdicts`), and, for a cell missing on one side, the failure's root cause and whether
a pin fixes it (`harness.analyze.failure`).

For transcribed figures the interval is the one the rounding of the printed figures allows
(`harness.analyze.rounding`), and the ratio the source printed is shown beside the recomputed one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from harness import workloads
from harness.analyze import verdicts as vd
from harness.analyze.equivalence import DIFFERENT, equivalence_by_step
from harness.analyze.tables import _legs, ticked
from harness.analyze.verdicts import CAPACITY_NOTE, HALF_PASS_NOTE, CellVerdict, study_verdicts
from harness.analyze import wording as w
from harness.publish.matrix import MatrixCell
from harness.publish.study import Study

# A study with at most this many (model, workload, step) cells shows every one of them; a larger
# one shows the cells that moved, or are missing, and counts the rest.
SHOW_ALL = 24


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One row of the answer: the study's verdict object for the cell (`v`, harness.analyze.verdicts)
    and what the page adds beside it: the missing side's root cause, pins, and the step's output check."""

    v: CellVerdict
    note: str = ""                 # missing side's root cause, pins, rounding
    answers: str = ""              # the step's output-equivalence verdict for the model (harness.analyze.equivalence)
    workload: str = ""             # as shown: missing cells of one model and step are merged into one row

    @property
    def model(self) -> str:
        return self.v.model

    @property
    def kind(self) -> str:
        return self.v.kind

    @property
    def step(self) -> str:
        return self.v.step

    @property
    def ratio(self) -> float | None:
        return self.v.ratio

    @property
    def verdict(self) -> str:
        return self.v.text

    @property
    def cls(self) -> str:
        return self.v.cls


@dataclass(frozen=True, kw_only=True)
class Answer:
    summary: list[str]
    cells: list[Cell]
    shown: list[Cell]


def _cause(st: Study, att: pd.DataFrame, leg: str, label: str, model: str) -> str:
    from harness.analyze.failure import failure_class, signature

    a = att[(att["leg"] == leg) & (att["model"] == model)]
    if not len(a):
        recs = st.ds.records
        if st.transcribed and not ((recs["leg"] == leg) & (recs["model"] == model)).any():
            return f"the source gives no figure on {label}"
        return f"no canonical run on {label} (see CANONICAL.md)"
    r = a.iloc[0]
    sig = signature(str(r["signature"]))
    if sig is None:
        return f"fails on {label}: root cause unknown (class {failure_class(None)})"
    fix = {"yes": "a pin fixes it" + (f" ({sig.fix})" if sig.fix else ""),
           "no": "a pin does not fix it", }.get(sig.fixable, "whether a pin fixes it is unknown")
    return f"fails on {label}: {sig.root_cause} (class `{failure_class(sig.id)}`); {fix}"


def _pinned(att: pd.DataFrame, leg: str, label: str, model: str) -> str:
    a = att[(att["leg"] == leg) & (att["model"] == model) & (att["status"] == "passes only pinned")]
    if not len(a):
        return ""
    pins = sorted({p for ps in a["pins"] for p in ps})
    return f"{label} passes only under {', '.join(f'`{p}`' for p in pins)}"


def answer(st: Study) -> Answer:
    """The answer's rows: one per step cell of the study's verdicts (`verdicts.study_verdicts`), in table
    order, with the page's notes beside each; nothing here decides or re-words a verdict."""
    from harness.analyze.failure import attributions_by_model

    canon = st.canon
    att = attributions_by_model(canon.dataset, series=canon.series)
    answers = {k: v.verdict for k, v in equivalence_by_step(canon.dataset).items()}
    have = {(c["leg"], c["model"], c["workload"]) for c in canon.cells.to_dict("records")}
    out: list[Cell] = []
    for v in study_verdicts(canon).cells:
        if v.verdict == "missing":
            gone = [(lg, lb) for lg, lb, c in ((v.old, v.old_label, v.old), (v.new, v.new_label, v.new))
                    if (lg, v.model, v.workload) not in have]
            note = "; ".join(_cause(st, att, lg, lb, v.model) for lg, lb in gone)
            out.append(Cell(v=v, note=note, workload=v.workload))
            continue
        notes = [x for x in (_pinned(att, v.old, v.old_label, v.model), _pinned(att, v.new, v.new_label, v.model)) if x]
        if v.capacity:
            notes.append(HALF_PASS_NOTE if v.half_pass else CAPACITY_NOTE)
        if v.interval == "rounding" and v.low is not None and v.high is not None and v.low <= 1 <= v.high:
            notes.append("rounding alone could make it 1.00x")
        out.append(Cell(v=v, note="; ".join(notes), answers=answers.get((v.model, v.step), ""), workload=v.workload))
    moved = [c for c in out if c.v.moved(st.params.band) or c.answers == DIFFERENT]
    shown = _merge_missing(out if len(out) <= SHOW_ALL else moved)
    return Answer(summary=_summary(st, out, shown), cells=out, shown=shown)


def _merge_missing(cells: list[Cell]) -> list[Cell]:
    """The missing cells of one model and step, of every kind, as one row (they share the cause)."""
    out: list[Cell] = []
    at: dict[tuple[str, str, str], int] = {}
    for c in cells:
        if c.cls != "missing":
            out.append(c)
            continue
        key = (c.model, c.step, c.note)
        if key in at:
            prev = out[at[key]]
            out[at[key]] = replace(prev, workload=f"{prev.workload}, {c.workload}")
        else:
            at[key] = len(out)
            out.append(c)
    return out


def _summary(st: Study, cells: list[Cell], shown: list[Cell]) -> list[str]:
    legs = _legs(st.canon)
    band = st.params.band
    if len(legs) < 2:
        from harness.publish.sections.supporting import supporting

        n = len(st.canon.cells)
        lines = [f"This study has one leg ({legs[0][1] if legs else 'none'}), so there is no step between versions "
                 f"to judge" + (f": its {w.n(n, 'canonical figure')} {w.v(n, 'is', 'are')} absolute, and the tables "
                                  f"below give them with their repeats." if n else
                                  ", and no run of its default arm has a canonical figure.")]
        series = [s for s in supporting(st) if s.kind in ("arms", "exit-status")]
        if series:
            lines.append("Beside the default arm it measures other arms: " + "; ".join(f"series `{s.name}` ({s.kind.replace('-', ' ')})"
                                                                 for s in series)
                         + ", under \"Supporting measurements\", which gives each arm's outcome and what it shows.")
        return lines
    lines = []
    for kind in workloads.KINDS:
        ks = [c for c in cells if c.kind == kind]
        if not ks:
            continue
        title = workloads.metric_of(kind).title.split(" (")[0].lower()
        if all(c.v.capacity for c in ks if c.cls != "missing"):
            title = "serving: capacity at the SLO (req/s, higher is better)"
            if all(c.v.half_pass for c in ks if c.cls != "missing"):
                title = "serving: half-pass rate at the SLO per server (req/s, higher is better)"
        n = vd.counts([c.v for c in ks])
        parts = [f"{v} {k}" for k, v in n.items() if v or k in ("faster", "slower")]
        text = f"**{w.cap(title)}:** of {w.n(len(ks), '(model, workload, step) cell')}, " + ", ".join(parts) + "."
        held = [c for c in ks if c.v.verdict == "undecided" and c.v.alone in ("faster", "slower", "equivalent")]
        if held:
            text += (f" {len(held)} of the undecided {w.v(len(held), 'is', 'are')} decided alone but not across the "
                     f"study's {ks[0].v.family_size} tested cells ({held[0].v.family_text}).")
        best = max((c for c in ks if c.ratio is not None), key=lambda c: c.ratio or 0, default=None)
        worst = min((c for c in ks if c.ratio is not None), key=lambda c: c.ratio or 0, default=None)
        if best is not None and (best.ratio or 0) > 1:
            text += f" Largest ratio: {ticked(best.model)} {best.workload}, {best.step}, {best.ratio:.2f}x."
        if worst is not None and (worst.ratio or 1) < 1:
            text += f" Smallest: {ticked(worst.model)} {worst.workload}, {worst.step}, {worst.ratio:.2f}x."
        lines.append(text)
    if st.transcribed:
        lines.append("The figures are transcribed, not measured: each ratio is the one the source printed, from "
                     "its unrounded figures, and the interval beside it is the range the rounding of the two printed "
                     "figures allows, not a confidence interval (a single printed figure per side, so the verdict is "
                     "\"single pass\" whatever the ratio).")
    elif all(c.cls in ("single pass", "missing") for c in cells):
        lines.append("Every ratio is a single pass per side: the verdict is \"single pass\", never \"no difference\".")
    if len(shown) < len(cells):
        lines.append(f"The table lists the {len(shown)} rows of cells that were decided faster or slower, a single "
                     f"pass outside {band:.0%} of 1.00x, or miss a side; the other {len(cells) - len(shown)} are "
                     "in \"Full data\".")
    return lines


def verdict_class(c: Cell) -> str:
    """The cell's class in the answer figure and counts: the verdict object's (`CellVerdict.cls`)."""
    return c.cls


def matrix_cells(ans: Answer) -> list[MatrixCell]:
    """Every cell of the answer, as the answer figure draws it; a workload shown under more than one
    kind is named with its kind."""
    kinds: dict[tuple[str, str], set[str]] = {}
    for c in ans.cells:
        kinds.setdefault((c.model, c.workload), set()).add(c.kind)
    return [MatrixCell(model=c.model, step=c.step, ratio=c.ratio, verdict=verdict_class(c),
                       workload=c.workload + (f" ({c.kind})" if len(kinds[(c.model, c.workload)]) > 1 else ""),
                       cause=c.note if c.cls == "missing" else "") for c in ans.cells]


def step_lines(ans: Answer) -> list[str]:
    """One sentence per step, first on the page: how many of its cells are faster, slower, equivalent,
    undecided, single pass and missing (`verdicts.step_sentence`)."""
    out = []
    for step in dict.fromkeys(c.step for c in ans.cells):
        cs = [c.v for c in ans.cells if c.step == step]
        missing = any(c.cls == "missing" for c in cs)
        out.append(f"**{step}:** " + vd.step_sentence(cs)
                   + (" (the letters under the figure give each missing cell's root cause)" if missing else "") + ".")
    return out


def answer_table(ans: Answer) -> pd.DataFrame:
    rows = []
    for c in ans.shown:
        v = c.v
        note = c.note
        if v.printed is not None and (v.printed_disagrees or v.recomputed is None
                                      or f"{v.printed:.2f}" != f"{v.recomputed:.2f}"):
            # The ratio column is the printed ratio; where the rounded figures give another, say so.
            again = f"{v.recomputed:.2f}x" if v.recomputed is not None else "—"
            note = "; ".join(x for x in (f"printed ratio; {again} recomputed from the rounded figures"
                                         + (" ⚠ printed ratio outside what rounding allows" if v.printed_disagrees
                                            else ""), note) if x)
        answer = c.answers or "—"
        if c.answers == DIFFERENT and c.cls == "faster":
            answer = "⚠ faster, but " + c.answers   # the speed may come from computing something else
        elif c.answers == DIFFERENT and v.ratio is not None and v.ratio > 1:
            # Not decided faster (a single pass, say), but the ratio favours the newer leg: the same warning,
            # without a verdict word the cell does not have.
            answer = f"⚠ {v.ratio:.2f}x, but " + c.answers
        rows.append({"model · workload": f"{ticked(c.model)} · {c.workload}", "step": c.step,
                     "ratio [interval]": v.ratio_text, "units": v.units_text if v.ratio is not None else "—",
                     "verdict": v.text + (" (rounding interval)" if v.interval == "rounding" else ""),
                     "answers": answer, "why / note": note or "—"})
    cols = ["model · workload", "step", "ratio [interval]", "units", "verdict", "answers", "why / note"]
    if not any(c.answers for c in ans.shown):  # no equivalence runs in the study: no column
        cols.remove("answers")
    return pd.DataFrame(rows, columns=cols)


def rules_note(ans: Answer) -> str:
    """Which rules and which family decided the shown rows, each named once."""
    rules = list(dict.fromkeys(c.v.rule_text.split(":")[0] if ":" in c.v.rule_text else c.v.rule_text.split(" over ")[0]
                               for c in ans.shown if c.v.ratio is not None))
    fam = next((c.v.family_text for c in ans.cells if c.v.p_adj is not None), None)
    return ("Units: what the rule counted — engine blocks (fresh engines per block) and the pass pairs inside them "
            "for paired cells, repeats per side otherwise. Rule: " + ("; ".join(rules) or "none")
            + (f". Decided together by {fam}; the tables, figures and card give the same verdicts" if fam else "")
            + " (`harness.analyze.verdicts`).")


def answer_md(st: Study, *, between: str = "") -> str:
    """The summary, then `between` (the study's notes for this section: context a reader needs before
    the table), then the table."""
    from harness.publish.mdtable import table_md

    ans = answer(st)
    lines = [*ans.summary, *([between.rstrip("\n")] if between.strip() else [])]
    if ans.shown:
        lines += ["", table_md(answer_table(ans)), "",
                  "_Ratio: above 1.00x the newer leg is faster (throughput new/old, latency old/new). Interval: the "
                  "rule's 95% interval where both sides were repeated"
                  + ("; for transcribed figures, the range the printed rounding allows" if st.transcribed else "")
                  + ". " + rules_note(ans)
                  + (" Answers: whether the step's legs decode the model's equivalence prompts to the same greedy "
                     "outputs (`harness check equivalence`, docs/equivalence.md); ⚠ marks a faster step that gives "
                     "different answers." if any(c.answers for c in ans.shown) else "") + "_"]
    head = len(ans.summary) + (1 if between.strip() else 0)
    return "\n\n".join(lines[:head]) + "\n" + "\n".join(lines[head:]) + "\n"
