"""Host drift over a study's runs: whether the machine's speed moved while the study was measured,
and whether interleaving made its slow spells strike the legs alike.

On a shared machine the host's speed drifts and has episodes of a few minutes where everything is
slower. A sweep measures repetition outermost with the legs alternating inside it, so such an
episode should strike the legs of one repeat together and cancel in their ratio. This module reads
that from the records' start times: each canonical run's speed against its cell's median, its rank
correlation with time, how closely the legs of one repeat moved together, and the longest spell of
consecutive slow runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from harness import workloads
from harness.analyze.canonical import Canonical
from harness.analyze.significance import ALPHA

# Fewer runs (or leg pairs) than these give a correlation that says nothing: "too few" instead.
MIN_RUNS = 6
MIN_PAIRS = 3
# A run slower than its cell's median by more than this belongs to a slow spell.
BAND = 0.05

COLUMNS = ["series", "time", "leg", "leg_label", "leg_order", "model", "workload", "kind", "repeat", "value",
           "median", "speed", "provenance", "run_dir"]


def drift_frame(canons: Canonical | Sequence[Canonical]) -> pd.DataFrame:
    """One row per canonical run that recorded when it started, in time order: series, time (UTC),
    leg, leg_label, leg_order (the leg's place in study.yaml, so a figure colours legs as the others
    do), model, workload, kind, repeat, value, median (its cell's) and speed (value ÷ median for
    throughput, median ÷ value for ms per token: above 1 the run was faster than its cell's median).
    Cells with one repeat have no median to be slow against and are left out, as are runs without
    `started_at` (transcribed figures carry none)."""
    rows = []
    for c in ([canons] if isinstance(canons, Canonical) else canons):
        cells = {(r["leg"], r["model"], r["workload"]): r for r in c.cells.to_dict("records")}
        legs = list(c.study.leg_names)
        for r in c.runs.to_dict("records"):
            cell = cells.get((r["leg"], r["model"], r["workload"]))
            started = r.get("started_at")
            if cell is None or cell["n"] < 2 or not isinstance(started, str) or not started:
                continue
            metric = workloads.metric_of(r["kind"])
            v, m = float(r[metric.key]), float(cell["value"])
            if not (v > 0 and m > 0):
                continue
            rows.append({"series": c.series, "time": pd.Timestamp(started), "leg": r["leg"],
                         "leg_label": c.study.label(r["leg"]),
                         "leg_order": legs.index(r["leg"]) if r["leg"] in legs else len(legs),
                         "model": r["model"], "workload": r["workload"], "kind": r["kind"],
                         "repeat": int(r["repeat"]), "value": v, "median": m,
                         "speed": v / m if metric.higher_is_better else m / v,
                         "provenance": r["provenance"], "run_dir": r["run_dir"],
                         # Runs of one engine group share their start time; their order in the group breaks the tie.
                         "_pos": _num(r.get("engine_position"))})
    df = pd.DataFrame(rows, columns=COLUMNS + ["_pos"])
    if df.empty:
        return df.drop(columns="_pos")
    df["time"] = pd.to_datetime(df["time"], utc=True)
    df = df.sort_values(["time", "_pos", "series", "leg", "model", "workload"], kind="stable")
    return df.drop(columns="_pos").reset_index(drop=True)


def _num(v: object) -> float:
    return float(v) if isinstance(v, (int, float, np.integer, np.floating)) and not np.isnan(v) else 0.0


@dataclass(frozen=True, kw_only=True)
class Trend:
    """Spearman's rank correlation of speed with start time over every run (rho < 0: slower later).
    `rho` and `p` are None with too few runs, or when speed or time does not vary."""

    n: int
    rho: float | None = None
    p: float | None = None

    @property
    def too_few(self) -> bool:
        return self.n < MIN_RUNS

    @property
    def significant(self) -> bool:
        return self.p is not None and self.p < ALPHA


@dataclass(frozen=True, kw_only=True)
class CoMovement:
    """Pearson's correlation, across pairs, of the speeds of two runs of different legs of one
    (series, model, workload) and repeat that ran one after the other: near 1, slow spells struck
    both legs (interleaving absorbed them); near 0, they struck one leg at a time. `pairs`: one row
    per pair (series, model, workload, repeat, leg_a, leg_b, time_a, time_b, speed_a, speed_b)."""

    n: int
    r: float | None = None
    p: float | None = None
    pairs: pd.DataFrame

    @property
    def too_few(self) -> bool:
        return self.n < MIN_PAIRS


@dataclass(frozen=True, kw_only=True)
class Episode:
    """The longest spell of consecutive runs (any leg, any series) all slower than 1 − band:
    its first and last start time and its rows of the drift frame."""

    start: pd.Timestamp
    end: pd.Timestamp
    runs: pd.DataFrame

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def legs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.runs["leg_label"]))

    @property
    def min_speed(self) -> float:
        return float(self.runs["speed"].min())


@dataclass(frozen=True, kw_only=True)
class DriftSummary:
    band: float
    trend: Trend
    comovement: CoMovement
    episode: Episode | None      # None: no run was slower than 1 − band


def drift_summary(frame: pd.DataFrame, *, band: float = BAND) -> DriftSummary:
    """Trend, co-movement and the largest slow episode of `drift_frame`'s rows."""
    return DriftSummary(band=band, trend=_trend(frame), comovement=_comovement(frame),
                        episode=_episode(frame, band))


def _trend(df: pd.DataFrame) -> Trend:
    n = len(df)
    if n < MIN_RUNS:
        return Trend(n=n)
    t = df["time"].astype("int64").to_numpy(dtype=float)
    s = df["speed"].to_numpy(dtype=float)
    if np.ptp(t) == 0 or np.ptp(s) == 0:
        return Trend(n=n)
    res = stats.spearmanr(t, s)
    return Trend(n=n, rho=float(res.statistic), p=float(res.pvalue))


PAIR_COLUMNS = ["series", "model", "workload", "repeat", "leg_a", "leg_b", "time_a", "time_b", "speed_a", "speed_b"]


def _comovement(df: pd.DataFrame) -> CoMovement:
    rows = []
    # The frame is in time order, so each group's rows are too.
    for (series, model, wl, rep), g in df.groupby(["series", "model", "workload", "repeat"], sort=False):
        recs = g.to_dict("records")
        for a, b in zip(recs, recs[1:]):
            if a["leg"] != b["leg"]:
                rows.append({"series": series, "model": model, "workload": wl, "repeat": rep,
                             "leg_a": a["leg_label"], "leg_b": b["leg_label"], "time_a": a["time"],
                             "time_b": b["time"], "speed_a": a["speed"], "speed_b": b["speed"]})
    pairs = pd.DataFrame(rows, columns=PAIR_COLUMNS)
    n = len(pairs)
    if n < MIN_PAIRS:
        return CoMovement(n=n, pairs=pairs)
    a, b = pairs["speed_a"].to_numpy(dtype=float), pairs["speed_b"].to_numpy(dtype=float)
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return CoMovement(n=n, pairs=pairs)
    res = stats.pearsonr(a, b)
    return CoMovement(n=n, r=float(res.statistic), p=float(res.pvalue), pairs=pairs)


def _episode(df: pd.DataFrame, band: float) -> Episode | None:
    slow = (df["speed"] < 1 - band).to_numpy()
    best: tuple[int, float, int, int] | None = None      # (length, -depth, start, stop)
    i = 0
    while i < len(slow):
        if not slow[i]:
            i += 1
            continue
        j = i
        while j < len(slow) and slow[j]:
            j += 1
        # The longest spell; of equally long ones, the deepest.
        key = (j - i, -float(df["speed"].iloc[i:j].mean()), i, j)
        if best is None or key[:2] > best[:2]:
            best = key
        i = j
    if best is None:
        return None
    runs = df.iloc[best[2]:best[3]].reset_index(drop=True)
    return Episode(start=runs["time"].iloc[0], end=runs["time"].iloc[-1], runs=runs)


def fixed_order(frame: pd.DataFrame, series: str) -> tuple[str, ...] | None:
    """The leg labels in the order every repeat of `series` measured them, when that order was the
    same in each of at least two repeats (a sweep with `order: fixed`, or one from before legs
    alternated); None when the order changed, or with fewer than two legs or repeats. A fixed order
    turns a drift of the host into a bias between the legs instead of noise they share."""
    df = frame[frame["series"] == series]
    orders = {tuple(dict.fromkeys(g["leg_label"])) for _, g in df.groupby("repeat", sort=True)}
    reps = df["repeat"].nunique()
    if reps < 2 or len(orders) != 1:
        return None
    (order,) = orders
    return order if len(order) >= 2 else None


__all__ = ["BAND", "MIN_PAIRS", "MIN_RUNS", "CoMovement", "DriftSummary", "Episode", "Trend", "drift_frame",
           "drift_summary", "fixed_order"]
