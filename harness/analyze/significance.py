"""The project's one significance rule, and the simulation that checks its error rates.

Rule: Welch's t-test on the natural log of each repeat's value (one run's figure, never the passes
inside one run), two-sided, at ALPHA; when the sides have different numbers of repeats its degrees of
freedom are capped at the smaller side's n - 1 (`_df`). Its interval is the matching Welch t-interval of the difference
of log means, exponentiated: a ratio of geometric means. The interval excludes 1.0 exactly when the
test rejects, so the verdict and the interval never disagree. `docs/statistics.md` says why this rule
and what it assumes; `python -m harness.analyze.significance --simulate` prints its error-rate table.

One design gets a rule of its own: where each repeat measured both sides back to back (the
crosscheck's harness run beside vLLM's benchmark), `paired_log` tests the repeats' log pair ratios
with a one-sample t, since the host state the two sides shared cancels inside each pair.

Verdicts: "faster" / "slower" (the test rejects); "equivalent" (the interval lies inside the study's
practical margin ±δ: two one-sided tests, `equivalence`); "undecided" (neither: with `needs`, the number
of repeats or pairs that would likely decide it); "too few repeats" (one side has a single repeat and
the other more, or a paired comparison on one engine instance: the rule cannot decide however large the
gap); "single pass" (one repeat on each side); "missing" (a side has none).

A table is many tests: `decide_table` applies Benjamini–Hochberg across every cell's difference and
equivalence p-values, so the share of false verdicts among a table's decided cells stays at or below
ALPHA; each cell's own interval is still the one printed.

The paired, interleaved design (a sweep with `design: paired`: both legs' engines up at once, timed
passes alternating) has its own rule, `nested_paired`: log pair ratios nested within engine blocks.

Values known only to a resolution (a capacity search records the highest rate that passed, and the
capacity lies below the next probe, at most a factor 1 + rel_tol higher): `welch_log(resolution=r)`
floors each side's variance at the rounding variance of a grid that fine (identical repeats on one grid
point are not a measurement of no spread) and widens the interval by the grid's width on each side (the
unseen offset within the last bracket can bias the mean by up to that much), so a gap no wider than the
search's resolution is never called a difference. Seeded simulation: tests/test_significance.py."""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from harness import workloads
from harness.analyze.components import one_way

ALPHA = 0.05
METHOD = "Welch t on log values"
MIN_N = 2           # per side: the rule needs a variance on each side
DETECT = 0.05       # the difference `needs` is quoted for when a verdict cannot be reached
POWER = 0.8

Verdict = Literal["faster", "slower", "equivalent", "undecided", "too few repeats", "single pass", "missing"]
DECIDED = ("faster", "slower", "equivalent")

# The practical margin δ a study may call "equivalent within ±δ" when it declares none (study.yaml
# `margin`), by device kind: GPU repeats agree to a fraction of a percent (H200 median log-sd 0.15%),
# so ±2% is both useful and reachable; two-core CPU hosts drift by several percent within minutes.
MARGIN_DEFAULT = {"gpu": 0.02, "cpu": 0.05}


def default_margin(device: str | None) -> float:
    """The default margin for a study measured on `device` (a manifest's device string)."""
    # A manifest names an accelerator by its maker or kind ("1x NVIDIA H200", "8x FAKE-GPU"); a CPU
    # host by its processor ("Intel(R) Xeon(R) Processor (2 cores, ...)"). Unknown: the wider margin.
    d = (device or "").lower()
    gpu = any(w in d for w in ("nvidia", "gpu", "cuda", "instinct", "radeon", "tpu", "gaudi"))
    return MARGIN_DEFAULT["gpu"] if gpu else MARGIN_DEFAULT["cpu"]


def footnote(alpha: float = ALPHA) -> str:
    """The line printed beside every table of intervals: which rule, at which level."""
    return (f"verdict: {METHOD}, two-sided, α={alpha:g}, over the repeats (one run's figure each); "
            f"n per side shown; the interval is the matching {1 - alpha:.0%} t-interval of the ratio of "
            f"geometric means; \"too few repeats\": fewer than {MIN_N} on a side (see docs/statistics.md).")


