"""Serving results as tables: the load points of a study's canonical serve runs, the throughput-vs-
interactivity curve of each leg with its Pareto points, the ratio between legs at matched load, and
cost per million output tokens when the study states a price.

The points live in each record's `serve` block (harness.schema.serve); they are read from the
canonical runs' records, so a point counts only when its run is a canonical measurement.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness import workloads
from harness.analyze.canonical import Canonical
from harness.analyze.components import TwoWay, one_way, two_way
from harness.analyze.stats import ratio
from harness.core.errors import UserError

# (column, higher is better): what the ratio table compares at each matched point.
RATIO_METRICS = (("output_tok_s", True), ("tok_s_per_user", True), ("ttft_p50_ms", False),
                 ("tpot_p50_ms", False), ("goodput_req_s", True))
# A point is one (model, workload, leg, load): two serve workloads of one model at the same load (other
# prompt lengths, or a probe repeated at one rate) are different points, never one median.
_KEYS = ["model", "workload", "leg", "concurrency", "request_rate"]


@dataclass(frozen=True, kw_only=True)
class Price:
    per_hour: float
    unit: str = "GPU-hour"      # "GPU-hour" is charged per GPU of the run (its tp); anything else per machine
    source: str = ""            # where the price comes from (a price list, a quote, "illustrative")

    def devices(self, tp: int) -> int:
        return tp if self.unit.lower().startswith("gpu") else 1


def price_of(canon: Canonical) -> Price | None:
    raw = canon.study.extra.get("price")
    if raw is None:
        return None
    path = canon.dataset.root / "study.yaml"
    if not isinstance(raw, dict) or not isinstance(raw.get("per_hour"), (int, float)) or isinstance(
            raw.get("per_hour"), bool) or raw["per_hour"] <= 0:
        raise UserError(f"{path}: price: should be {{per_hour: a number > 0, unit: GPU-hour or CPU-hour, "
                        "source: where the price comes from}}")
    return Price(per_hour=float(raw["per_hour"]), unit=str(raw.get("unit", "GPU-hour")), source=str(raw.get("source") or ""))


def points(canon: Canonical) -> pd.DataFrame:
    """One row per measured point of every canonical serve run (failed points left out). A capacity
    search's probes are not load points of a grid (harness.analyze.capacity reads them)."""
    runs = canon.runs
    runs = runs[[workloads.known(k) and workloads.traits_of(k).server
                 for k in runs["kind"]]] if len(runs) else runs
    rows: list[dict[str, Any]] = []
    for _, r in runs.iterrows():
        rec = canon.dataset.record(str(r["run_dir"]))
        if rec.serve is None or rec.serve.capacity is not None:
            continue
        for p in rec.serve.points:
            if p.status != "ok" or p.metrics is None:
                continue
            m = p.metrics
            rows.append({
                "model": rec.model, "leg": rec.leg, "workload": rec.workload, "repeat": rec.repeat, "tp": rec.tp,
                "seed": p.seed, "concurrency": p.concurrency, "request_rate": p.request_rate if p.request_rate is not None else float("inf"),
                "output_tok_s": m.output_tok_s, "requests_per_s": m.requests_per_s,
                "tok_s_per_user": m.tok_s_per_user, "goodput_req_s": m.goodput_req_s, "good_share": m.good_share,
                "ttft_p50_ms": m.ttft_ms.p50, "ttft_p99_ms": m.ttft_ms.p99, "tpot_p50_ms": m.tpot_ms.p50,
                "tpot_p99_ms": m.tpot_ms.p99, "itl_p50_ms": m.itl_ms.p50, "itl_p99_ms": m.itl_ms.p99,
                "e2el_p50_ms": m.e2el_ms.p50, "e2el_p99_ms": m.e2el_ms.p99, "failed": m.failed,
                "requests": m.requests, "client_cpu_share": m.client_cpu_share,
                "slo_ttft_ms": rec.serve.slo_ttft_ms, "slo_tpot_ms": rec.serve.slo_tpot_ms,
                # The engine's own view (harness.measure.engine_log); None where the record has none.
                "engine_waiting_max": p.engine.waiting_max if p.engine else None,
                "engine_kv_max_pct": p.engine.kv_usage_max_pct if p.engine else None,
                "engine_gen_tok_s": p.engine.generation_tok_s_mean if p.engine else None,
                "send_lag_p99_ms": m.send_lag_ms.p99,
                # The server's own histograms over the point (harness.measure.engine_metrics); None where none.
                **_latency_columns(p.engine_latency, rec.serve.slo_ttft_ms),
            })
    return pd.DataFrame(rows)


