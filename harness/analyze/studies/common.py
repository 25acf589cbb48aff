"""Helpers every diagnostic study shares: list parameters as papermill passes them, study folders,
picking a series / model / leg pair with a one-line error, the scenario's order, number formats."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness import workloads
from harness.analyze.dataset import Dataset
from harness.analyze.tables import MISSING
from harness.core import paths
from harness.core.errors import UserError
from harness.schema.record import RunRecord


def names(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """A list parameter as given on a papermill command line: "a,b", ["a", "b"], "" or None."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(x.strip() for x in value.split(",") if x.strip())
    return tuple(str(x) for x in value)


def study_path(results_dir: str | Path) -> Path:
    """A study folder given relative to the project root (how the notebooks name them) or absolute."""
    p = Path(results_dir)
    if p.is_absolute() or p.exists():
        return p
    return paths.PROJ_ROOT / p


def is_present(v: object) -> bool:
    return v is not None and not (isinstance(v, float) and np.isnan(v))


def record_of(ds: Dataset, run_dir: str) -> RunRecord:
    return ds.record(run_dir)


def run_log(ds: Dataset, run_dir: str) -> str:
    return ds.run_log(run_dir)


def fmt_value(v: float | None, kind: str) -> str:
    if not is_present(v):
        return MISSING
    return workloads.metric_of(kind).fmt(float(v))


def fmt_pct(v: float | None, digits: int = 1) -> str:
    return MISSING if not is_present(v) else f"{v * 100:.{digits}f}%"


def mad(samples: Sequence[float]) -> float | None:
    """Median absolute deviation from the median, relative to the median (robust to one outlier)."""
    a = np.asarray(samples, dtype=float)
    if len(a) < 2:
        return None
    med = float(np.median(a))
    return float(np.median(np.abs(a - med)) / med)


def scenario_order(scenario: str | None) -> tuple[list[str], list[str], list[str]]:
    """(models, workloads, arms) in the scenario's order; empty lists without a scenario."""
    if not scenario:
        return [], [], []
    from harness.measure.scenario import load_scenario

    sc = load_scenario(scenario)
    return [m.name for m in sc.models], [w.name for w in sc.workloads], [a.name for a in sc.arms]


def scenario_series(scenario: str | None, default: str = "") -> str:
    """The series a scenario's sweep records under (its `series:`, else its name)."""
    if not scenario:
        return default
    from harness.measure.scenario import load_scenario

    return load_scenario(scenario).series_tag


def in_order(found: Sequence[str], preferred: Sequence[str]) -> list[str]:
    found = list(dict.fromkeys(found))
    return [x for x in preferred if x in found] + [x for x in found if x not in preferred]


def series_records(ds: Dataset, series: str) -> pd.DataFrame:
    df = ds.records
    sel = df[df["series"] == series]
    if sel.empty:
        have = ", ".join(sorted(set(df["series"]))) or "none"
        raise UserError(f"{ds.root}: no records of series {series!r} (series there: {have})")
    return sel


def pick_one(values: Sequence[str], wanted: str | None, what: str, where: str) -> str:
    values = list(dict.fromkeys(values))
    if wanted:
        if wanted not in values:
            raise UserError(f"{where}: no {what} {wanted!r} (has: {', '.join(values)})")
        return wanted
    if len(values) != 1:
        raise UserError(f"{where}: {len(values)} {what}s ({', '.join(values)}); name one")
    return values[0]


def leg_pair(ds: Dataset, present: Sequence[str], legs: Sequence[str], where: str) -> tuple[str, str]:
    """(old, new): the legs given, or the study's two legs that the records have, in study order."""
    if legs:
        for lg in legs:
            if lg not in present:
                raise UserError(f"{where}: no records of leg {lg!r} (has: {', '.join(present)})")
        if len(legs) != 2:
            raise UserError(f"{where}: legs: expected two (old,new), got {len(legs)}")
        return legs[0], legs[1]
    ordered = in_order(present, ds.study.leg_names)
    if len(ordered) != 2:
        raise UserError(f"{where}: {len(ordered)} legs ({', '.join(ordered)}); name two as legs=old,new")
    return ordered[0], ordered[1]


def why_failed(row: dict[str, Any]) -> str:
    """A failed run's cause in one line: the line its failure signature matched, where one did (it
    names the root cause even when vLLM's wrapper exception came last), else the recorded reason."""
    sig, err, reason = row.get("failure_signature"), row.get("failure_error"), row.get("failure_reason")
    if isinstance(sig, str) and sig != "unknown" and isinstance(err, str) and err:
        return err
    return reason if isinstance(reason, str) and reason else (err if isinstance(err, str) else "")