@dataclass(frozen=True, kw_only=True)
class Test:
    """One application of the rule to num/den (a ratio above 1 means num is larger)."""

    ratio: float              # ratio of geometric means
    low: float
    high: float
    p: float
    df: float
    verdict: Verdict          # "faster" when num is significantly larger
    se: float = float("nan")  # standard error of the log ratio (the t statistic's denominator)
    margin: float | None = None   # the equivalence margin δ tested against, None: not tested
    p_eq: float | None = None     # equivalence p (two one-sided tests, doubled to match the interval)
    n: int = 0                    # units of replication behind the test (repeats per side, or pairs)
    unit: str = "repeat"
    needs: int | None = None      # "undecided": units that would likely decide it at this spread
    level: float = ALPHA          # the level it was tested at (the paired rules test below alpha)
    resolution: float = 0.0       # the values' relative resolution the interval was widened by (0: exact)


def rounding_sd(resolution: float) -> float:
    """The log-scale spread that rounding onto a grid of relative width `resolution` adds by itself
    (uniform over the grid's step): the least spread a side of such values can be taken to have."""
    return math.log1p(resolution) / math.sqrt(12)


def welch_log(num: Sequence[float], den: Sequence[float], *, alpha: float = ALPHA,
              margin: float | None = None, resolution: float = 0.0) -> Test:
    """Welch's t on log values of two samples of at least MIN_N positive values each; with `margin`,
    also the two one-sided tests of equivalence within ±margin. `resolution`: each value is the lower end
    of a range a factor (1 + resolution) wide that holds the quantity (module docstring)."""
    a, b = np.log(np.asarray(num, dtype=float)), np.log(np.asarray(den, dtype=float))
    if len(a) < MIN_N or len(b) < MIN_N:
        raise ValueError(f"welch_log needs at least {MIN_N} values per side (got {len(a)} and {len(b)})")
    if not resolution >= 0:
        raise ValueError(f"resolution should be 0 or more (got {resolution})")
    w = math.log1p(resolution)
    d = float(a.mean() - b.mean())
    floor = rounding_sd(resolution) ** 2
    va, vb = max(float(a.var(ddof=1)), floor) / len(a), max(float(b.var(ddof=1)), floor) / len(b)
    se = math.sqrt(va + vb)
    n = min(len(a), len(b))
    # Logs of identical values can differ in the last bit: a spread below this is none.
    if se <= 1e-12:
        # Identical repeats on both sides (published figures quoted to a few digits): no spread to
        # weigh a gap against, so nothing is decided.
        r = math.exp(d)
        return Test(ratio=r, low=r, high=r, p=1.0, df=float("nan"), verdict="undecided", se=0.0, margin=margin,
                    p_eq=None if margin is None else 1.0, n=n)
    df = float(_df(va, vb, len(a), len(b)))
    return _decide(d, se, df, alpha=alpha, margin=margin, n=n, unit="repeat", bias=w)


def _decide(m: float, se: float, df: float, *, alpha: float, margin: float | None, n: int, unit: str,
            per_unit_sd: float | None = None, bias: float = 0.0) -> Test:
    """The verdict for a log ratio `m` with standard error `se` on `df` degrees of freedom: the
    two-sided test of no difference, the matching (1 - alpha) interval and, with `margin`, the two
    one-sided tests of equivalence within ±margin. The equivalence p is doubled so that "equivalent"
    holds exactly when the printed (1 - alpha) interval lies inside [1/(1+margin), 1+margin]: the
    reader checks the interval they see, at the cost of a test of size alpha/2 per side.
    `bias`: `m` may be off by up to this much (log scale) beyond its noise: the interval is that much
    wider on each side, and each test is against the nearer end of that range."""
    from scipy import stats as sps  # imported here: a CLI start should not pay for scipy

    p = float(2 * sps.t.sf(max(abs(m) - bias, 0.0) / se, df))
    half = float(sps.t.ppf(1 - alpha / 2, df)) * se + bias
    p_eq = None
    if margin is not None:
        lim = math.log1p(margin)
        p_lo = float(sps.t.sf((m - bias + lim) / se, df))   # H0: m <= -lim
        p_hi = float(sps.t.cdf((m + bias - lim) / se, df))  # H0: m >= +lim
        p_eq = min(1.0, 2 * max(p_lo, p_hi))
    verdict: Verdict = ("faster" if m > 0 else "slower") if p < alpha else (
        "equivalent" if p_eq is not None and p_eq < alpha else "undecided")
    needs = None
    if verdict == "undecided":
        sd = per_unit_sd if per_unit_sd is not None else se * math.sqrt(max(n, 1))
        needs = units_to_decide(m, sd, margin, alpha=alpha, bias=bias)
    return Test(ratio=math.exp(m), low=math.exp(m - half), high=math.exp(m + half), p=p, df=df, verdict=verdict,
                se=se, margin=margin, p_eq=p_eq, n=n, unit=unit, needs=needs, level=alpha,
                resolution=math.expm1(bias))