def _rank_bucket(buckets: list[tuple[float, int]], count: int, q: float) -> tuple[float, float, float, int, int] | None:
    """The q-quantile's rank and the bucket it falls in: (rank, lower bound, upper bound, cumulative count
    at each bound); a rank past every bound is in an unbounded last bucket. None for an empty histogram."""
    if count <= 0 or not buckets:
        return None
    rank, prev_le, prev_cum = q * count, 0.0, 0
    for le, cum in buckets:
        if cum >= rank:
            return rank, prev_le, le, prev_cum, cum
        prev_le, prev_cum = le, cum
    return rank, prev_le, math.inf, prev_cum, prev_cum


def hist_quantile(buckets: list[tuple[float, int]], count: int, q: float) -> float | None:
    """A histogram's q-quantile in its own unit, interpolated linearly inside the bucket the rank falls in
    (as Prometheus's histogram_quantile); a rank in the last, unbounded bucket gives its lower bound."""
    found = _rank_bucket(buckets, count, q)
    if found is None:
        return None
    rank, lo, hi, cum_lo, cum_hi = found
    if math.isinf(hi):
        return lo
    return lo + (hi - lo) * ((rank - cum_lo) / (cum_hi - cum_lo) if cum_hi > cum_lo else 1.0)


def hist_share_over(buckets: list[tuple[float, int]], count: int, bound: float) -> float | None:
    """The share of a histogram's requests above `bound` (linear inside the bucket that holds it)."""
    if count <= 0 or not buckets:
        return None
    prev_le, prev_cum = 0.0, 0
    for le, cum in buckets:
        if bound <= le:
            at = cum if math.isinf(le) or le == prev_le else prev_cum + (cum - prev_cum) * (bound - prev_le) / (le - prev_le)
            return max(0.0, 1.0 - at / count)
        prev_le, prev_cum = le, cum
    return 0.0


def hist_bucket(buckets: list[tuple[float, int]], count: int, q: float) -> tuple[float, float] | None:
    """The bounds (lower, upper) of the bucket a histogram's q-quantile falls in: all the histogram knows
    of it. The interpolated value (hist_quantile) is a convention inside those bounds, not a measurement:
    vLLM's queue and prefill buckets start at 0.3 s, so a p99 under 0.3 s interpolates to 297 ms whatever
    the times were. The upper bound is inf for a rank in the last bucket."""
    found = _rank_bucket(buckets, count, q)
    return None if found is None else (found[1], found[2])


def _latency_columns(hist: dict | None, slo_ttft_ms: float | None) -> dict[str, float | None]:
    """From the server's histograms (ms): for TTFT (arrival in the server to first token), scheduler queue
    time and prefill time, the p99 interpolated, the bounds of the bucket it falls in, and the mean (each
    histogram's sum over its count). The means add up where the p99s do not: mean TTFT = mean queue +
    mean prefill + the rest, the rest being the front end's time from the request's rendering on (input
    processing, the hand-over to the engine core, and the first token's way back through the output
    processing; vLLM 0.24.0 and 0.26.0 stamp arrival at rendering, after the HTTP receive). Also the
    share of requests whose engine-side TTFT is over the SLO's bound. All None without the histograms.
    (vLLM observes TTFT at the first token, queue and prefill at the request's end, so near a window's
    edge the three count slightly different requests.)"""
    out: dict[str, float | None] = {"engine_ttft_over_slo_share": None}
    for name in ("ttft", "queue", "prefill"):
        h = (hist or {}).get(name)
        v = hist_quantile(h.buckets, h.count, 0.99) if h is not None else None
        b = hist_bucket(h.buckets, h.count, 0.99) if h is not None else None
        out[f"engine_{name}_p99_ms"] = None if v is None else v * 1000.0
        out[f"engine_{name}_p99_lo_ms"] = None if b is None else b[0] * 1000.0
        out[f"engine_{name}_p99_hi_ms"] = None if b is None else b[1] * 1000.0
        out[f"engine_{name}_mean_ms"] = h.sum_s / h.count * 1000.0 if h is not None and h.count > 0 else None
    t, q, p = (out[f"engine_{n}_mean_ms"] for n in ("ttft", "queue", "prefill"))
    out["engine_front_mean_ms"] = None if None in (t, q, p) else t - q - p
    h = (hist or {}).get("ttft")
    if h is not None and slo_ttft_ms is not None:
        out["engine_ttft_over_slo_share"] = hist_share_over(h.buckets, h.count, slo_ttft_ms / 1000.0)
    return out


