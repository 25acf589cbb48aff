"""Coverage, the full throughput and latency tables, and failure attribution."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.analyze import tables
from harness.analyze.tables import _legs, markdown_table
from harness.publish import wording as w
from harness.publish.claims.base import models, passes
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


def throughput_md(st: Study) -> str:
    return tables.throughput(st.canon).markdown(heading=False)


def latency_md(st: Study) -> str:
    return tables.latency(st.canon).markdown(heading=False)


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