def units_to_decide(m: float, sd: float, margin: float | None, *, alpha: float = ALPHA, n_max: int = 200,
                    bias: float = 0.0) -> int | None:
    """Units (repeats per side, or pairs) at which a comparison whose log ratio is truly `m`, with
    `sd` the spread of one unit's contribution (se = sd / sqrt(n)), would be decided with probability
    POWER: the interval either clears 1.00 or fits inside the margin, whichever is nearer. None when
    no number up to n_max would (a true ratio sitting on the margin's edge, or a gap within `bias`,
    the values' resolution, which no number of repeats narrows)."""
    if not math.isfinite(sd) or sd <= 0:
        return None
    from scipy import stats as sps

    # decided_how at every n at once (one quantile call for the lot, not one per n: a table's undecided
    # cells and the seeded simulations ask this thousands of times).
    ns = np.arange(2, n_max + 1)
    reach = (sps.t.ppf(1 - alpha / 2, ns - 1) + float(sps.norm.ppf(POWER))) * sd / np.sqrt(ns) + bias
    ok = abs(m) - reach > 0
    if margin is not None:
        ok |= math.log1p(margin) - abs(m) - reach > 0
    hit = np.flatnonzero(ok)
    return int(ns[hit[0]]) if len(hit) else None


def decided_how(m: float, sd: float, margin: float | None, n: int, *, alpha: float = ALPHA,
                bias: float = 0.0) -> str | None:
    """How `n` units decide a comparison whose log ratio is truly `m` (spread `sd` a unit), with
    probability POWER: "differs" (the interval clears 1.00), "within" (it fits inside the margin), or
    None (not yet). `bias` as in `_decide`."""
    from scipy import stats as sps

    reach = (float(sps.t.ppf(1 - alpha / 2, n - 1)) + float(sps.norm.ppf(POWER))) * sd / math.sqrt(n) + bias
    if abs(m) - reach > 0:
        return "differs"
    if margin is not None and math.log1p(margin) - abs(m) - reach > 0:
        return "within"
    return None


PAIRED_METHOD = "paired t on log pair ratios"
# The paired rule needs three pairs: with two, a t-interval rests on one degree of freedom, and under the
# light-tailed noise the shipped records show, its "within the band" claim erred 3.3% of the time where
# 2.5% is its share (simulated, tests/test_significance.py).
PAIRED_MIN = 3
# ... and it tests at 0.9 alpha. A one-sample t on differences of light-tailed values runs a little
# over its level (5.2-5.4% at 3-10 pairs, simulated with the shipped residuals and with uniform noise);
# at 0.9 alpha every simulated case stays at or below alpha. Its interval is therefore a little wider
# than Student's: at least, not exactly, 95%.
PAIRED_SIZE = 0.9


def paired_log(num: Sequence[float], den: Sequence[float], *, alpha: float = ALPHA) -> Test:
    """The rule for a paired design, where num[i] and den[i] were measured back to back in repeat i
    (the crosscheck: the harness and vLLM's benchmark on one host state): a one-sample t on the log
    pair ratios, n - 1 degrees of freedom, its t-interval of the geometric mean ratio. What the pair
    shares (the host running a few percent fast or slow that minute) cancels inside each ratio
    instead of widening the interval, as it does when the two sides are compared as unpaired
    samples. The unit is still the repeat: one ratio per repeat, at least PAIRED_MIN of them, tested at
    PAIRED_SIZE * alpha (see there)."""
    from scipy import stats as sps

    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if len(a) != len(b) or len(a) < PAIRED_MIN:
        raise ValueError(f"paired_log needs two equal-length samples of at least {PAIRED_MIN} (got {len(a)} and {len(b)})")
    alpha = PAIRED_SIZE * alpha
    d = np.log(a) - np.log(b)
    m, se = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(len(d))
    if se == 0.0:
        r = math.exp(m)
        return Test(ratio=r, low=r, high=r, p=1.0, df=float("nan"), verdict="undecided", se=0.0, n=len(d), unit="pair")
    return _decide(m, se, float(len(d) - 1), alpha=alpha, margin=None, n=len(d), unit="pair")


