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


@dataclass(frozen=True, kw_only=True)
class TwoWay:
    """A complete crossed table without replication: rows (say, the arrival draws a grid repeats on every
    server) by columns (the servers), one value a cell. The residual is whatever one draw on one server
    does beyond the draw's and the server's effects: the probe measured again."""
    rows: int
    cols: int
    msr: float              # between-row mean square
    msc: float              # between-column mean square
    mse: float              # residual (interaction) mean square, (rows-1)(cols-1) degrees of freedom

    @property
    def row_sd(self) -> float:
        return math.sqrt(max(0.0, (self.msr - self.mse) / self.cols))

    @property
    def col_sd(self) -> float:
        return math.sqrt(max(0.0, (self.msc - self.mse) / self.rows))

    @property
    def residual_sd(self) -> float:
        return math.sqrt(self.mse)


def two_way(table: np.ndarray) -> TwoWay | None:
    """The random-effects mean squares of a rows x columns table with a value in every cell; None where it
    has fewer than two rows or two columns, or a missing value (an unbalanced table is not decomposed)."""
    y = np.asarray(table, dtype=float)
    if y.ndim != 2 or min(y.shape) < 2 or not np.isfinite(y).all():
        return None
    a, b = y.shape
    g = y.mean()
    rm, cm = y.mean(axis=1), y.mean(axis=0)
    res = y - rm[:, None] - cm[None, :] + g
    return TwoWay(rows=a, cols=b, msr=float(b * ((rm - g) ** 2).sum() / (a - 1)),
                  msc=float(a * ((cm - g) ** 2).sum() / (b - 1)), mse=float((res ** 2).sum() / ((a - 1) * (b - 1))))
