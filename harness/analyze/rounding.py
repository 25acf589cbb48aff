"""What the rounding of a printed figure allows: a transcribed record holds the figure as the source
printed it ("21,943" tok/s, "0.18" ms/tok), so the true value lies anywhere within half a unit of its
last printed digit, and a ratio recomputed from two such figures lies within the interval those
bounds allow. Where the source printed its own ratio (computed from its unrounded numbers), the
printed ratio is read back from the study's verbatim tables (`published/<kind>.tsv`) so a report can
show both and flag a disagreement that rounding cannot explain.

A measured figure carries no rounding: every function here returns None for it.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from harness.workloads.base import Metric


def half_unit(printed: str) -> float:
    """Half a unit of the last printed digit: "21,943" -> 0.5, "0.18" -> 0.005."""
    digits = printed.strip().rstrip("x").replace(",", "")
    decimals = len(digits.split(".", 1)[1]) if "." in digits else 0
    return 0.5 * 10.0 ** -decimals


def bounds(value: float, metric: Metric) -> tuple[float, float]:
    """The interval a figure printed with the metric's format stands for."""
    h = half_unit(metric.fmt(value))
    return value - h, value + h


def ratio_bounds(old: float, new: float, metric: Metric) -> tuple[float, float]:
    """The interval of the ratio (oriented as the tables orient it: above 1 the newer leg is faster)
    that two rounded figures allow."""
    (o_lo, o_hi), (n_lo, n_hi) = bounds(old, metric), bounds(new, metric)
    if metric.higher_is_better:
        return n_lo / o_hi, n_hi / o_lo
    return o_lo / n_hi, o_hi / n_lo


@dataclass(frozen=True, kw_only=True)
class Printed:
    """A ratio as the source printed it, and whether it lies outside what rounding allows."""

    value: float
    low: float       # the recomputed rounding interval
    high: float

    @property
    def disagrees(self) -> bool:
        # The printed ratio is itself rounded to two decimals: compare its own interval with ours.
        return self.value + 0.005 < self.low or self.value - 0.005 > self.high


def _float(text: str) -> float | None:
    t = text.strip().rstrip("x").replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def printed_ratios(study_dir: Path, kind: str, leg_labels: list[str]) -> dict[tuple[str, str, str, str], float]:
    """(model, workload, old label, new label) -> the ratio the source printed, from
    `published/<kind>.tsv` (columns: model, tp, workload, one per leg label, then one ratio per pair
    of consecutive legs, as the source printed its tables). Empty when the file is absent."""
    path = study_dir / "published" / f"{kind}.tsv"
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    if not rows:
        return {}
    head = rows[0]
    legs = [lb for lb in leg_labels if lb in head]
    pairs = list(zip(legs, legs[1:]))
    first_ratio = max(head.index(lb) for lb in legs) + 1 if legs else len(head)
    out: dict[tuple[str, str, str, str], float] = {}
    for r in rows[1:]:
        if len(r) < first_ratio:
            continue
        model, workload = r[0].strip().strip("`"), r[2].strip()
        for j, (a, b) in enumerate(pairs):
            if first_ratio + j < len(r):
                v = _float(r[first_ratio + j])
                if v is not None:
                    out[(model, workload, a, b)] = v
    return out