# --- the paired, interleaved design ----------------------------------------------------------------

NESTED_METHOD = "paired t on log pair ratios, nested in engine blocks"
NESTED_MIN_BLOCKS = 2   # engine instances per leg: with one, an instance's own speed is the version's
# Passes of one engine share that engine's own speed, so the engine instance (a block) is a level of
# its own and the pairs of one block are not independent replicates of the version effect. With the
# handful of blocks a sweep can afford (2-3), a test on block means alone (df = blocks - 1) cannot
# decide anything, and pooling the pairs after a pre-test that finds no block effect runs to 9-14%
# false positives where engines differ by about the pass noise (simulated: harness.analyze.simulation).
# So the rule takes the engine-instance spread as a measured input: `engine_sd`, an upper bound on one
# leg's engine-instance sd (log scale) from a variance-components measurement on that kind of device
# (study.yaml `engine_sd`, defaults below). It adds that variance to the pairs' own:
#     se^2 = MSW / pairs + 2 engine_sd^2 / blocks      (df = pairs - blocks)
# and checks the bound against the cell's own blocks: where they scatter more than the bound allows
# (F test of MSB against MSW + n0 * 2 engine_sd^2 at POOL_LEVEL), the block means are the units
# (df = blocks - 1). Without a bound, the block means are always the units.
POOL_LEVEL = 0.25
NESTED_SIZE = 1.0


@dataclass(frozen=True, kw_only=True)
class Nested:
    test: Test
    blocks: int
    pairs: int
    pooled: bool            # pairs the units, with the engine bound's variance added
    f_p: float | None       # the bound check's p (None: nothing to check)
    block_sd: float | None  # the cell's own engine-instance sd of the log ratio (method of moments, >= 0)
    pair_sd: float | None   # the pairs' own sd within blocks


def nested_paired(blocks: Sequence[Sequence[float]], *, alpha: float = ALPHA, margin: float | None = None,
                  engine_sd: float | None = None) -> Nested:
    """The rule for the paired, interleaved design: `blocks[b]` holds block b's log pair ratios (new over
    old, oriented so that positive is faster), each from two passes run back to back on the two legs'
    resident engines; `engine_sd` the per-leg engine-instance bound (see above). Fewer than
    NESTED_MIN_BLOCKS blocks or PAIRED_MIN pairs: "too few repeats" (what would decide it in `needs`)."""
    from scipy import stats as sps

    bl = [np.asarray(b, dtype=float) for b in blocks if len(b)]
    n_pairs, n_blocks = sum(len(b) for b in bl), len(bl)
    allv = np.concatenate(bl) if bl else np.zeros(0)
    if n_blocks < NESTED_MIN_BLOCKS or n_pairs < PAIRED_MIN:
        r = math.exp(float(allv.mean())) if n_pairs else float("nan")
        t = Test(ratio=r, low=float("nan"), high=float("nan"), p=1.0, df=float("nan"),
                 verdict="missing" if not n_pairs else "too few repeats", margin=margin, n=n_pairs, unit="pair",
                 needs=NESTED_MIN_BLOCKS if n_blocks < NESTED_MIN_BLOCKS else PAIRED_MIN)
        return Nested(test=t, blocks=n_blocks, pairs=n_pairs, pooled=False, f_p=None, block_sd=None, pair_sd=None)
    ow = one_way(bl)      # n0: effective pairs per block
    means, grand, msw, msb, n0, dfw, dfb = ow.means, ow.grand, ow.msw, ow.msb, ow.n0, ow.dfw, ow.dfb
    block_sd, pair_sd = ow.between_sd, ow.within_sd
    f_p, pooled = None, False
    if msw is not None and engine_sd is not None:
        b2 = 2 * engine_sd ** 2          # the ratio's block variance: both legs' engines
        expect = msw + n0 * b2
        f_p = 1.0 if msb == 0 else (0.0 if expect == 0 else float(sps.f.sf(msb / expect, dfb, dfw)))
        pooled = f_p >= POOL_LEVEL
    if pooled:
        m = grand
        se = math.sqrt(msw / n_pairs + 2 * engine_sd ** 2 / n_blocks)
        df, n, unit = float(dfw), n_pairs, "pair"
        sd = se * math.sqrt(n)
    else:
        m, sd, df, n, unit = float(means.mean()), float(means.std(ddof=1)), float(dfb), n_blocks, "engine block"
        se = sd / math.sqrt(n)
    if se == 0.0:
        r = math.exp(m)
        t = Test(ratio=r, low=r, high=r, p=1.0, df=float("nan"), verdict="undecided", se=0.0, margin=margin,
                 p_eq=None if margin is None else 1.0, n=n, unit=unit)
    else:
        t = _decide(m, se, df, alpha=NESTED_SIZE * alpha, margin=margin, n=n, unit=unit, per_unit_sd=sd)
    return Nested(test=t, blocks=n_blocks, pairs=n_pairs, pooled=pooled, f_p=f_p, block_sd=block_sd, pair_sd=pair_sd)


