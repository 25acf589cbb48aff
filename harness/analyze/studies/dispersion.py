"""Dispersion and ratios of every model and leg of a study ("Known limitations"): canonical repeats,
per-cell spread, leg-pair ratios with Welch t intervals, and coverage."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from harness import workloads
from harness.analyze.canonical import Canonical, canonicalize
from harness.analyze.dataset import Dataset
from harness.analyze.stats import ratio, spread
from harness.analyze.tables import model_order, short_labels
from harness.core.errors import UserError
from harness.analyze.studies.common import in_order, mad, names


def series_with(ds: Dataset, arm: str = "default") -> list[str]:
    """The study's series that hold runs of `arm`, main series first."""
    df = ds.records
    found = list(dict.fromkeys(df.loc[df["arm"] == arm, "series"]))
    return in_order(found, [ds.study.main_series])


def canonical_all(ds: Dataset, *, series: str | Sequence[str] = (), arm: str = "default",
                  allow_reused: bool | None = None) -> list[Canonical]:
    """One canonical selection per series (default: every series with runs of `arm`);
    `allow_reused=None` takes the study's declaration (harness.analyze.canonical)."""
    chosen = names(series) or tuple(series_with(ds, arm))
    return [canonicalize(ds, series=s, arm=arm, allow_reused=allow_reused) for s in chosen]


def exclusions_frame(canons: Canonical | Sequence[Canonical]) -> pd.DataFrame:
    """Every run the canonical rule left out, with its reason, across the selections."""
    frames = [c.exclusions.assign(series=c.series) for c in ([canons] if isinstance(canons, Canonical) else canons)]
    cols = ["series", "leg", "model", "workload", "repeat", "reason"]
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)


def samples_frame(canons: Canonical | Sequence[Canonical]) -> pd.DataFrame:
    """One row per canonical repeat: series, model, workload, kind, leg, value, and its deviation from
    its cell's median (`rel_dev`, so models of very different speed share one axis)."""
    rows = []
    for c in ([canons] if isinstance(canons, Canonical) else canons):
        runs = c.runs
        med = {(r.leg, r.model, r.workload): r.value for r in c.cells.itertuples()}
        for r in runs.to_dict("records"):
            v = r[workloads.metric_of(r["kind"]).key]
            m = med.get((r["leg"], r["model"], r["workload"]))
            rows.append({"series": c.series, "model": r["model"], "workload": r["workload"], "kind": r["kind"],
                         "leg": r["leg"], "leg_label": c.study.label(r["leg"]), "repeat": r["repeat"],
                         "value": float(v), "median": m, "rel_dev": float(v) / m - 1 if m else None,
                         "provenance": r["provenance"]})
    df = pd.DataFrame(rows, columns=["series", "model", "workload", "kind", "leg", "leg_label", "repeat",
                                     "value", "median", "rel_dev", "provenance"])
    return _in_table_order(df, [canons] if isinstance(canons, Canonical) else list(canons))


def dispersion_frame(canons: Canonical | Sequence[Canonical]) -> pd.DataFrame:
    """One row per canonical cell: n, median, min, max, spread (range/median), MAD/median, CV."""
    rows = []
    for c in ([canons] if isinstance(canons, Canonical) else canons):
        for r in c.cells.itertuples():
            a = np.asarray(r.samples, dtype=float)
            rows.append({"series": c.series, "model": r.model, "workload": r.workload, "kind": r.kind,
                         "leg": r.leg, "leg_label": r.leg_label, "n": r.n, "median": r.value,
                         "min": float(a.min()), "max": float(a.max()), "spread": spread(a), "mad": mad(a),
                         "cv": float(a.std(ddof=1) / a.mean()) if len(a) > 1 else None,
                         "provenance": r.provenance})
    df = pd.DataFrame(rows, columns=["series", "model", "workload", "kind", "leg", "leg_label", "n", "median",
                                     "min", "max", "spread", "mad", "cv", "provenance"])
    return _in_table_order(df, [canons] if isinstance(canons, Canonical) else list(canons))