def curve(pts: pd.DataFrame, price: Price | None = None) -> pd.DataFrame:
    """Per (model, workload, leg, point): medians over repeats, output tok/s per device, and Pareto
    membership (no other point of the same leg and workload is at least as good on both throughput per
    device and tok/s per user and better on one)."""
    if pts.empty:
        return pts
    agg = {c: "median" for c in ("output_tok_s", "requests_per_s", "tok_s_per_user", "goodput_req_s", "ttft_p50_ms",
                                 "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "itl_p50_ms", "itl_p99_ms",
                                 "e2el_p50_ms", "e2el_p99_ms")}
    agg |= {"failed": "sum", "repeat": "nunique", "tp": "first"}
    c = pts.groupby(_KEYS, as_index=False).agg(agg).rename(columns={"repeat": "repeats"})
    c["tok_s_per_device"] = c["output_tok_s"] / c["tp"]
    c["pareto"] = False
    for _, g in c.groupby(["model", "workload", "leg"]):
        for i, r in g.iterrows():
            dominated = ((g["tok_s_per_device"] >= r["tok_s_per_device"]) & (g["tok_s_per_user"] >= r["tok_s_per_user"])
                         & ((g["tok_s_per_device"] > r["tok_s_per_device"]) | (g["tok_s_per_user"] > r["tok_s_per_user"])))
            c.at[i, "pareto"] = not dominated.any()
    if price is not None:
        c["usd_per_m_output_tok"] = [price.per_hour * price.devices(int(tp)) / (tps * 3600) * 1e6 if tps else None
                                     for tps, tp in zip(c["output_tok_s"], c["tp"])]
    return c.sort_values(_KEYS).reset_index(drop=True)


def pareto(c: pd.DataFrame) -> pd.DataFrame:
    return c[c["pareto"]] if len(c) else c


def ratios(pts: pd.DataFrame, old: str, new: str) -> pd.DataFrame:
    """At every point both legs measured: each metric's ratio (new/old for higher-is-better, old/new for
    lower-is-better: above 1.00x the newer leg is better), its interval and verdict over the repeats,
    by the project's one significance rule (harness.analyze.stats.ratio)."""
    if pts.empty:
        return pd.DataFrame()
    rows = []
    for (model, wl, conc, rate), g in pts.groupby(["model", "workload", "concurrency", "request_rate"]):
        a, b = g[g["leg"] == old], g[g["leg"] == new]
        if a.empty or b.empty:
            continue
        row: dict[str, Any] = {"model": model, "workload": wl, "concurrency": conc, "request_rate": rate}
        for col, hib in RATIO_METRICS:
            r = ratio(a[col].dropna().tolist(), b[col].dropna().tolist(), higher_is_better=hib)
            row[col] = r.value
            row[f"{col}_ci"] = (r.low, r.high)
            row[f"{col}_verdict"] = r.verdict
            row[f"{col}_label"] = r.label()
        rows.append(row)
    return pd.DataFrame(rows)


