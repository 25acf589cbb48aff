"""Coverage, the full throughput and latency tables, and failure attribution."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness import workloads
from harness.analyze import tables
from harness.analyze.tables import _legs, markdown_table
from harness.analyze import wording as w
from harness.analyze.claims.base import models, passes
from harness.publish.study import Study


@dataclass(frozen=True, kw_only=True)
class Coverage:
    table: pd.DataFrame        # the coverage table as displayed, legs by label
    sentences: list[str]       # how many models compare across every leg; per leg, pins and failures
    notes: list[str]


def coverage(st: Study) -> Coverage:
    from harness.analyze.failure import attributions_by_model

    canon = st.canon
    t = tables.coverage(canon)
    disp = t.display.copy()
    disp["leg"] = [canon.study.label(x) for x in disp["leg"]]
    lines = []
    legs = _legs(canon)
    ms = models(canon)
    full = [m for m in ms if all(passes(canon, leg, m) for leg, _ in legs)]
    if len(legs) >= 2:
        way = {2: "two", 3: "three", 4: "four"}.get(len(legs), str(len(legs)))
        lines.append(f"{len(full)} of {w.n(len(ms), 'model')} {w.v(len(full), 'supports', 'support')} a "
                     f"{way}-way comparison.")
    att = attributions_by_model(canon.dataset, series=canon.series)
    pinned_by = {label: [m for m in att.loc[(att["leg"] == leg) & (att["status"] == "passes only pinned"), "model"]]
                 for leg, label in legs}
    if any(pinned_by.values()):
        # "Passing" counts a model that passes only under a pin; say which, beside the count.
        disp.insert(2, "of which only under a pin",
                    [", ".join(f"`{m}`" for m in pinned_by.get(lb, [])) or "—" for lb in disp["leg"]])
    for leg, label in legs:
        a = att[att["leg"] == leg]
        missing = a[a["status"] == "missing"]
        pinned = a[a["status"] == "passes only pinned"]
        bits = []
        if len(pinned):
            pins = sorted({p for ps in pinned["pins"] for p in ps})
            bits.append(f"{w.n(len(pinned), 'model')} {w.v(len(pinned), 'passes', 'pass')} only under a dependency "
                        f"pin ({', '.join(f'`{p}`' for p in pins)})")
        if len(missing):
            sigs = missing["signature"].nunique()
            bits.append(f"{w.n(len(missing), 'model')} {w.v(len(missing), 'fails', 'fail')} "
                        f"({w.n(sigs, 'failure signature')})")
        if bits:
            lines.append(f"On {label}, " + " and ".join(bits) + "; see \"Failure attribution\".")
    return Coverage(table=disp, sentences=lines, notes=list(t.notes))


def coverage_md(st: Study) -> str:
    c = coverage(st)
    lines = [markdown_table(c.table), "", *c.sentences, "", *(f"_{n}_" for n in c.notes)]
    return "\n".join(lines) + "\n"


def kind_table(st: Study, kind: str) -> tables.Table:
    """The kind's table as the report shows it. Transcribed figures: each single-pass ratio carries the
    interval the printed rounding allows, and the ratio the source printed sits beside it (⚠ where it
    lies outside that interval). One leg: no ratio, so no word on how ratios read."""
    from harness.analyze import rounding

    t = tables.kind_table(st.canon, kind)
    legs = _legs(st.canon)
    metric = workloads.metric_of(kind)
    notes = [n for n in t.notes if not (len(legs) < 2 and n == metric.ratio_note())]
    if not st.transcribed or len(legs) < 2 or not len(t.data):
        return tables.Table(name=t.name, title=t.title, data=t.data, display=t.display, notes=tuple(notes))
    labels = [lb for _, lb in legs]
    printed = rounding.printed_ratios(st.root, kind, labels)
    short = tables.short_labels(labels)
    disp, data = t.display.copy(), t.data.copy()
    differ, beyond = 0, []
    for (_, a), (_, b) in zip(legs, legs[1:]):
        lab = metric.ratio_label(short[a], short[b])
        shown, pcol, lows, highs = [], [], [], []
        for i, r in enumerate(data.to_dict("records")):
            old, new = r.get(a), r.get(b)
            if old is None or new is None or pd.isna(old) or pd.isna(new) or r.get(f"{lab} low") is not None \
                    and not pd.isna(r.get(f"{lab} low")):
                shown.append(disp[lab].iat[i])
                pcol.append("—")
                lows.append(None)
                highs.append(None)
                continue
            lo, hi = rounding.ratio_bounds(float(old), float(new), metric)
            lows.append(lo)
            highs.append(hi)
            shown.append(f"{disp[lab].iat[i]} [{lo:.2f}, {hi:.2f}]")
            pv = printed.get((r["model"], r["workload"], a, b))
            if pv is None:
                pcol.append("—")
                continue
            p = rounding.Printed(value=pv, low=lo, high=hi)
            differ += f"{pv:.2f}x" != disp[lab].iat[i]
            if p.disagrees:
                beyond.append(f"{tables.ticked(r['model'])} {r['workload']} {lab}")
            pcol.append(f"{pv:.2f}x" + (" ⚠" if p.disagrees else ""))
        disp[lab] = shown
        data[f"{lab} rounding low"], data[f"{lab} rounding high"] = lows, highs
        if printed:
            disp.insert(disp.columns.get_loc(lab) + 1, f"{lab} printed", pcol)
    notes.append("Transcribed figures are rounded as printed: each ratio's bracket is the range the rounding of its "
                 "two figures allows (a printed 21,943 stands for 21,942.5–21,943.5).")
    if printed:
        notes.append(f"\"printed\": the ratio the source printed, from its unrounded figures; {differ} differ from "
                     f"the recomputed ratio in the last digit, "
                     + (f"{len(beyond)} by more than rounding allows (⚠: {', '.join(beyond)})." if beyond else
                        "none by more than rounding allows."))
    return tables.Table(name=t.name, title=t.title, data=data, display=disp, notes=tuple(notes))


def _kind_md(st: Study, kind: str) -> str:
    """The kind's table, or, where the study has no run of the kind, one sentence (an empty table prints
    as a header row alone)."""
    t = kind_table(st, kind)
    if not len(t.display):
        return (f"This study measures no {kind} workload; its figures are in the sections for the workloads it "
                "does measure.\n")
    return t.markdown(heading=False)


def throughput_md(st: Study) -> str:
    return _kind_md(st, "throughput")


def latency_md(st: Study) -> str:
    return _kind_md(st, "latency")


@dataclass(frozen=True, kw_only=True)
class Failures:
    lead: list[str]            # per leg: how many models fail or pass only pinned, how many root causes
    table: pd.DataFrame        # the failure table's shown columns (empty: nothing failed)


def failures(st: Study) -> Failures:
    from harness.analyze.failure import attributions_by_model, failure_table

    ds, canon = st.ds, st.canon
    ft = failure_table(ds, series=canon.series)
    if not len(ft):
        return Failures(lead=[], table=ft)
    att = attributions_by_model(ds, series=canon.series)
    lead = []
    for leg, label in _legs(canon):
        g = ft[ft["leg"] == label]
        if len(g):
            n = len(att[att["leg"] == leg])
            lead.append(f"on {label}, the {w.n(n, 'model')} that {w.v(n, 'fails', 'fail')} or "
                        f"{w.v(n, 'passes', 'pass')} only under a pin {w.v(n, 'has', 'have')} "
                        f"{w.n(len(g), 'root cause')}")
    show = ft[["leg", "root cause", "class", "models", "model names", "error", "fixable?", "evidence"]]
    return Failures(lead=lead, table=show)


def failures_md(st: Study) -> str:
    f = failures(st)
    if not len(f.table):
        return "No run of the main series failed, and no model needed a pin to pass.\n"
    text = "; ".join(f.lead)
    lines = [w.cap(text) + ".", ""] if f.lead else []
    lines += [markdown_table(f.table), "",
              "_Built from the records: per leg, the models with no passing run in the main series, or passing only "
              "under a pin, grouped by failure signature (`harness.analyze.failure`). \"pin only\" means the records "
              "hold the passing run under the pin but no failed run without it._"]
    return "\n".join(lines) + "\n"