def ratio_frame(canons: Canonical | Sequence[Canonical], *, pairs: str = "consecutive") -> pd.DataFrame:
    """One row per (series, model, workload, leg pair): the ratio (> 1: the newer leg is faster), the rule's
    95% interval and the verdict, as the series' verdict objects hold them (`harness.analyze.verdicts`: the
    ones every table prints). `pairs`: "consecutive" legs in study order, or "all" pairs (older first)."""
    from harness.analyze.verdicts import study_verdicts

    from itertools import combinations, pairwise

    if pairs not in ("consecutive", "all"):
        raise UserError(f"pairs {pairs!r}: expected \"consecutive\" or \"all\"")
    rows = []
    for c in ([canons] if isinstance(canons, Canonical) else canons):
        legs = [lg for lg in c.study.leg_names if lg in set(c.cells["leg"])]
        legs += [lg for lg in dict.fromkeys(c.cells["leg"]) if lg not in legs]
        pair_list = list(pairwise(legs)) if pairs == "consecutive" else list(combinations(legs, 2))
        short = short_labels([c.study.label(lg) for lg in legs])
        cells = {(r["leg"], r["model"], r["workload"]): r for r in c.cells.to_dict("records")}
        keys = list(dict.fromkeys((r["model"], r["workload"], r["kind"]) for r in cells.values()))
        sv = study_verdicts(c)
        for model, wl, kind in keys:
            for old, new in pair_list:
                a, b = cells.get((old, model, wl)), cells.get((new, model, wl))
                if a is None or b is None:
                    continue
                v = sv.get(kind, model, wl, old, new)
                if v is None:
                    continue
                ci = v.interval not in (None, "rounding")
                lo, ln = c.study.label(old), c.study.label(new)
                rows.append({"series": c.series, "model": model, "workload": wl, "kind": kind, "old": old,
                             "new": new, "pair": f"{short[ln]}/{short[lo]}", "ratio": v.ratio,
                             "low": v.low if ci else None, "high": v.high if ci else None, "verdict": v.verdict,
                             "n_old": v.n_old, "n_new": v.n_new,
                             "provenance": ",".join(sorted({a["provenance"], b["provenance"]}))})
    df = pd.DataFrame(rows, columns=["series", "model", "workload", "kind", "old", "new", "pair", "ratio", "low",
                                     "high", "verdict", "n_old", "n_new", "provenance"])
    return _in_table_order(df, [canons] if isinstance(canons, Canonical) else list(canons))


def _in_table_order(df: pd.DataFrame, canons: list[Canonical]) -> pd.DataFrame:
    """Rows in the study's table order: series as given, then model and workload (harness.analyze.tables)."""
    if df.empty or not canons:
        return df
    from harness.analyze.tables import row_key

    key = row_key(canons[0].dataset)
    series = {c.series: i for i, c in enumerate(canons)}
    order = sorted(range(len(df)), key=lambda i: (series.get(df["series"].iat[i], len(series)),
                                                   key(df["model"].iat[i], df["workload"].iat[i])))
    return df.iloc[order].reset_index(drop=True)


def coverage_frame(ds: Dataset, *, series: str | None = None, arm: str = "default",
                   allow_reused: bool | None = None, canon: Canonical | None = None) -> pd.DataFrame:
    """model x leg: "ok" (a canonical measurement for every workload), "partial", "failed" (no run
    passed), "excluded" (runs passed but none is canonical) or "not run"; for a coverage heat map.
    `canon`: a selection already made (the report's, with its escapes), instead of making one."""
    if canon is not None:
        series, arm = canon.series, canon.arm
    series = series or ds.study.main_series
    c = canon or canonicalize(ds, series=series, arm=arm, allow_reused=allow_reused)
    recs = ds.records[(ds.records["series"] == series) & (ds.records["arm"] == arm)]
    models = [m for m in model_order(ds) if m in set(recs["model"])]
    legs = [lg for lg in ds.study.leg_names if lg in set(recs["leg"])]
    legs += [lg for lg in dict.fromkeys(recs["leg"]) if lg not in legs]
    wanted = recs.groupby("model")["workload"].agg(set)
    have = c.cells.groupby(["leg", "model"])["workload"].agg(set) if len(c.cells) else pd.Series(dtype=object)
    out = pd.DataFrame("not run", index=models, columns=[ds.study.label(lg) for lg in legs], dtype=object)
    for lg in legs:
        for m in models:
            ran = recs[(recs["leg"] == lg) & (recs["model"] == m)]
            if ran.empty:
                continue
            got = have.get((lg, m), set())
            if got >= wanted[m]:
                state = "ok"
            elif got:
                state = "partial"
            elif (ran["status"] == "ok").any():
                state = "excluded"
            else:
                state = "failed"
            out.at[m, ds.study.label(lg)] = state
    out.index.name = "model"
    return out
