"""The half-pass rate: a leg's capacity at the SLO from a steady-state grid, with the server as unit.

A capacity search (harness.analyze.capacity) takes each probe's pass or fail as given and bisects on it.
On a GPU a probe's outcome at one load does not repeat: three probes at one rate on one server can pass
once and fail twice, and a server can pass at a higher rate than it failed at minutes before
(results/h100-capacity-bracket). A search then lands wherever its probes fell. A steady-state grid
instead probes fixed rates several times each, every probe held in steady state (`lead_in_s`,
`lead_out`), and this module reads the rate the grid says a probe passes half the time.

**The estimate, per server** (one run: one engine instance): for each SLO bound the record judged
(p99 TTFT, p99 TPOT), least squares of log p99 against log offered rate over the server's probes. The
fitted line is the median log p99 at each rate (with symmetric scatter about it), so where it crosses the
bound's log a probe passes half the time. The server's half-pass rate is the lowest crossing over its
bounds: above it the median probe misses one of them. Log p99 rather than pass or fail: a continuous
outcome carries far more per probe than one bit (a logistic fit on 12 bits is unstable), and p99 on
a log scale is close to linear in log load below saturation (residual sd 0.6-0.7 on the H100).

**Censored servers**: a crossing far outside the grid's rates (or a bound that does not rise with load)
is a bound, not a measurement: "above" or "below" the grid. A crossing up to one grid step beyond either
end (the ratio of the two highest rates above, of the two lowest below) is read as measured: the line is
fitted through the end rates, and cutting exactly at the last probed rate would drop every server whose
median probe passes there, biasing a faster leg's rates down. Such a server is counted and named, never
averaged in, as capacity.py treats a search that ended `at_least_hi` or `below_lo`.

**The comparison** is the project's one rule (harness.analyze.stats.ratio: Welch's t on log values),
the unit being the server: the probes of one server share its instance (results/h100-capacity-probe,
-bracket: two servers of one leg on one machine gave 31.2 and 22.7 req/s), so probes are not
independent replicates and a test over probes would call instance noise a version difference. The
verdict is the study's, decided with its other cells (harness.analyze.verdicts reads `by_leg`), for
the workloads study.yaml lists under `half_pass`. Its error rate under an A/A is simulated here
(`aa_rates`) from a model of the measured components, with the same fit and the same rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.analyze.components import one_way
from harness.analyze.stats import ALPHA, ratio

_KEYS = ["model", "workload", "leg"]
# The SLO bounds a probe is judged on, as a capacity search judges one: (points column, record bound).
BOUNDS = (("ttft_p99_ms", "slo_ttft_ms"), ("tpot_p99_ms", "slo_tpot_ms"))
MIN_RATES = 3           # distinct rates a server's grid needs for a line with a residual
WIDTH = 0.05            # the interval half-width the study's target names: the ratio within ±5%
N_MAX = 100_000         # servers_for_width answers at most this


@dataclass(frozen=True)
class Fit:
    """One bound's line for one server: log p99 = a + b log rate."""
    intercept: float
    slope: float
    resid_sd: float
    crossing: float | None      # the rate where the line meets the bound; None where it does not rise
    lack_of_fit_p: float | None = None   # the F test of the line against each rate's own mean; None without replicates


def fit(rates: np.ndarray, p99: np.ndarray, bound: float) -> Fit:
    """Least squares of log p99 on log rate, and where it meets log bound (None: slope ≤ 0)."""
    x, y = np.log(rates), np.log(p99)
    b, a = np.polyfit(x, y, 1)
    resid = y - (a + b * x)
    sd = float(np.sqrt((resid ** 2).sum() / (len(x) - 2))) if len(x) > 2 else float("nan")
    # A nearly flat line meets the bound far off the grid: beyond float range it is infinity (or 0).
    cross = float(math.exp(min((math.log(bound) - a) / b, 700.0))) if b > 0 else None
    return Fit(intercept=float(a), slope=float(b), resid_sd=sd, crossing=cross, lack_of_fit_p=lack_of_fit(x, resid, y))


