"""Capacity at the SLO, from the canonical serve runs that searched for it (docs/capacity.md).

Per run, the search's result (`serve.capacity`: status, capacity, bracket) and its probes' points;
per (model, workload, leg), the capacity over repeats with its interval; between the study's first two
legs, the ratio of capacities by the project's one significance rule (harness.analyze.stats.ratio,
with the study's equivalence margin: "equivalent within ±δ"); and the cost per million output tokens
at capacity when study.yaml states a price (`price: {per_hour, unit, source}`).

Which runs enter the repeats: a search that stopped `found` or `max_probes` has a capacity (the highest
passing load: for `max_probes` with a wider bracket than asked, which the table says). `at_least_hi`
(every load passed up to `hi`) and `below_lo` (the lowest failed) are censored, `failed` has none:
they are counted and named, never averaged in, since a bound is not a measurement of the value.

A capacity is known only to its search's resolution: the true one lies between the highest rate that
passed and the lowest that failed above it (`bracket_high`, at most a factor 1 + rel_tol higher), and
searches that start alike probe the same rates, so repeats often land on one grid point. The interval
per leg and the ratio's test take that resolution (`resolutions`: the widest final bracket among the
cell's searches) as `significance.welch_log` does: a gap no wider than the bisection's last step is not
a difference, and identical repeats on one grid point are not zero spread.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from harness import workloads
from harness.analyze.canonical import Canonical
from harness.analyze.serve import Price
from harness.analyze.significance import rounding_sd
from harness.analyze.stats import ALPHA, Ratio, ratio, spread

MEASURED = ("found", "max_probes")
CONFIDENCE = 0.95
_KEYS = ["model", "workload", "leg"]


def search_runs(canon: Canonical) -> list[Any]:
    runs = canon.runs
    if not len(runs):
        return []
    runs = runs[[workloads.known(k) and workloads.traits_of(k).server for k in runs["kind"]]]
    out = []
    for _, r in runs.iterrows():
        rec = canon.dataset.record(str(r["run_dir"]))
        if rec.serve is not None and rec.serve.capacity is not None:
            out.append(rec)
    return out


def searches(canon: Canonical) -> pd.DataFrame:
    """One row per canonical run that searched: its result and, at its capacity, the probe's throughput."""
    rows = []
    for rec in search_runs(canon):
        c = rec.serve.capacity
        pts = {p.index: p for p in rec.serve.points}
        at = next((pr for pr in reversed(c.probes) if pr.passed and pr.value == c.capacity), None)
        m = pts[at.point].metrics if at is not None and at.point in pts else None
        inputs = rec.serve.inputs
        rows.append({
            "model": rec.model, "workload": rec.workload, "leg": rec.leg, "repeat": rec.repeat, "tp": rec.tp,
            "axis": c.axis, "status": c.status, "capacity": c.capacity, "bracket_low": c.bracket_low,
            "bracket_high": c.bracket_high, "probes": len(c.probes), "pass_rule": c.pass_rule, "interval": c.interval,
            "method": c.method, "stop": c.stop,
            "output_tok_s": m.output_tok_s if m else None, "goodput_req_s": m.goodput_req_s if m else None,
            "good_share": m.good_share if m else None,
            "images_sha256": inputs.images_sha256 if inputs else None,
        })
    return pd.DataFrame(rows)


def probes(canon: Canonical) -> pd.DataFrame:
    """Every probe of every search with its point's latency percentiles: the latency-vs-load curve."""
    rows = []
    for rec in search_runs(canon):
        c = rec.serve.capacity
        pts = {p.index: p for p in rec.serve.points}
        for pr in c.probes:
            p = pts.get(pr.point)
            m = p.metrics if p is not None else None
            row: dict[str, Any] = {"model": rec.model, "workload": rec.workload, "leg": rec.leg,
                                   "repeat": rec.repeat, "axis": c.axis, "step": pr.step, "value": pr.value,
                                   "passed": pr.passed, "good_share": pr.good_share}
            for metric in ("ttft_ms", "tpot_ms"):
                d = getattr(m, metric) if m else None
                for q in ("p50", "p90", "p99"):
                    row[f"{metric.removesuffix('_ms')}_{q}_ms"] = getattr(d, q) if d else None
            row["goodput_req_s"] = m.goodput_req_s if m else None
            row["requests_per_s"] = m.requests_per_s if m else None
            rows.append(row)
    return pd.DataFrame(rows)