# --- stopping when decided --------------------------------------------------------------------------

def look_alpha(looks: int, alpha: float = ALPHA) -> float:
    """The level each look of a sequential paired sweep tests at (`--until-decided`): Bonferroni
    alpha-spending, alpha / looks, planned before the first block. A wrong verdict at the look where the
    sweep stopped is a wrong verdict at one of the looks, so its probability is at most the sum of the
    looks' levels, alpha, whatever the dependence between looks; for a table decided by Benjamini–
    Hochberg at alpha / looks at every look, the false discovery proportion at the stopping look is at
    most the sum of the looks' proportions, so its expectation is at most alpha too. Conservative (the
    looks' statistics are strongly correlated), simple, and valid for every stopping rule the sweep uses:
    the simulation shows the rates (harness.analyze.simulation.sequential_rates)."""
    if looks < 1:
        raise ValueError("looks must be at least 1")
    return alpha / looks


# --- a table's error rate ----------------------------------------------------------------------------

TABLE_RULE = "Benjamini–Hochberg"


@dataclass(frozen=True, kw_only=True)
class FamilyDecision:
    """One test's outcome in its family: the verdict, the hypothesis that decided it ("difference",
    "equivalence" or None) and its Benjamini–Hochberg adjusted p-value (the smallest family level at
    which the cell would be decided; None for a cell that entered no test)."""

    verdict: Verdict | None
    by: str | None = None
    p: float | None = None        # the entering p-value, on alpha's scale
    p_adj: float | None = None


def _bh_adjusted(ps: dict[int, float]) -> dict[int, float]:
    """Benjamini–Hochberg adjusted p-values (step-up: min over j >= rank of m/j * p_(j)), by key."""
    order = sorted((p, i) for i, p in ps.items())
    m = len(order)
    adj: dict[int, float] = {}
    running = 1.0
    for j in range(m, 0, -1):
        p, i = order[j - 1]
        running = min(running, p * m / j)
        adj[i] = running
    return adj


