"""A release history's numbers: each (model, workload)'s metric over the releases, the steps between
consecutive releases, and the releases where its level changed (docs/history.md).

Two passes over the same canonical cells, which must agree or say where they do not:
- the steps: each pair of consecutive measured releases is one cell ratio as every table computes it
  with the verdict the study gives it (`harness.analyze.verdicts`: Welch's rule on repeats, the paired
  design's nested rule on paired passes, all steps decided together by Benjamini–Hochberg at the study's
  level), so each step reads faster, slower, equivalent within ±δ or undecided;
- the step detection: a penalised piecewise-constant fit of the log samples over the whole series
  (optimal partitioning: the exact minimum over every segmentation of the residual sum of squares in
  units of the pooled within-release variance, plus a penalty per change point). The penalty is the F(1,
  df) quantile at α/(K−1), df the pooled variance's degrees of freedom and K−1 the candidate steps: a
  split is kept only where it explains more than a Bonferroni-level one-step test would demand, so a flat
  series gains a change point with probability about α or less. `changepoint_rates` simulates that rate
  (and the power for a given step) with the measured noise, seeded.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.analyze.canonical import Canonical
from harness.analyze.order import leg_pairs, order_frame
from harness.analyze.significance import ALPHA
from harness.analyze.verdicts import CellVerdict
from harness.analyze.verdicts import study_alpha, study_margin, study_verdicts
from harness.schema import history as hfile

MOVED = ("faster", "slower")


@dataclass(frozen=True, kw_only=True)
class Point:
    leg: str
    label: str
    value: float | None = None        # the canonical cell's value (as the tables print it)
    low: float | None = None          # 95% interval of the geometric mean of the samples (n ≥ 2)
    high: float | None = None
    n: int = 0


@dataclass(frozen=True, kw_only=True)
class Series:
    model: str
    workload: str
    kind: str
    points: tuple[Point, ...]                     # every release of the history, measured or not
    steps: tuple[tuple[str, str, CellVerdict], ...]     # (old leg, new leg, ratio) between consecutive measured ones
    change_points: tuple[str, ...] = ()           # legs where a new level starts
    levels: tuple[float, ...] = ()                # each segment's geometric mean, in order
    sigma: float | None = None                    # pooled within-release sd of the log samples
    disagreements: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class HistoryView:
    record: hfile.History
    series: tuple[Series, ...]
    margin: float
    alpha: float
    notes: tuple[str, ...] = field(default_factory=tuple)


# --- step detection -------------------------------------------------------------------------------

def pooled_sigma2(groups: Sequence[np.ndarray]) -> tuple[float | None, int]:
    """Within-release variance of the log samples, pooled, and its degrees of freedom."""
    df = sum(max(len(g) - 1, 0) for g in groups)
    if df == 0:
        return None, 0
    ss = sum(float(((g - g.mean()) ** 2).sum()) for g in groups if len(g) > 1)
    return ss / df, df


@functools.lru_cache(maxsize=256)   # a simulation asks for the same few quantiles thousands of times
def penalty(k: int, df: int, alpha: float = ALPHA) -> float:
    """The cost of one change point: the F(1, df) quantile at α/(K−1) over the K−1 candidate steps."""
    from scipy import stats as sps

    return float(sps.f.ppf(1 - alpha / max(k - 1, 1), 1, df))


def segment(groups: Sequence[np.ndarray], *, sigma2: float, beta: float) -> list[int]:
    """Optimal partitioning of releases (groups of log samples, in order): the indices where a new
    level starts, minimising Σ residual² / σ² + β · (change points)."""
    k = len(groups)
    n = np.concatenate([[0], np.cumsum([len(g) for g in groups])]).astype(float)
    s = np.concatenate([[0], np.cumsum([float(g.sum()) for g in groups])])
    q = np.concatenate([[0], np.cumsum([float((g ** 2).sum()) for g in groups])])

    def cost(a: int, b: int) -> float:
        m = n[b] - n[a]
        return (q[b] - q[a] - (s[b] - s[a]) ** 2 / m) / sigma2

    best = [-beta] + [math.inf] * k
    start = [0] * (k + 1)
    for t in range(1, k + 1):
        for a in range(t):
            c = best[a] + cost(a, t) + beta
            if c < best[t] - 1e-12:
                best[t], start[t] = c, a
    cuts, t = [], k
    while t > 0:
        t = start[t]
        if t > 0:
            cuts.append(t)
    return sorted(cuts)


def detect(groups: Sequence[Sequence[float]], *, alpha: float = ALPHA) -> tuple[list[int], float | None]:
    """Change points (indices of the releases that start a new level) of positive samples per release,
    and the pooled within-release sd of their logs; none without two samples in some release."""
    logs = [np.log(np.asarray(g, dtype=float)) for g in groups]
    sigma2, df = pooled_sigma2(logs)
    if sigma2 is None or len(logs) < 2:
        return [], None
    if sigma2 <= 0:
        sigma2 = 1e-12
    return segment(logs, sigma2=sigma2, beta=penalty(len(logs), df, alpha)), math.sqrt(sigma2)


def changepoint_rates(releases: int, n: int, *, log_sd: float, step: float = 0.0, at: int | None = None,
                      reps: int = 2000, alpha: float = ALPHA, seed: int = 0) -> float:
    """Share of `reps` simulated series (`releases` releases, n log-normal samples each, sd `log_sd`) in
    which the detection finds any change point (step 0: the false change-point rate of a flat series), or,
    with a `step` (relative, at release index `at`, default the middle), finds one exactly there."""
    rng = np.random.default_rng(seed)
    where = releases // 2 if at is None else at
    hits = 0
    for _ in range(reps):
        groups = [np.exp(rng.normal(math.log1p(step) if step and i >= where else 0.0, log_sd, n))
                  for i in range(releases)]
        cps, _ = detect(groups, alpha=alpha)
        hits += bool(cps) if not step else cps == [where]
    return hits / reps


# --- a history study ------------------------------------------------------------------------------

def _interval(samples: Sequence[float], alpha: float = ALPHA) -> tuple[float | None, float | None]:
    from scipy import stats as sps

    x = np.log(np.asarray(samples, dtype=float))
    if len(x) < 2:
        return None, None
    half = float(sps.t.ppf(1 - alpha / 2, len(x) - 1)) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return math.exp(x.mean() - half), math.exp(x.mean() + half)


def _agreement(label: dict[str, str], steps: Sequence[tuple[str, str, CellVerdict]], cps: set[str]) -> list[str]:
    out = []
    for old, new, r in steps:
        moved, found = r.verdict in MOVED, new in cps
        if moved and not found:
            out.append(f"{label[old]}→{label[new]}: the step test says {r.verdict}, "
                       "the step detection finds no new level")
        elif found and r.verdict == "equivalent":
            out.append(f"{label[old]}→{label[new]}: the step detection finds a new level, the step test says "
                       "equivalent within the margin")
        elif found and not moved:
            out.append(f"{label[old]}→{label[new]}: the step detection finds a new level, the step test is "
                       f"{r.verdict} (it sees this step alone)")
    return out


def history_view(canon: Canonical, study_dir: Path | str) -> HistoryView | None:
    """The history of a study that holds `history.json`, else None."""
    rec = hfile.find(Path(study_dir))
    if rec is None:
        return None
    margin, _ = study_margin(canon)
    alpha = study_alpha(canon)
    sv = study_verdicts(canon)
    # Releases by their version: a reviewed leg file's short label ("0.27") would read as another release.
    label = dict(leg_pairs(canon)) | {r.leg: r.version for r in rec.releases}
    order = [r.leg for r in rec.releases]
    cells = {(c["leg"], c["model"], c["workload"]): c for c in canon.cells.to_dict("records")}
    rows = order_frame(canon, canon.expected.drop_duplicates(["model", "workload"])[["model", "workload", "kind"]])
    pending: list[tuple[str, str, str, list[Point], list[tuple[str, str, CellVerdict]]]] = []
    for r in rows.to_dict("records"):
        model, wl, kind = r["model"], r["workload"], r["kind"]
        points, measured = [], []
        for leg in order:
            c = cells.get((leg, model, wl))
            if c is None:
                points.append(Point(leg=leg, label=label.get(leg, leg)))
                continue
            lo, hi = _interval(c["samples"])
            points.append(Point(leg=leg, label=label.get(leg, leg), value=float(c["value"]), low=lo, high=hi,
                                n=len(c["samples"])))
            measured.append(leg)
        # The steps' verdicts are the study's (one object for every view: harness.analyze.verdicts); a step
        # across a release this cell lacks is one of the study's other leg pairs.
        steps = [(a, b, sv.get(kind, model, wl, a, b)) for a, b in zip(measured, measured[1:])]
        pending.append((model, wl, kind, points, steps))
    out = []
    for model, wl, kind, points, steps in pending:
        measured = [p for p in points if p.value is not None]
        groups = [cells[(p.leg, model, wl)]["samples"] for p in measured]
        idx, sigma = detect(groups, alpha=alpha)
        cps = tuple(measured[i].leg for i in idx)
        bounds = [0, *idx, len(groups)]
        levels = tuple(math.exp(float(np.mean(np.log(np.concatenate([np.asarray(g, dtype=float)
                                                                      for g in groups[a:b]])))))
                       for a, b in zip(bounds, bounds[1:]) if b > a) if sigma is not None else ()
        out.append(Series(model=model, workload=wl, kind=kind, points=tuple(points), steps=tuple(steps),
                          change_points=cps, levels=levels, sigma=sigma,
                          disagreements=tuple(_agreement(label, steps, set(cps)))))
    return HistoryView(record=rec, series=tuple(out), margin=margin, alpha=alpha)


SIM_REPS = 2000   # simulated series behind the false change-point rate a history prints (seeded)
SIM_STEP = 0.10   # the step whose detection rate it prints beside it


@dataclass(frozen=True, kw_only=True)
class SimulatedRates:
    """The change-point detection's error rates at a history's own noise: seeded simulations of `releases`
    releases with `n` samples each, log sd `log_sd` (the median within-release sd of the series)."""

    log_sd: float
    releases: int
    n: int
    reps: int
    flat: float      # share of flat series that gain a change point
    step: float      # the simulated step's size
    found: float     # share of series with that step in the middle where it is found at its release


def simulated_rates(view: HistoryView) -> SimulatedRates | None:
    """None where no release has two samples or more (no within-release sd)."""
    sigmas = [s.sigma for s in view.series if s.sigma is not None]
    if not sigmas:
        return None
    sd = statistics.median(sigmas)
    k = max(sum(p.value is not None for p in s.points) for s in view.series)
    n = max(1, round(statistics.median(p.n for s in view.series for p in s.points if p.n)))
    return SimulatedRates(log_sd=sd, releases=k, n=n, reps=SIM_REPS, step=SIM_STEP,
                          flat=changepoint_rates(k, n, log_sd=sd, reps=SIM_REPS, alpha=view.alpha, seed=0),
                          found=changepoint_rates(k, n, log_sd=sd, step=SIM_STEP, reps=SIM_REPS, alpha=view.alpha,
                                                  seed=1))