def lack_of_fit(x: np.ndarray, resid: np.ndarray, y: np.ndarray) -> float | None:
    """The classical lack-of-fit F test's p-value: the straight line's residual sum of squares split into
    pure error (the scatter of repeated probes about their rate's mean) and the rest (the line missing
    the rates' means). A small p says log p99 bends against log load over this grid (a knee near
    saturation), so the crossing read off the line is less to be trusted. None where the grid has no
    repeated rate or only two rates (nothing to split)."""
    from scipy import stats as sps

    groups = [y[x == v] for v in np.unique(x)]
    df_pe = len(y) - len(groups)
    df_lof = len(groups) - 2
    if df_pe < 1 or df_lof < 1:
        return None
    ss_pe = float(sum(((g - g.mean()) ** 2).sum() for g in groups))
    ss_lof = max(float((resid ** 2).sum()) - ss_pe, 0.0)
    if ss_pe <= 0:
        return 0.0 if ss_lof > 0 else None
    return float(sps.f.sf((ss_lof / df_lof) / (ss_pe / df_pe), df_lof, df_pe))


def half_pass_of(rates: np.ndarray, p99s: dict[str, np.ndarray], bounds: dict[str, float]) -> tuple[float | None, str, dict[str, Fit]]:
    """(half-pass rate or None, status, the fits) for one server: status "measured" inside the grid or
    within one grid step of it, "above" / "below" that (censored), "no rise" where no bound's p99 rises with load."""
    fits = {m: fit(rates, p99s[m], bounds[m]) for m in p99s}
    crossings = [f.crossing for f in fits.values() if f.crossing is not None]
    grid = np.unique(rates)
    lo, hi = grid[0] * grid[0] / grid[1], grid[-1] * grid[-1] / grid[-2]   # one grid step beyond each end
    if not crossings:
        return None, "no rise", fits
    c = min(crossings)
    if c > hi:
        return None, "above", fits
    if c < lo:
        return None, "below", fits
    return c, "measured", fits


def per_server(pts: pd.DataFrame, workloads: set[tuple[str, str]] | None = None) -> pd.DataFrame:
    """One row per (model, workload, leg, server) of a paced grid (at least MIN_RATES distinct rates):
    probes, how many met both bounds, each bound's slope, residual sd and crossing, and the half-pass
    rate with its status. `workloads`: only these (model, workload) pairs (None: every grid)."""
    rows: list[dict] = []
    if pts.empty:
        return pd.DataFrame(rows)
    paced = pts[np.isfinite(pts["request_rate"].astype(float))]
    for (model, wl, leg, rep), g in paced.groupby(_KEYS + ["repeat"], sort=False):
        if workloads is not None and (model, wl) not in workloads:
            continue
        if g["request_rate"].nunique() < MIN_RATES:
            continue
        rates = g["request_rate"].to_numpy(float)
        bounds = {m: float(g[b].iloc[0]) for m, b in BOUNDS}
        p99s = {m: g[m].to_numpy(float) for m, _ in BOUNDS}
        value, status, fits = half_pass_of(rates, p99s, bounds)
        met = np.logical_and.reduce([p99s[m] <= bounds[m] for m in p99s])
        row = {"model": model, "workload": wl, "leg": leg, "server": int(rep), "probes": len(g),
               "rates": ", ".join(f"{r:g}" for r in sorted(set(rates))), "met": int(met.sum()),
               "half_pass": value, "status": status}
        for m, f in fits.items():
            short = m.removesuffix("_p99_ms")
            row |= {f"{short}_slope": f.slope, f"{short}_resid_sd": f.resid_sd, f"{short}_crossing": f.crossing,
                    f"{short}_lof_p": f.lack_of_fit_p}
        rows.append(row)
    return pd.DataFrame(rows)


def by_leg(servers: pd.DataFrame) -> dict[tuple[str, str], dict[str, list[float]]]:
    """(model, workload) -> leg -> the measured half-pass rates (censored servers left out), as
    capacity.by_leg gives a search's capacities: the samples the study's verdict is decided on."""
    out: dict[tuple[str, str], dict[str, list[float]]] = {}
    if servers.empty:
        return out
    for (model, wl), g in servers.groupby(["model", "workload"], sort=False):
        out[(model, wl)] = {leg: [float(v) for v in h.loc[h["status"] == "measured", "half_pass"]]
                            for leg, h in g.groupby("leg", sort=False)}
    return out


def between_sd(servers: pd.DataFrame) -> tuple[float | None, int]:
    """The pooled sd of log half-pass rates between servers of one leg, and its degrees of freedom (legs
    with at least two measured servers; None where none has). Within a leg every server runs the same
    stack, so this is the server instance's spread with the fit's own noise in it."""
    measured = servers[servers["status"] == "measured"] if len(servers) else servers
    if measured.empty:
        return None, 0
    ow = one_way([np.log(g["half_pass"].to_numpy(float)) for _, g in measured.groupby(_KEYS, sort=False)])
    return (ow.within_sd, ow.dfw) if ow.within_sd is not None else (None, 0)