def slo_bounds(canon: Canonical) -> dict[tuple[str, str], list[tuple[str, float, float]]]:
    """Per (model, workload): the declared bounds (metric, p, max), as the records carry them."""
    out: dict[tuple[str, str], list[tuple[str, float, float]]] = {}
    for rec in search_runs(canon):
        slo = (rec.serve.capacity.declared or {}).get("slo") or {}
        out[(rec.model, rec.workload)] = [(k, float(v["p"]), float(v["max"])) for k, v in slo.items()
                                          if isinstance(v, dict)]
    return out


def center(values: list[float]) -> float | None:
    """A leg's capacity over its repeats (the searches that measured one): their median, as the capacity
    table prints it; None without any."""
    return float(np.median(values)) if len(values) else None


def interval(values: list[float], confidence: float = CONFIDENCE,
             resolution: float = 0.0) -> tuple[float | None, float | None]:
    """A leg's capacity interval over its repeats: the t-interval of the log capacities, exponentiated
    (the same log-normal model the significance rule assumes), its spread at least a grid of
    `resolution`'s rounding and its top raised by that grid's width (each capacity is the lowest end of
    its bracket); none with fewer than two repeats."""
    a = np.log(np.asarray([v for v in values if v and v > 0], dtype=float))
    if len(a) < 2:
        return None, None
    w = math.log1p(resolution)
    sd = max(float(a.std(ddof=1)), rounding_sd(resolution))
    half = sps.t.ppf(0.5 + confidence / 2, len(a) - 1) * sd / math.sqrt(len(a))
    return float(math.exp(a.mean() - half)), float(math.exp(a.mean() + half + w))


def resolutions(found: pd.DataFrame) -> dict[tuple[str, str], float]:
    """(model, workload) -> the widest final bracket among its searches that measured a capacity, as
    bracket_high / bracket_low - 1 (0 where none has an upper end)."""
    out: dict[tuple[str, str], float] = {}
    if found.empty:
        return out
    for (model, wl), g in found.groupby(["model", "workload"], sort=False):
        ok = g[g["status"].isin(MEASURED)].dropna(subset=["bracket_low", "bracket_high"])
        ok = ok[ok["bracket_low"] > 0]
        out[(model, wl)] = float((ok["bracket_high"] / ok["bracket_low"]).max() - 1) if len(ok) else 0.0
    return out


def per_leg(found: pd.DataFrame, price: Price | None = None) -> pd.DataFrame:
    """Per (model, workload, leg): the median capacity over the repeats that measured one, its interval,
    the repeats by status, and the cost per million output tokens at capacity (median throughput there)."""
    if found.empty:
        return found
    rows = []
    res = resolutions(found)
    for (model, wl, leg), g in found.groupby(_KEYS, sort=False):
        ok = g[g["status"].isin(MEASURED)]
        caps = ok["capacity"].dropna().tolist()
        low, high = interval(caps, resolution=res.get((model, wl), 0.0))
        tok_s = ok["output_tok_s"].dropna()
        row = {"model": model, "workload": wl, "leg": leg, "axis": g["axis"].iloc[0],
               "capacity": center(caps), "low": low, "high": high,
               "repeats": len(caps), "statuses": ", ".join(f"{n} {s}" for s, n in g["status"].value_counts().items()),
               "output_tok_s": float(tok_s.median()) if len(tok_s) else None,
               "goodput_req_s": float(ok["goodput_req_s"].median()) if ok["goodput_req_s"].notna().any() else None,
               "tp": int(g["tp"].iloc[0])}
        if price is not None:
            row["usd_per_m_output_tok"] = (price.per_hour * price.devices(row["tp"]) / (row["output_tok_s"] * 3600) * 1e6
                                           if row["output_tok_s"] else None)
        rows.append(row)
    return pd.DataFrame(rows)


def by_leg(found: pd.DataFrame) -> dict[tuple[str, str], dict[str, list[float]]]:
    """(model, workload) -> leg -> the capacities its searches measured (status found or max_probes):
    the samples a capacity ratio is computed from."""
    if found.empty:
        return {}
    ok = found[found["status"].isin(MEASURED)].dropna(subset=["capacity"])
    out: dict[tuple[str, str], dict[str, list[float]]] = {}
    for (model, wl), _ in found.groupby(["model", "workload"], sort=False):
        sel = ok[(ok["model"] == model) & (ok["workload"] == wl)]
        out[(model, wl)] = {leg: [float(x) for x in h["capacity"]] for leg, h in sel.groupby("leg")}
    return out


