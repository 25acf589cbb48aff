"""Does the paired design change any number? Two series of one study measured the same legs, one in
the paired, interleaved design and one serially (one engine per group or per run); per (model,
workload), the ratio of their version ratios, with its interval.

If pairing only removes noise, the two modes estimate one version ratio and their ratio is 1 within
its interval. Each mode's ratio comes from its own rule (the nested paired rule; Welch's on repeats),
exactly as its table prints it; the two are independent measurements, so on the log scale the
difference has variance se_paired^2 + se_serial^2, with Welch–Satterthwaite degrees of freedom.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness import workloads
from harness.analyze.canonical import canonicalize
from harness.analyze.dataset import Dataset
from harness.analyze.significance import ALPHA, Test
from harness.analyze.stats import Ratio, ratio


@dataclass(frozen=True, kw_only=True)
class ModeRow:
    model: str
    workload: str
    paired: Ratio
    serial: Ratio
    value: float | None          # paired ratio ÷ serial ratio (geometric means)
    low: float | None
    high: float | None


def _cell_ratio(canon, old: str, new: str, model: str, workload: str, kind: str, margin: float | None) -> Ratio:
    from harness.analyze.tables import paired_cell

    metric = workloads.kind(kind).METRIC
    cells = {(c["leg"], c["model"], c["workload"]): c for c in canon.cells.to_dict("records")}
    a, b = cells.get((old, model, workload)), cells.get((new, model, workload))
    if a is None or b is None:
        return ratio((), (), higher_is_better=metric.higher_is_better)
    if a.get("pairs") and b.get("pairs"):
        return paired_cell(a["pairs"], b["pairs"], metric=metric, margin=margin or 0.05,
                           engine_sd=canon.study.extra.get("engine_sd"))
    return ratio(a["samples"], b["samples"], higher_is_better=metric.higher_is_better, margin=margin)


def _log_point(r: Ratio) -> tuple[float, Test] | None:
    t = r.test
    if t is None or not (t.se > 0) or not math.isfinite(t.df):
        return None
    return math.log(t.ratio), t


def mode_agreement(ds: Dataset, *, paired: str, serial: str, old: str, new: str,
                   alpha: float = ALPHA) -> list[ModeRow]:
    """Per (model, workload) measured in both series: the two modes' new-vs-old ratios and their ratio."""
    from scipy import stats as sps

    margin = ds.study.extra.get("margin")
    cp = canonicalize(ds, series=paired, allow_reused=True)
    cs = canonicalize(ds, series=serial, allow_reused=True)
    kinds = {(c["model"], c["workload"]): c["kind"] for c in cp.cells.to_dict("records")}
    both = sorted(set(kinds) & {(c["model"], c["workload"]) for c in cs.cells.to_dict("records")})
    rows = []
    for model, workload in both:
        kind = kinds[(model, workload)]
        rp = _cell_ratio(cp, old, new, model, workload, kind, margin)
        rs = _cell_ratio(cs, old, new, model, workload, kind, margin)
        lp, ls = _log_point(rp), _log_point(rs)
        value = low = high = None
        if lp is not None and ls is not None:
            (mp, tp), (ms, ts) = lp, ls
            vp, vs = tp.se ** 2, ts.se ** 2
            df = (vp + vs) ** 2 / (vp ** 2 / tp.df + vs ** 2 / ts.df)
            half = float(sps.t.ppf(1 - alpha / 2, df)) * math.sqrt(vp + vs)
            d = mp - ms
            value, low, high = math.exp(d), math.exp(d - half), math.exp(d + half)
        rows.append(ModeRow(model=model, workload=workload, paired=rp, serial=rs, value=value, low=low, high=high))
    return rows


def mode_agreement_md(rows: list[ModeRow]) -> str:
    out = ["| model | workload | paired (n pairs) | serial (n per side) | paired ÷ serial [95% CI] |",
           "|---|---|---|---|---|"]
    for r in rows:
        both = "—" if r.value is None else f"{r.value:.3f} [{r.low:.3f}, {r.high:.3f}]"
        out.append(f"| `{r.model}` | {r.workload} | {r.paired.label()} ({r.paired.n_old}) | "
                   f"{r.serial.label()} ({r.serial.n_old}/{r.serial.n_new}) | {both} |")
    return "\n".join(out) + "\n"