def decide_family(tests: Sequence[Test | None], *, alpha: float = ALPHA) -> list[FamilyDecision]:
    """The verdicts of a family of cells with its error rates controlled: Benjamini–Hochberg at `alpha`
    over the tested cells' **difference** p-values, and apart, at `alpha` again, over their
    **equivalence** p-values. A cell rejected in the first is faster or slower (whatever the second
    says, as a single cell's rule puts the difference test first); rejected only in the second it is
    equivalent. Why two procedures and not one over each cell's smaller p: in an A/A every difference
    null is true and every equivalence null false, and a single procedure let the many right
    "equivalent" calls raise the threshold for the difference p's until a table of 8 or 16 blocks per
    cell called some cell faster in 6-10% of A/A tables. Apart, the difference p's of an A/A are all
    null and Benjamini–Hochberg is then Simes' test: a table calls any cell faster or slower with
    probability at most alpha. The false discovery rate still holds for the table as a whole: at most
    one of a cell's two nulls is true, so the two procedures' nulls number at most the cells, m0_d +
    m0_e <= m, and the table's share of wrong verdicts is at most alpha (m0_d + m0_e) / m <= alpha
    (independent or positively dependent p-values; the simulations check both rates:
    harness.analyze.simulation.table_fdr and table_rates). Each cell keeps its own interval; a cell
    decided alone may read "undecided" here. Cells whose test decided nothing to begin with (None, too
    few repeats, single pass, missing) keep their verdict and do not count as tests. A cell's entering
    p and adjusted p are those of the hypothesis that decided it, or, undecided, of the one nearer to
    deciding it (the smaller adjusted p: the least family level at which it would be decided)."""
    diff: dict[int, float] = {}
    equiv: dict[int, float] = {}
    for i, t in enumerate(tests):
        if t is None or t.verdict not in ("faster", "slower", "equivalent", "undecided"):
            continue
        # On alpha's scale: a rule that tests at a fraction of alpha keeps that fraction in the family.
        scale = alpha / t.level
        diff[i] = min(1.0, t.p * scale)
        if t.p_eq is not None:
            equiv[i] = min(1.0, t.p_eq * scale)
    adj_d, adj_e = _bh_adjusted(diff), _bh_adjusted(equiv)
    out: list[FamilyDecision] = []
    for i, t in enumerate(tests):
        if t is None:
            out.append(FamilyDecision(verdict=None))
        elif i not in diff:
            out.append(FamilyDecision(verdict=t.verdict))
        elif adj_d[i] <= alpha:
            out.append(FamilyDecision(verdict="faster" if t.ratio > 1 else "slower", by="difference",
                                      p=diff[i], p_adj=adj_d[i]))
        elif i in adj_e and adj_e[i] <= alpha:
            out.append(FamilyDecision(verdict="equivalent", by="equivalence", p=equiv[i], p_adj=adj_e[i]))
        elif i in adj_e and adj_e[i] < adj_d[i]:
            out.append(FamilyDecision(verdict="undecided", p=equiv[i], p_adj=adj_e[i]))
        else:
            out.append(FamilyDecision(verdict="undecided", p=diff[i], p_adj=adj_d[i]))
    return out


def decide_table(tests: Sequence[Test | None], *, alpha: float = ALPHA) -> list[Verdict | None]:
    """`decide_family`'s verdicts alone (the simulations' view of a family)."""
    return [d.verdict for d in decide_family(tests, alpha=alpha)]


def _df(va, vb, n_a: int, n_b: int):
    """Welch-Satterthwaite degrees of freedom, capped at min(n) - 1 when the sides differ in size:
    with one side much smaller the estimated df runs high exactly when that side's variance came out
    small, and the test overshoots its level (10% at 2 vs 10 repeats, log-normal). The cap is Hsu's
    conservative bound, valid whatever the two variances are."""
    df = (va + vb) ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1))
    return df if n_a == n_b else np.minimum(df, min(n_a, n_b) - 1)


def power(n: int, log_sd: float, effect: float, *, alpha: float = ALPHA) -> float:
    """The rule's power with n repeats per side, log-normal repeats of spread `log_sd` on both sides
    and a true ratio of 1 + effect (Student's df 2n-2: equal spreads make Welch's df close to it)."""
    from scipy import stats as sps

    if n < MIN_N:
        return 0.0
    if log_sd <= 0:
        return 1.0
    df = 2 * n - 2
    ncp = math.log1p(effect) / (log_sd * math.sqrt(2 / n))
    crit = sps.t.ppf(1 - alpha / 2, df)
    return float(sps.nct.sf(crit, df, ncp) + sps.nct.cdf(-crit, df, ncp))


def n_needed(log_sd: float | None, effect: float = DETECT, *, alpha: float = ALPHA, target: float = POWER,
             n_max: int = 100) -> int:
    """Repeats per side for the rule to detect a difference of `effect` with probability `target`
    at spread `log_sd`; MIN_N when the spread is unknown (the least that can ever decide)."""
    if log_sd is None or not math.isfinite(log_sd):
        return MIN_N
    for n in range(MIN_N, n_max + 1):
        if power(n, log_sd, effect, alpha=alpha) >= target:
            return n
    return n_max


def log_sd(*samples: Sequence[float]) -> float | None:
    """Pooled standard deviation of log values over the sides that have at least two values."""
    num = den = 0.0
    for s in samples:
        a = np.log(np.asarray(s, dtype=float))
        if len(a) >= 2:
            num += float(((a - a.mean()) ** 2).sum())
            den += len(a) - 1
    return math.sqrt(num / den) if den else None


