"""Ratios between legs with the project's one significance rule (`harness.analyze.significance`).

A ratio is always computed from the samples, never stored. Each sample is one repeat's figure (one
run), the unit of replication. The point value is the ratio of the two sides' medians (the figures the
tables print per leg); the interval and the verdict are the rule's: Welch's t on log values at
α = 0.05, its t-interval of the ratio of geometric means, "faster"/"slower" exactly when that interval
excludes 1.0; "equivalent" (within the study's margin ±δ) exactly when it lies inside
[1/(1+δ), 1+δ]; else "undecided", with the repeats per side that would likely decide it (`needs`).
With one repeat on each side the verdict is "single pass"; with one on a side and more on the other,
"too few repeats" (the rule needs a variance on both sides). A table then controls its false
discovery rate across cells (`significance.decide_table`, applied by the tables).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import math

import numpy as np

from harness.analyze.significance import (ALPHA, DETECT, METHOD, MIN_N, NESTED_METHOD, PAIRED_METHOD, PAIRED_MIN, Test,
                                         Verdict, footnote, log_sd, n_needed, nested_paired, paired_log, welch_log)

__all__ = ["ALPHA", "METHOD", "PAIRED_METHOD", "BandSide", "Ratio", "Verdict", "band_side", "flat_across", "footnote",
           "paired_ratio", "ratio", "spread"]


@dataclass(frozen=True, kw_only=True)
class Ratio:
    value: float | None        # new/old for higher-is-better, old/new for lower-is-better: >1 is faster
    low: float | None = None   # the rule's interval, None without MIN_N repeats on each side
    high: float | None = None
    n_old: int = 0
    n_new: int = 0
    verdict: Verdict = "missing"
    spread_old: float | None = None  # (max-min)/median of each side's samples
    spread_new: float | None = None
    p: float | None = None           # the rule's two-sided p-value
    method: str = METHOD
    alpha: float = ALPHA
    needs: int | None = None         # "too few repeats" / "undecided": units that would likely decide it
    margin: float | None = None      # the equivalence margin δ tested against
    test: Test | None = None         # the rule's full result, for the table's error control
    unit: str = "repeat"             # what `needs` and n count: repeats per side, pairs, engine blocks

    def label(self) -> str:
        return ratio_label(self.value, self.low, self.high)


def ratio_label(value: float | None, low: float | None, high: float | None) -> str:
    """"1.07x [1.03, 1.11]": a ratio and its interval as every view prints them ("—" without a ratio)."""
    if value is None:
        return "—"
    s = f"{value:.2f}x"
    if low is not None and high is not None:
        s += f" [{low:.2f}, {high:.2f}]"
    return s


def spread(samples: Sequence[float]) -> float | None:
    a = np.asarray(samples, dtype=float)
    return float((a.max() - a.min()) / np.median(a)) if len(a) > 1 else None


def ratio(old: Sequence[float], new: Sequence[float], *, higher_is_better: bool = True,
          confidence: float = 1 - ALPHA, margin: float | None = None, resolution: float = 0.0) -> Ratio:
    """new vs old by the rule; `resolution` as `significance.welch_log`'s (a capacity search's rel_tol)."""
    old_a, new_a = np.asarray(old, dtype=float), np.asarray(new, dtype=float)
    if len(old_a) == 0 or len(new_a) == 0:
        return Ratio(value=None, n_old=len(old_a), n_new=len(new_a), verdict="missing")
    num, den = (new_a, old_a) if higher_is_better else (old_a, new_a)
    value = float(np.median(num) / np.median(den))
    alpha = 1 - confidence
    common = dict(n_old=len(old_a), n_new=len(new_a), spread_old=spread(old_a), spread_new=spread(new_a), alpha=alpha)
    if len(old_a) < MIN_N and len(new_a) < MIN_N:
        return Ratio(value=value, verdict="single pass", **common)
    if len(old_a) < MIN_N or len(new_a) < MIN_N:
        return Ratio(value=value, verdict="too few repeats",
                     needs=n_needed(log_sd(old_a, new_a), DETECT, alpha=alpha), **common)
    t = welch_log(num, den, alpha=alpha, margin=margin, resolution=resolution)
    return Ratio(value=value, low=t.low, high=t.high, verdict=t.verdict, p=t.p, needs=t.needs, margin=margin, test=t,
                 **common)


def nested_ratio(blocks: Sequence[Sequence[tuple[float, float]]], *, higher_is_better: bool = True,
                 confidence: float = 1 - ALPHA, margin: float | None = None, engine_sd: float | None = None) -> Ratio:
    """new vs old from the paired, interleaved design: `blocks[b]` lists block b's (old, new) pass
    pairs, one per round. The rule is `significance.nested_paired`; the point value is its geometric
    mean ratio (oriented so that > 1 is faster); n_old / n_new count pairs."""
    logs = [[math.log(n / o) if higher_is_better else math.log(o / n) for o, n in b] for b in blocks]
    res = nested_paired(logs, alpha=1 - confidence, margin=margin, engine_sd=engine_sd)
    t = res.test
    olds = [o for b in blocks for o, _ in b]
    news = [n for b in blocks for _, n in b]
    value = None if not res.pairs else t.ratio
    low = None if not math.isfinite(t.low) else t.low
    high = None if not math.isfinite(t.high) else t.high
    return Ratio(value=value, low=low, high=high, n_old=res.pairs, n_new=res.pairs, verdict=t.verdict,
                 spread_old=spread(olds) if olds else None, spread_new=spread(news) if news else None,
                 p=t.p if res.pairs else None, method=NESTED_METHOD, alpha=1 - confidence, needs=t.needs,
                 margin=margin, test=t, unit=t.unit)


def paired_ratio(old: Sequence[float], new: Sequence[float], *, confidence: float = 1 - ALPHA) -> Ratio:
    """new ÷ old where old[i] and new[i] are one repeat's back-to-back pair (higher is better on both):
    the paired rule's geometric mean ratio, interval and verdict. Fewer than PAIRED_MIN pairs: "single
    pass" for one, "too few repeats" for two, "missing" for none (an unpaired comparison is `ratio`'s
    business)."""
    old_a, new_a = np.asarray(old, dtype=float), np.asarray(new, dtype=float)
    common = dict(n_old=len(old_a), n_new=len(new_a), spread_old=spread(old_a), spread_new=spread(new_a),
                  alpha=1 - confidence, method=PAIRED_METHOD)
    if len(old_a) != len(new_a):
        raise ValueError(f"paired_ratio: {len(old_a)} and {len(new_a)} values are not pairs")
    if len(old_a) == 0:
        return Ratio(value=None, verdict="missing", **common)
    if len(old_a) < PAIRED_MIN:
        value = float(np.exp(np.mean(np.log(new_a) - np.log(old_a))))
        return Ratio(value=value, verdict="single pass" if len(old_a) == 1 else "too few repeats",
                     needs=None if len(old_a) == 1 else PAIRED_MIN, **common)
    t = paired_log(new_a, old_a, alpha=1 - confidence)
    return Ratio(value=t.ratio, low=t.low, high=t.high, verdict=t.verdict, p=t.p, **common)


# The flat band of the report's claims: a ratio within 1 ± band (bounds included) is "flat". Decided
# here, beside the interval verdict, so that the claims do not re-derive it.
BandSide = Literal["below", "within", "above"]


def band_side(value: float, band: float) -> BandSide:
    """Where a ratio lies against the flat band 1 ± band."""
    if 1 - band <= value <= 1 + band:
        return "within"
    return "below" if value < 1 - band else "above"


def flat_across(values: Sequence[float], band: float) -> bool:
    """Whether figures of one row on several legs lie within `band` of each other (largest over
    smallest, minus 1)."""
    return max(values) / min(values) - 1 <= band