def ratios(found: pd.DataFrame, old: str, new: str, *, margin: float | None, alpha: float = ALPHA) -> pd.DataFrame:
    """Per (model, workload): capacity new / old over the repeats that measured one (above 1.00x the
    newer leg holds the SLO at a higher load), its interval and its own test's verdict by the significance
    rule. The verdict every view prints is the study's (`harness.analyze.verdicts`), which decides these
    cells together with the study's other steps."""
    if found.empty:
        return pd.DataFrame()
    caps = by_leg(found)
    res = resolutions(found)
    rows = []
    for (model, wl), legs in caps.items():
        a, b = legs.get(old, []), legs.get(new, [])
        r: Ratio = ratio(a, b, higher_is_better=True, margin=margin, confidence=1 - alpha,
                         resolution=res.get((model, wl), 0.0))
        rows.append({"model": model, "workload": wl, "ratio": r})
    return pd.DataFrame(rows)


def pass_curves(pr: pd.DataFrame) -> pd.DataFrame:
    """Per (model, workload, leg): every probe of every search pooled, passed or not against its load, and
    a logistic curve in log load fitted by maximum likelihood, P(pass) = 1 / (1 + exp((ln v - ln mid) / scale)):
    the load a probe passes half the time (`mid`) and the loads it passes 90% and 10% of the time. A
    diagnostic of how far one probe's outcome repeats, not a verdict (the searches chose their probes from
    earlier outcomes, and a server's probes share that server). Where the outcomes do not overlap (every
    pass below every failure) there is no curve: `overlap` is False and `mid` None."""
    from scipy.optimize import minimize

    rows = []
    if pr.empty:
        return pd.DataFrame(rows)
    for (model, wl, leg), g in pr.dropna(subset=["passed"]).groupby(_KEYS, sort=False):
        x, y = np.log(g["value"].to_numpy(float)), g["passed"].to_numpy(bool)
        high_pass = float(np.exp(x[y].max())) if y.any() else None
        low_fail = float(np.exp(x[~y].min())) if (~y).any() else None
        row = {"model": model, "workload": wl, "leg": leg, "probes": len(g), "passed": int(y.sum()),
               "high_pass": high_pass, "low_fail": low_fail,
               "overlap": bool(high_pass is not None and low_fail is not None and high_pass >= low_fail),
               "mid": None, "scale": None, "p90": None, "p10": None}
        if row["overlap"]:
            def nll(t: np.ndarray) -> float:
                z = (x - t[0]) / math.exp(t[1])
                # -log P(pass) = log(1 + e^z), -log P(fail) = log(1 + e^-z), stably
                return float(np.logaddexp(0, np.where(y, z, -z)).sum())
            fit = minimize(nll, np.array([float(np.mean(x)), math.log(0.05)]), method="L-BFGS-B",
                           bounds=[(float(x.min()), float(x.max())), (math.log(0.002), math.log(2.0))])
            mid, scale = math.exp(fit.x[0]), math.exp(fit.x[1])
            k = math.log(9)                 # P = 0.9 at ln mid - scale ln 9, 0.1 at ln mid + scale ln 9
            row |= {"mid": mid, "scale": scale, "p90": mid * math.exp(-scale * k), "p10": mid * math.exp(scale * k)}
        rows.append(row)
    return pd.DataFrame(rows)


def cell_spreads(canon: Canonical) -> tuple[list[tuple[float, str, str, str, str]], int]:
    """(spread, model, workload, leg label, what) per canonical cell, and how many capacity cells have no
    spread. Where the cell's runs searched for a capacity, the spread of the capacities its searches
    measured: the figure its verdict rests on, not the throughput at the probe its canonical value reports
    (a study of capacities would otherwise quote a spread of tok/s beside a capacity that wandered far
    more); a cell where fewer than two searches measured one (the rest censored) has none."""
    caps = by_leg(searches(canon))
    out, censored = [], 0
    for c in canon.cells.to_dict("records"):
        sp, what = c["spread"], ""
        if (c["model"], c["workload"]) in caps:
            # Fewer than two searches that measured a capacity (the rest censored): no spread to quote.
            sp = spread(caps[(c["model"], c["workload"])].get(c["leg"], []))
            if sp is None:
                censored += 1
                continue
            what = ", capacity at the SLO"
        out.append((0.0 if sp is None or pd.isna(sp) else float(sp), c["model"], c["workload"], c["leg_label"], what))
    return out, censored