# --- the simulation --------------------------------------------------------------------------------

def _speed_value(r: dict[str, Any]) -> float:
    """A record's value where its kind measures an engine's speed (workloads.Traits), else NaN."""
    kind = r.get("kind")
    if not (workloads.known(kind) and workloads.traits_of(kind).engine_speed):
        return float("nan")
    v = r.get(workloads.metric_of(kind).key)
    return float("nan") if v is None else float(v)


SPREAD_STUDIES = {"H200": ("results/h200",), "CPU": ("results/cpu-tiny-serial", "results/cpu-repeat")}
NS = (2, 3, 5, 10)
EFFECTS = (0.02, 0.05, 0.10)


@dataclass(frozen=True, kw_only=True)
class Spread:
    name: str
    log_sd: float          # median over cells of the log-value standard deviation of their repeats
    cells: int             # cells with at least two repeats behind it
    residuals: np.ndarray  # standardized log residuals of the cells with 3+ repeats: the noise's shape


def spreads_from_records(root: Path | str = ".", studies: dict[str, tuple[str, ...]] | None = None) -> list[Spread]:
    """Per platform, the median repeat spread (sd of log values) over every (series, arm, leg,
    model, workload) with two or more passing repeats in the shipped studies, and their pooled
    standardized residuals (each cell's log values minus their mean, scaled to unit variance)."""
    from harness.analyze.dataset import load

    out = []
    for name, dirs in (studies or SPREAD_STUDIES).items():
        sds, res = [], []
        for d in dirs:
            df = load(Path(root) / d).records
            ok = df[df["status"] == "ok"]
            val = np.array([_speed_value(r) for r in ok.to_dict("records")], dtype=float)
            ok = ok.assign(v=val).dropna(subset=["v"])
            for _, g in ok.groupby(["series", "arm", "leg", "model", "workload"]):
                x = np.log(g["v"].to_numpy(dtype=float))
                if len(x) < 2 or x.std(ddof=1) == 0:
                    continue
                sds.append(float(x.std(ddof=1)))
                # Two repeats give residuals of exactly +-1 whatever the noise: no shape to learn.
                if len(x) >= 3:
                    res.extend((x - x.mean()) / x.std(ddof=1) * math.sqrt((len(x) - 1) / len(x)))
        if not sds or not res:
            raise ValueError(f"no cell with two or more repeats in {', '.join(dirs)}")
        r = np.asarray(res)
        out.append(Spread(name=name, log_sd=float(np.median(sds)), cells=len(sds), residuals=r / r.std()))
    return out


def _welch_reject(a: np.ndarray, b: np.ndarray, alpha: float) -> np.ndarray:
    """Vectorized rule over rows: a and b are (reps, n) arrays of log values."""
    from scipy import stats as sps

    va, vb = a.var(axis=1, ddof=1) / a.shape[1], b.var(axis=1, ddof=1) / b.shape[1]
    se = np.sqrt(va + vb)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = _df(va, vb, a.shape[1], b.shape[1])
        t = (a.mean(axis=1) - b.mean(axis=1)) / se
    # Resampled residuals can tie on both sides (se 0): welch_log calls that no difference.
    return np.where(se > 0, 2 * sps.t.sf(np.abs(np.nan_to_num(t)), np.nan_to_num(df, nan=1.0)) < alpha, False)


def _paired_reject(a: np.ndarray, b: np.ndarray, alpha: float) -> np.ndarray:
    """Vectorized paired rule over rows: a and b are (reps, n) arrays of log values, column i a pair."""
    from scipy import stats as sps

    d = a - b
    se = d.std(axis=1, ddof=1) / math.sqrt(d.shape[1])
    with np.errstate(divide="ignore", invalid="ignore"):
        t = d.mean(axis=1) / se
    return np.where(se > 0, 2 * sps.t.sf(np.abs(np.nan_to_num(t)), d.shape[1] - 1) < PAIRED_SIZE * alpha, False)


