"""The answer, said first: a short summary and one table of (model, workload, step) with the ratio,
its interval and the verdict of `harness.analyze.stats.ratio`, and, for a cell missing on one side,
the failure's root cause and whether a pin fixes it (`harness.analyze.failure`).

For transcribed figures the interval is the one the rounding of the printed figures allows
(`harness.analyze.rounding`), and the ratio the source printed is shown beside the recomputed one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from harness import workloads
from harness.analyze import capacity as acap
from harness.analyze import rounding
from harness.analyze.equivalence import DIFFERENT, equivalence_by_step
from harness.analyze.significance import decide_table
from harness.analyze.stats import Ratio, band_side, ratio
from harness.analyze.tables import _legs, cell_ratio, study_alpha, study_margin, ticked
from harness.publish import wording as w
from harness.publish.claims.base import cells_by_key, table_rows
from harness.publish.matrix import MatrixCell
from harness.publish.study import Study

# A study with at most this many (model, workload, step) cells shows every one of them; a larger
# one shows the cells that moved, or are missing, and counts the rest.
SHOW_ALL = 24
CAPACITY_NOTE = "capacity at the SLO (req/s), not throughput"


@dataclass(frozen=True, kw_only=True)
class Cell:
    model: str
    workload: str
    kind: str
    step: str                      # "0.18 → 0.26"
    ratio: float | None
    low: float | None
    high: float | None
    interval: str | None           # "95% Welch-t" | "rounding" | None
    verdict: str                   # ratio()'s verdict string ("missing" for a missing side)
    side: str                      # "above" | "below" | "within" the flat band, or "missing"
    printed: float | None = None   # the ratio the source printed (transcribed studies)
    recomputed: float | None = None  # where `ratio` is the printed one: the ratio of the rounded figures
    printed_disagrees: bool = False
    note: str = ""                 # missing side's root cause, pins, rounding
    answers: str = ""              # the step's output-equivalence verdict for the model (harness.analyze.equivalence)


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
    from harness.analyze.failure import attributions_by_model

    canon = st.canon
    legs = _legs(canon)
    band = st.params.band
    att = attributions_by_model(canon.dataset, series=canon.series)
    cells = cells_by_key(canon)
    labels = [lb for _, lb in legs]
    answers = {k: v.verdict for k, v in equivalence_by_step(canon.dataset).items()}
    out: list[Cell] = []
    tests: list[tuple[int, Ratio]] = []   # (index in out, its ratio): decided together below
    margin, _ = study_margin(canon)
    capacities = acap.by_leg(acap.searches(canon))
    for kind in workloads.KINDS:
        metric = workloads.metric_of(kind)
        printed = rounding.printed_ratios(st.root, kind, labels) if st.transcribed else {}
        for model, workload in table_rows(canon, kind):
            for (old, lo), (new, ln) in zip(legs, legs[1:]):
                a, b = cells.get((old, model, workload)), cells.get((new, model, workload))
                step = f"{lo} → {ln}"
                if a is None or b is None:
                    gone = [(lg, lb) for lg, lb, c in ((old, lo, a), (new, ln, b)) if c is None]
                    note = "; ".join(_cause(st, att, lg, lb, model) for lg, lb in gone)
                    out.append(Cell(model=model, workload=workload, kind=kind, step=step, ratio=None, low=None,
                                    high=None, interval=None, verdict="missing", side="missing", note=note))
                    continue
                notes = [x for x in (_pinned(att, old, lo, model), _pinned(att, new, ln, model)) if x]
                caps = capacities.get((model, workload))
                if caps is not None:
                    # A capacity search answers with the load it held at the SLO; the serve kind's own
                    # metric (peak throughput over the probes, failing ones included) is not the answer.
                    rt = ratio(caps.get(old, []), caps.get(new, []), higher_is_better=True, margin=margin)
                    notes.append(CAPACITY_NOTE)
                else:
                    rt = cell_ratio(canon, a, b, workloads.metric_of(kind), margin=margin)
                tests.append((len(out), rt))
                low, high, interval = rt.low, rt.high, "95% Welch-t" if rt.low is not None else None
                pr, dis = None, False
                transcribed = "transcribed" in (a["provenance"], b["provenance"])
                if transcribed and rt.value is not None and rt.n_old == 1 and rt.n_new == 1:
                    low, high = rounding.ratio_bounds(float(a["value"]), float(b["value"]), metric)
                    interval = "rounding"
                    pv = printed.get((model, workload, lo, ln))
                    if pv is not None:
                        p = rounding.Printed(value=pv, low=low, high=high)
                        pr, dis = pv, p.disagrees
                value = float(rt.value) if rt.value is not None else None
                recomputed = None
                if pr is not None and value is not None:
                    # A transcribed study's answer quotes the ratio the source printed, from its unrounded
                    # figures: the ratio of the rounded figures is shown beside it, never in its place.
                    value, recomputed = pr, value
                side = band_side(value, band) if value is not None else "missing"
                if interval == "95% Welch-t":
                    # With repeats the interval decides: a ratio outside the band whose interval contains
                    # 1.00x has not moved by what these runs can tell.
                    side = {"faster": "above", "slower": "below"}.get(str(rt.verdict), "within")
                if interval == "rounding" and low is not None and high is not None and low <= 1 <= high \
                        and side != "within":
                    notes.append("rounding alone could make it 1.00x")
                out.append(Cell(model=model, workload=workload, kind=kind, step=step, ratio=value, low=low,
                                high=high, interval=interval, verdict=str(rt.verdict), side=side, printed=pr,
                                recomputed=recomputed, printed_disagrees=dis, note="; ".join(notes), answers=answers.get((model, step), "")))
    # The answer is one table of many tests: its verdicts are decided together (false discovery rate at
    # alpha, significance.decide_table), as every table's are; each cell keeps its own interval.
    for (i, rt), v in zip(tests, decide_table([rt.test for _, rt in tests], alpha=study_alpha(canon))):
        c = out[i]
        if v is None or c.interval != "95% Welch-t":
            continue
        side = {"faster": "above", "slower": "below"}.get(v, "within")
        text = f"equivalent within ±{rt.margin:.0%}" if v == "equivalent" and rt.margin is not None else v
        out[i] = replace(c, verdict=text, side=side)
    moved = [c for c in out if c.side in ("above", "below", "missing") or c.verdict in ("faster", "slower")
             or c.answers == DIFFERENT]
    shown = _merge_missing(out if len(out) <= SHOW_ALL else moved)
    return Answer(summary=_summary(st, out, shown), cells=out, shown=shown)


def _merge_missing(cells: list[Cell]) -> list[Cell]:
    """The missing cells of one model and step, of every kind, as one row (they share the cause)."""
    out: list[Cell] = []
    at: dict[tuple[str, str, str], int] = {}
    for c in cells:
        if c.side != "missing":
            out.append(c)
            continue
        key = (c.model, c.step, c.note)
        if key in at:
            prev = out[at[key]]
            out[at[key]] = Cell(**{**prev.__dict__, "workload": f"{prev.workload}, {c.workload}"})
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
        up = [c for c in ks if c.side == "above"]
        down = [c for c in ks if c.side == "below"]
        flat = [c for c in ks if c.side == "within"]
        miss = [c for c in ks if c.side == "missing"]
        sig = [c for c in ks if c.verdict in ("faster", "slower")]
        title = workloads.metric_of(kind).title.split(" (")[0].lower()
        if all(CAPACITY_NOTE in c.note for c in ks if c.side != "missing"):
            title = "serving: capacity at the SLO (req/s, higher is better)"
        with_ci = any(c.interval == "95% Welch-t" for c in ks)
        parts = [f"{len(up)} faster", f"{len(down)} slower",
                 f"{len(flat)} within {band:.0%} of 1.00x" + (" or with an interval that contains 1.00x" if with_ci else "")]
        if miss:
            parts.append(f"{len(miss)} missing a side")
        text = f"**{w.cap(title)}:** of {w.n(len(ks), '(model, workload, step) cell')}, " + ", ".join(parts) + "."
        if sig:
            text += (f" {len(sig)} of them {w.v(len(sig), 'has', 'have')} a 95% interval that excludes 1.00x "
                     f"({', '.join(f'{ticked(c.model)} {c.workload} {c.step}: {c.verdict}' for c in sig[:4])}"
                     f"{' …' if len(sig) > 4 else ''}).")
        best = max((c for c in ks if c.ratio is not None), key=lambda c: c.ratio or 0, default=None)
        worst = min((c for c in ks if c.ratio is not None), key=lambda c: c.ratio or 0, default=None)
        if best is not None and (best.ratio or 0) > 1:
            text += f" Largest ratio: {ticked(best.model)} {best.workload}, {best.step}, {best.ratio:.2f}x."
        if worst is not None and (worst.ratio or 1) < 1:
            text += f" Smallest: {ticked(worst.model)} {worst.workload}, {worst.step}, {worst.ratio:.2f}x."
        lines.append(text)
    single = all(c.interval != "95% Welch-t" for c in cells if c.ratio is not None)
    if st.transcribed:
        lines.append("The figures are transcribed, not measured: each ratio is the one the source printed, from "
                     "its unrounded figures, and the interval beside it is the range the rounding of the two printed "
                     "figures allows, not a confidence interval (a single printed figure per side).")
    elif single:
        lines.append("Every ratio is a single pass per side: the verdict is \"single pass\", and a ratio within the "
                     "band reads \"undecided\", never \"no difference\".")
    if len(shown) < len(cells):
        lines.append(f"The table lists the {len(shown)} rows of cells that moved (by more than {band:.0%}, or with a "
                     f"95% interval that excludes 1.00x) or miss a side; the other {len(cells) - len(shown)} are "
                     f"in \"Full data\".")
    return lines


def verdict_class(c: Cell) -> str:
    """The cell's class in the answer figure (`harness.publish.matrix.CLASSES`): faster / slower where
    the ratio left the band (or its interval excludes 1.00x), equivalent where an equivalence test says
    so, missing where a side is, undecided otherwise (a single pass within the band, an interval that
    contains 1.00x)."""
    if c.side == "missing":
        return "missing"
    if c.side in ("above", "below"):
        return "faster" if c.side == "above" else "slower"
    return "equivalent" if c.verdict.startswith("equivalent") else "undecided"


def matrix_cells(ans: Answer) -> list[MatrixCell]:
    """Every cell of the answer, as the answer figure draws it; a workload shown under more than one
    kind is named with its kind."""
    kinds: dict[tuple[str, str], set[str]] = {}
    for c in ans.cells:
        kinds.setdefault((c.model, c.workload), set()).add(c.kind)
    return [MatrixCell(model=c.model, step=c.step, ratio=c.ratio, verdict=verdict_class(c),
                       workload=c.workload + (f" ({c.kind})" if len(kinds[(c.model, c.workload)]) > 1 else ""),
                       cause=c.note if c.side == "missing" else "") for c in ans.cells]


def step_lines(ans: Answer) -> list[str]:
    """One sentence per step, first on the page: how many of its cells are faster, slower, equivalent,
    undecided and missing."""
    out = []
    for step in dict.fromkeys(c.step for c in ans.cells):
        classes = [verdict_class(c) for c in ans.cells if c.step == step]
        counts = {k: classes.count(k) for k in ("faster", "slower", "equivalent", "undecided", "missing")}
        parts = [f"{k} on {n}" for k, n in counts.items() if n or k in ("faster", "slower")]
        out.append(f"**{step}:** " + ", ".join(parts) + f" of {w.n(len(classes), '(model, workload) cell')}"
                   + (" (the letters under the figure give each missing cell's root cause)" if counts["missing"] else "")
                   + ".")
    return out


def _ratio_text(c: Cell) -> str:
    if c.ratio is None:
        return "—"
    s = f"{c.ratio:.2f}x"
    if c.low is not None and c.high is not None:
        s += f" [{c.low:.2f}, {c.high:.2f}]"
    return s


def answer_table(ans: Answer) -> pd.DataFrame:
    rows = []
    for c in ans.shown:
        verdict = c.verdict + (" (rounding interval)" if c.interval == "rounding" else "")
        note = c.note
        if c.printed is not None and (c.printed_disagrees or c.recomputed is None
                                      or f"{c.printed:.2f}" != f"{c.recomputed:.2f}"):
            # The ratio column is the printed ratio; where the rounded figures give another, say so.
            again = f"{c.recomputed:.2f}x" if c.recomputed is not None else "—"
            note = "; ".join(x for x in (f"printed ratio; {again} recomputed from the rounded figures"
                                         + (" ⚠ printed ratio outside what rounding allows" if c.printed_disagrees
                                            else ""), note) if x)
        answer = c.answers or "—"
        if c.answers == DIFFERENT and (c.verdict == "faster" or c.side == "above"):
            answer = "⚠ faster, but " + c.answers   # the speed may come from computing something else
        rows.append({"model · workload": f"{ticked(c.model)} · {c.workload}", "step": c.step,
                     "ratio [interval]": _ratio_text(c), "verdict": verdict, "answers": answer,
                     "why / note": note or "—"})
    cols = ["model · workload", "step", "ratio [interval]", "verdict", "answers", "why / note"]
    if not any(c.answers for c in ans.shown):  # no equivalence runs in the study: no column
        cols.remove("answers")
    return pd.DataFrame(rows, columns=cols)


def answer_md(st: Study, *, between: str = "") -> str:
    """The summary, then `between` (the study's notes for this section: context a reader needs before
    the table), then the table."""
    from harness.publish.mdtable import table_md

    ans = answer(st)
    lines = [*ans.summary, *([between.rstrip("\n")] if between.strip() else [])]
    if ans.shown:
        lines += ["", table_md(answer_table(ans)), "",
                  "_Ratio: above 1.00x the newer leg is faster (throughput new/old, latency old/new). Interval: the "
                  "95% Welch-t interval where both sides were repeated"
                  + ("; for transcribed figures, the range the printed rounding allows" if st.transcribed else "")
                  + ". Verdict: `harness.analyze.stats.ratio`."
                  + (" Answers: whether the step's legs decode the model's equivalence prompts to the same greedy "
                     "outputs (`harness equivalence`, docs/equivalence.md); ⚠ marks a faster step that gives "
                     "different answers." if any(c.answers for c in ans.shown) else "") + "_"]
    head = len(ans.summary) + (1 if between.strip() else 0)
    return "\n\n".join(lines[:head]) + "\n" + "\n".join(lines[head:]) + "\n"
