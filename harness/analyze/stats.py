"""Ratios between legs with bootstrap confidence intervals and a verdict.

A ratio is always computed from the samples, never stored. With one sample per side there is no
interval: the verdict is "single pass". Otherwise the ratio of medians gets a percentile bootstrap
95% interval (scipy.stats.bootstrap, resampling each side independently); an interval that excludes
1.0 is a difference, one that contains it is "no difference detected" (never "no difference").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Verdict = Literal["faster", "slower", "no difference detected", "single pass", "missing"]


@dataclass(frozen=True, kw_only=True)
class Ratio:
    value: float | None        # new/old for higher-is-better, old/new for lower-is-better: >1 is faster
    low: float | None = None   # 95% CI bounds, None for a single pass
    high: float | None = None
    n_old: int = 0
    n_new: int = 0
    verdict: Verdict = "missing"
    spread_old: float | None = None  # (max-min)/median of each side's samples
    spread_new: float | None = None

    def label(self) -> str:
        if self.value is None:
            return "—"
        s = f"{self.value:.2f}x"
        if self.low is not None and self.high is not None:
            s += f" [{self.low:.2f}, {self.high:.2f}]"
        return s


def spread(samples: Sequence[float]) -> float | None:
    a = np.asarray(samples, dtype=float)
    return float((a.max() - a.min()) / np.median(a)) if len(a) > 1 else None


def ratio(old: Sequence[float], new: Sequence[float], *, higher_is_better: bool = True,
          confidence: float = 0.95, n_resamples: int = 4000, seed: int = 0) -> Ratio:
    old_a, new_a = np.asarray(old, dtype=float), np.asarray(new, dtype=float)
    if len(old_a) == 0 or len(new_a) == 0:
        return Ratio(value=None, n_old=len(old_a), n_new=len(new_a), verdict="missing")
    num, den = (new_a, old_a) if higher_is_better else (old_a, new_a)
    value = float(np.median(num) / np.median(den))
    common = dict(n_old=len(old_a), n_new=len(new_a), spread_old=spread(old_a), spread_new=spread(new_a))
    if len(old_a) < 2 or len(new_a) < 2:
        return Ratio(value=value, verdict="single pass", **common)
    from scipy import stats as sps  # imported here: a CLI start should not pay for scipy

    res = sps.bootstrap((num, den), lambda a, b, axis=-1: np.median(a, axis=axis) / np.median(b, axis=axis),
                        vectorized=True, paired=False, confidence_level=confidence, n_resamples=n_resamples,
                        method="percentile", random_state=np.random.default_rng(seed))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    verdict: Verdict = "faster" if low > 1 else "slower" if high < 1 else "no difference detected"
    return Ratio(value=value, low=low, high=high, verdict=verdict, **common)


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