def paired_rejection_rate(n: int, *, log_sd: float, shared_sd: float, effect: float = 0.0, reps: int = 20000,
                          noise: np.ndarray | None = None, alpha: float = ALPHA, seed: int = 0) -> float:
    """Fraction of `reps` simulated paired series of n repeats the paired rule calls a difference.
    Each repeat draws a host state shared by both sides (`shared_sd` times a standard normal or a
    resampled residual) and each side its own noise (`log_sd`); side A is log(1 + effect) higher."""
    rng = np.random.default_rng(seed)

    def draw(sd: float) -> np.ndarray:
        z = rng.standard_normal((reps, n)) if noise is None else rng.choice(noise, size=(reps, n))
        return sd * z
    host = draw(shared_sd)
    a, b = host + draw(log_sd) + math.log1p(effect), host + draw(log_sd)
    return float(np.mean(_paired_reject(a, b, alpha)))


def rejection_rate(n_a: int, n_b: int, *, log_sd: float, effect: float = 0.0, reps: int = 20000,
                   noise: np.ndarray | None = None, alpha: float = ALPHA, seed: int = 0,
                   reject=_welch_reject, log_sd_b: float | None = None) -> float:
    """Fraction of `reps` simulated comparisons the rule calls a difference: side A's log values are
    log(1 + effect) + noise, side B's noise, noise being log_sd times standard normals or, with
    `noise`, resampled standardized residuals; `log_sd_b` gives side B another spread. effect = 0
    gives the false-positive rate."""
    rng = np.random.default_rng(seed)

    def draw(n: int, sd: float) -> np.ndarray:
        z = rng.standard_normal((reps, n)) if noise is None else rng.choice(noise, size=(reps, n))
        return sd * z
    a, b = draw(n_a, log_sd) + math.log1p(effect), draw(n_b, log_sd if log_sd_b is None else log_sd_b)
    return float(np.mean(reject(a, b, alpha)))


def fpr_limit(reps: int, alpha: float = ALPHA, *, checks: int = 1, miss: float = 1e-3) -> float:
    """The highest rejection rate over `reps` simulated null comparisons that is still consistent
    with a true rate of `alpha`: the binomial quantile that a rule of level exactly `alpha` exceeds
    with probability `miss` / `checks` (Bonferroni over the checks made)."""
    from scipy import stats as sps

    return float(sps.binom.ppf(1 - miss / checks, reps, alpha)) / reps


def simulate(spreads: Iterable[Spread], *, ns: Sequence[int] = NS, effects: Sequence[float] = EFFECTS,
             reps: int = 20000, seed: int = 0) -> list[dict[str, object]]:
    """One row per (spread, noise shape, n): false-positive rate and power per effect."""
    rows = []
    for i, sp in enumerate(spreads):
        for shape, noise in (("log-normal", None), ("measured residuals", sp.residuals)):
            for n in ns:
                row: dict[str, object] = {"spread": sp.name, "log_sd": sp.log_sd, "noise": shape, "n": n}
                kw = dict(log_sd=sp.log_sd, reps=reps, noise=noise)
                row["fpr"] = rejection_rate(n, n, effect=0.0, seed=seed + 1000 * i + n, **kw)
                for e in effects:
                    row[f"power {e:.0%}"] = rejection_rate(n, n, effect=e, seed=seed + 1000 * i + 100 + n, **kw)
                rows.append(row)
    return rows


def markdown(rows: list[dict[str, object]], spreads: list[Spread], reps: int, seed: int) -> str:
    cols = [c for c in rows[0] if c not in ("log_sd",)]
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for r in rows:
        out.append("| " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    src = "; ".join(f"{s.name}: median log-sd {s.log_sd:.4f} over {s.cells} cells" for s in spreads)
    out += ["", f"_{METHOD}, two-sided, α={ALPHA:g}; {reps} simulated comparisons per cell, seed {seed}; "
                f"n repeats per side; spreads from the shipped records ({src})._"]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m harness.analyze.significance",
                                description="Error rates of the significance rule, simulated with the shipped studies' spreads.")
    p.add_argument("--simulate", action="store_true", help="print the false-positive / power table")
    p.add_argument("--reps", type=int, default=20000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--root", default=".", help="the repository root holding results/")
    a = p.parse_args(argv)
    if not a.simulate:
        p.print_help()
        return
    spreads = spreads_from_records(a.root)
    print(markdown(simulate(spreads, reps=a.reps, seed=a.seed), spreads, a.reps, a.seed), end="")


if __name__ == "__main__":
    main()