def repeated(pts: pd.DataFrame) -> pd.DataFrame:
    """Loads measured more than once on one server (a grid that repeats a load, as
    scenarios/h200-capacity-probe.yaml repeats the capacity search's probe): per (model, workload, leg,
    load), how many of its points met the SLO at p99 (p99 TTFT and p99 TPOT within the record's bounds, as
    a capacity probe is judged), the range of p99 TTFT and of good share, and the spread of log p99 TTFT
    within a server and between servers. The unit is the point; the spreads are one-way random-effects
    (ANOVA) estimates, the between-server one resting on as few servers as the row names and 0 where the
    servers' means differ no more than their points do.

    A grid's point i draws its prompts and arrivals from the same seed on every server
    (harness.workloads.serve.point_seed), so where every server measured the same seeds once each, the
    within-server spread splits in two (a two-way table, seeds by servers): the arrival draw's part (the
    seeds differ, the same on every server) and the rest (one draw measured again). Two legs probed with
    the same seeds share the draw's part; only the rest separates them.

    Where the records hold the engine's own view (ServePoint.engine), the row adds its largest scheduler
    queue and KV cache use over the points: a queue means the engine itself was saturated; and the
    client's largest p99 send lag (how late its requests left against their schedule). Where they hold the
    server's own histograms (ServePoint.engine_latency): the range of the buckets the engine-side p99 TTFT
    fell in over the points, the highest bucket edge under which every point's p99 queue and prefill times
    fell, and the mean over the points of the mean TTFT, queue and prefill times (means, so that they add
    up: what TTFT holds beyond queue and prefill is the front end's), to set beside the client's p99 TTFT."""
    rows = []
    if pts.empty:
        return pd.DataFrame(rows)
    for key, g in pts.groupby(_KEYS, sort=False):
        if not (g.groupby("repeat").size() > 1).any():
            continue
        met = (g["ttft_p99_ms"] <= g["slo_ttft_ms"]) & (g["tpot_p99_ms"] <= g["slo_tpot_ms"])
        ow = one_way([np.log(h["ttft_p99_ms"].to_numpy(float)) for _, h in g.groupby("repeat", sort=False)])
        tw = _draws_by_servers(g)
        rows.append(dict(zip(_KEYS, key)) | {
            "points": len(g), "servers": int(g["repeat"].nunique()), "met": int(met.sum()),
            "ttft_p99_min": float(g["ttft_p99_ms"].min()), "ttft_p99_median": float(g["ttft_p99_ms"].median()),
            "ttft_p99_max": float(g["ttft_p99_ms"].max()), "good_share_min": float(g["good_share"].min()),
            "good_share_max": float(g["good_share"].max()), "sd_within": ow.within_sd, "sd_between": ow.between_sd,
            "engine_points": int(g["engine_waiting_max"].notna().sum()) if "engine_waiting_max" in g else 0,
            "engine_waiting_max": _agg_or_none(g.get("engine_waiting_max"), "max"),
            "engine_kv_max_pct": _agg_or_none(g.get("engine_kv_max_pct"), "max"),
            "send_lag_p99_max_ms": _agg_or_none(g.get("send_lag_p99_ms"), "max"),
            "engine_ttft_p99_lo_min_ms": _agg_or_none(g.get("engine_ttft_p99_lo_ms"), "min"),
            "engine_ttft_p99_hi_max_ms": _agg_or_none(g.get("engine_ttft_p99_hi_ms"), "max"),
            "engine_queue_p99_hi_max_ms": _agg_or_none(g.get("engine_queue_p99_hi_ms"), "max"),
            "engine_prefill_p99_hi_max_ms": _agg_or_none(g.get("engine_prefill_p99_hi_ms"), "max"),
            "engine_ttft_mean_ms": _agg_or_none(g.get("engine_ttft_mean_ms"), "mean"),
            "engine_queue_mean_ms": _agg_or_none(g.get("engine_queue_mean_ms"), "mean"),
            "engine_prefill_mean_ms": _agg_or_none(g.get("engine_prefill_mean_ms"), "mean"),
            "engine_front_mean_ms": _agg_or_none(g.get("engine_front_mean_ms"), "mean"),
            "sd_draw": tw.row_sd if tw else None, "sd_rest": tw.residual_sd if tw else None})
    return pd.DataFrame(rows)


def ttft_split(pts: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Per (model, workload, leg, rate) of the (model, workload) pairs in `cells`: the probes, the client's
    median p99 TTFT, and the mean over the probes of each probe's mean TTFT in the server, scheduler wait,
    prefill and the front end's rest (_latency_columns), with the rest's share of TTFT. Empty where the
    records hold no server histograms (record schema 13 on)."""
    if pts.empty or "engine_front_mean_ms" not in pts or pts["engine_front_mean_ms"].isna().all():
        return pd.DataFrame()
    keep = pts.merge(cells[["model", "workload"]].drop_duplicates(), on=["model", "workload"])
    keep = keep[keep["engine_front_mean_ms"].notna()]
    rows = []
    for (m, w, leg, rate), g in keep.groupby(["model", "workload", "leg", "request_rate"], sort=True):
        t = float(g["engine_ttft_mean_ms"].mean())
        front = float(g["engine_front_mean_ms"].mean())
        rows.append({"model": m, "workload": w, "leg": leg, "request_rate": float(rate), "probes": len(g),
                     "client_ttft_p99_median_ms": float(g["ttft_p99_ms"].median()), "engine_ttft_mean_ms": t,
                     "engine_queue_mean_ms": float(g["engine_queue_mean_ms"].mean()),
                     "engine_prefill_mean_ms": float(g["engine_prefill_mean_ms"].mean()),
                     "engine_front_mean_ms": front, "front_share": front / t if t > 0 else None})
    return pd.DataFrame(rows)


def _agg_or_none(col: pd.Series | None, how: str) -> float | None:
    """The column's aggregate (max, min, mean, median); None for a column that is all None, or absent (a
    frame built without it)."""
    if col is None:
        return None
    col = pd.to_numeric(col, errors="coerce").dropna()
    return float(col.agg(how)) if len(col) else None


def _draws_by_servers(g: pd.DataFrame) -> TwoWay | None:
    """Log p99 TTFT as seeds x servers, where every server measured the same seeds once each; else None."""
    per = g.groupby("repeat")["seed"].agg(lambda s: tuple(sorted(s)))
    if per.nunique() != 1 or len(set(per.iloc[0])) != len(per.iloc[0]):
        return None
    t = g.pivot(index="seed", columns="repeat", values="ttft_p99_ms")
    return two_way(np.log(t.to_numpy(float)))