def sd_interval(sd: float | None, df: int, confidence: float = 0.95) -> tuple[float, float] | None:
    """The sd's confidence interval from its chi-square law with `df` degrees of freedom (None without one)."""
    from scipy import stats as sps

    if sd is None or df < 1:
        return None
    a = 1 - confidence
    return (sd * math.sqrt(df / sps.chi2.ppf(1 - a / 2, df)), sd * math.sqrt(df / sps.chi2.ppf(a / 2, df)))


def servers_for_width(sd: float | None, width: float = WIDTH, *, alpha: float = ALPHA, n_max: int = N_MAX) -> int | None:
    """Servers a leg for the ratio's interval to lie within ±width at between-server sd `sd` (the
    expected half-width t(2n-2) · sd · √(2/n) of the rule's interval on log values); None without an sd."""
    from scipy import stats as sps

    if sd is None or not math.isfinite(sd):
        return None
    target = math.log1p(width)

    def fits(n: int) -> bool:
        return bool(sps.t.ppf(1 - alpha / 2, 2 * n - 2) * sd * math.sqrt(2 / n) <= target)
    if not fits(n_max):
        return n_max
    lo, hi = 2, n_max          # the half-width falls with n: bisect for the least n that fits
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    return lo


# --- the rule's error rate under an A/A, by seeded simulation ------------------------------------------

@dataclass(frozen=True)
class Model:
    """A generative model of one leg's grid: log p99 TTFT = log(bound) + slope (log rate - log mid)
    + server effect + probe noise; each server's slope drawn about `slope` with sd `slope_sd` (kept
    above 0.5); probe noise Student-t with `tail_df` degrees of freedom (inf: normal). The defaults are
    the components results/h100-capacity-bracket measured: slopes 2.5-5.0, residual sd 0.59-0.69, and
    two servers of one leg 0.225 apart in log half-pass rate sd (0.8 in log p99 at slope 3.8)."""
    rates: tuple[float, ...] = (18, 22, 26, 30) * 3
    mid: float = 26.0           # the true half-pass rate
    slope: float = 3.8
    slope_sd: float = 1.0
    server_sd: float = 0.8      # log p99 units
    probe_sd: float = 0.65
    tail_df: float = math.inf


def simulate_servers(rng: np.random.Generator, model: Model, n: int, bound: float = 1000.0) -> list[float | None]:
    """n servers' half-pass rates under `model` (None: censored), through the same fit as the records."""
    x = np.log(np.asarray(model.rates, float))
    out: list[float | None] = []
    for _ in range(n):
        noise = (rng.standard_t(model.tail_df, len(x)) * model.probe_sd / math.sqrt(model.tail_df / (model.tail_df - 2))
                 if math.isfinite(model.tail_df) else rng.normal(0, model.probe_sd, len(x)))
        slope = max(0.5, rng.normal(model.slope, model.slope_sd))
        y = math.log(bound) + slope * (x - math.log(model.mid)) + rng.normal(0, model.server_sd) + noise
        v, _, _ = half_pass_of(np.exp(x), {"ttft_p99_ms": np.exp(y)}, {"ttft_p99_ms": bound})
        out.append(v)
    return out


def aa_rates(model: Model, ns: tuple[int, ...] = (2, 3, 5, 8), *, reps: int = 2000, seed: int = 0,
             alpha: float = ALPHA) -> pd.DataFrame:
    """Per servers-a-leg n: how often the rule calls an A/A (both legs drawn from `model`) faster or
    slower, how often it decides at all, and the median interval half-width, over `reps` seeded draws."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in ns:
        false = tested = 0
        widths = []
        for _ in range(reps):
            a = [v for v in simulate_servers(rng, model, n) if v is not None]
            b = [v for v in simulate_servers(rng, model, n) if v is not None]
            r = ratio(a, b, higher_is_better=True, confidence=1 - alpha)
            if r.low is None:
                continue
            tested += 1
            widths.append(math.sqrt(r.high / r.low) - 1)
            false += r.verdict in ("faster", "slower")
        rows.append({"servers": n, "reps": reps, "tested": tested, "false_calls": false,
                     "false_rate": false / reps, "median_half_width": float(np.median(widths)) if widths else None})
    return pd.DataFrame(rows)
