"""Row and leg order of a study's tables: study.yaml's `model_order` / `workload_order` where given, then
the order the study's sweeps ran them (the scenario's order), then alphabetical."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import pandas as pd

from harness.analyze.dataset import Dataset, model_order, safe_name as _safe  # noqa: F401


class _HasDataset(Protocol):
    # Anything built over a Dataset (the canonical selection): order needs only these two.
    dataset: Dataset
    study: Any


def row_key(ds: Dataset) -> Callable[[str, str], tuple]:
    """Sort key of a (model, workload) row."""
    models = {m: i for i, m in enumerate(model_order(ds))}
    wl_study = {w: i for i, w in enumerate(ds.study.workload_order)}
    pairs = {(p[0], p[1]): i for i, p in enumerate(ds.sweep_order)}

    def key(model: str, workload: str) -> tuple:
        return (models.get(model, len(models)), model, wl_study.get(workload, len(wl_study)),
                pairs.get((_safe(model), workload), len(pairs)), workload)
    return key


def order_frame(canon: _HasDataset, df: pd.DataFrame) -> pd.DataFrame:
    """`df` (with model, workload and optionally leg columns) in table order."""
    if df.empty:
        return df
    key = row_key(canon.dataset)
    legs = {n: i for i, n in enumerate(canon.study.leg_names)}
    k = [key(m, w) + ((legs.get(lg, len(legs)),) if "leg" in df.columns else ())
         for m, w, lg in zip(df["model"], df["workload"], df["leg"] if "leg" in df.columns else df["model"])]
    return df.iloc[sorted(range(len(df)), key=lambda i: k[i])].reset_index(drop=True)


def leg_pairs(canon: Any) -> list[tuple[str, str]]:
    """(name, label) of every leg in study order, including legs only the records name."""
    legs = [(x.name, x.label) for x in canon.study.legs]
    seen = {n for n, _ in legs}
    for r in canon.expected.drop_duplicates("leg").itertuples():
        if r.leg not in seen:
            legs.append((r.leg, canon.study.label(r.leg)))
            seen.add(r.leg)
    return legs


_legs = leg_pairs  # the name the report code knows
