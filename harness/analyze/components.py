"""One-way random-effects variance components: values in groups (a paired cell's log pair ratios in its
engine blocks; a load's p99 TTFTs on the servers that measured it), their mean squares within and between
groups, and the two standard deviations by the method of moments. Unequal group sizes take n0, the
effective group size of the random-effects estimator (Searle)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class OneWay:
    n: int                  # values
    groups: int
    grand: float            # the mean of every value
    means: np.ndarray       # each group's mean, in the groups' order
    msw: float | None       # within-group mean square; None where no group holds two values
    msb: float | None       # between-group mean square; None with one group
    n0: float | None        # effective values per group; None with one group

    @property
    def dfw(self) -> int:
        return self.n - self.groups

    @property
    def dfb(self) -> int:
        return self.groups - 1

    @property
    def within_sd(self) -> float | None:
        return math.sqrt(self.msw) if self.msw is not None else None

    @property
    def between_sd(self) -> float | None:
        """The groups' own sd beyond what their values' scatter explains (0 where it explains all)."""
        if self.msw is None or self.msb is None:
            return None
        return math.sqrt(max(0.0, (self.msb - self.msw) / self.n0))


def one_way(groups: Sequence[Sequence[float]]) -> OneWay:
    """The mean squares of `groups` (empty groups left out); at least one value."""
    bl = [np.asarray(b, dtype=float) for b in groups if len(b)]
    allv = np.concatenate(bl)
    n, k = len(allv), len(bl)
    means = np.array([b.mean() for b in bl])
    sizes = np.array([len(b) for b in bl], dtype=float)
    grand = float(allv.mean())
    ssw = float(sum(((b - b.mean()) ** 2).sum() for b in bl))
    ssb = float((sizes * (means - grand) ** 2).sum())
    return OneWay(n=n, groups=k, grand=grand, means=means,
                  msw=ssw / (n - k) if n > k else None, msb=ssb / (k - 1) if k > 1 else None,
                  n0=(n - float((sizes ** 2).sum()) / n) / (k - 1) if k > 1 else None)
