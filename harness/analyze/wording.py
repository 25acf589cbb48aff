"""Small wording helpers shared by the claims and the sections: counts with their nouns and verbs,
lists joined as prose, ratios and ranges as the report prints them."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from harness import workloads
from harness.analyze.tables import MISSING


def x(v: float) -> str:
    return f"{v:.2f}x"


def fmt(kind: str, v: float | None) -> str:
    return MISSING if v is None or pd.isna(v) else workloads.metric_of(kind).fmt(v)


def names(items: Sequence[str], conj: str = "and") -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {conj} " + items[-1]


def n(count: int, word: str, plural: str | None = None) -> str:
    return f"{count} {word if count == 1 else (plural or word + 's')}"


def v(count: int, one: str, many: str) -> str:
    """The verb agreeing with a count: v(1, "runs", "run")."""
    return one if count == 1 else many


def all_legs(count: int) -> str:
    return {2: "both legs", 3: "all three legs"}.get(count, f"all {count} legs")


def span_range(vals: Sequence[float]) -> str:
    lo, hi = min(vals), max(vals)
    return x(lo) if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}–{hi:.2f}x"


def span(ns: pd.Series) -> str:
    lo, hi = int(ns.min()), int(ns.max())
    return str(lo) if lo == hi else f"{lo}–{hi}"


def cap(text: str) -> str:
    return text[0].upper() + text[1:]
