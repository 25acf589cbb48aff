"""Does one engine serving several workloads change any number? Per (leg, model, workload): the
ratio per-group ÷ per-run over the repeats of each mode, by the project's one significance rule.

The two modes are measured as two series of one study (`scenarios/cpu-reuse-per-run.yaml` and
`cpu-reuse-per-group.yaml`, interleaved repeat by repeat). A ratio is oriented so that above 1.00x the
per-group engine measured the workload faster; an interval that excludes 1.00 means reuse changed
the number, and the report must say why or the cause be fixed.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness import workloads
from harness.analyze.dataset import Dataset
from harness.analyze.fmt import fmt_share
from harness.analyze.stats import Ratio, ratio
from harness.core.errors import UserError

PER_RUN, PER_GROUP = "per-run", "per-group"


@dataclass(frozen=True, kw_only=True)
class ReuseRow:
    leg: str
    model: str
    workload: str
    arm: str
    metric: str
    per_run: tuple[float, ...]
    per_group: tuple[float, ...]
    ratio: Ratio
    timed_share_per_run: float | None
    timed_share_per_group: float | None


def reuse_table(ds: Dataset, *, per_run: str = PER_RUN, per_group: str = PER_GROUP) -> list[ReuseRow]:
    """One row per (leg, model, workload, arm) measured in both series, in the study's order.

    Only like is compared with like: the same arm on both sides (a crosscheck's or an ablation's arm
    changes what is measured), and never a profiled run (the profiler's cost is in its number)."""
    if per_run == per_group:
        raise UserError(f"{ds.root}: --per-run and --per-group name the same series ({per_run!r}); a series "
                        f"compared with itself says nothing")
    rec = ds.records
    df = rec[(rec["status"] == "ok") & rec["series"].isin([per_run, per_group]) & ~rec["profiled"].fillna(False).astype(bool)]
    rows: list[ReuseRow] = []
    key = {m: i for i, m in enumerate(ds.model_order())}
    for (leg, model, wl, arm), g in sorted(df.groupby(["leg", "model", "workload", "arm"]),
                                           key=lambda kv: (kv[0][0], key.get(kv[0][1], 0), kv[0][2], kv[0][3])):
        kind = g["kind"].dropna().iloc[0] if g["kind"].notna().any() else None
        if kind not in workloads.KINDS:
            continue
        metric = workloads.metric_of(kind)
        a = g[g["series"] == per_run].sort_values("repeat")
        b = g[g["series"] == per_group].sort_values("repeat")
        if a.empty or b.empty:
            continue
        va, vb = tuple(a[metric.key].astype(float)), tuple(b[metric.key].astype(float))
        rows.append(ReuseRow(leg=leg, model=model, workload=wl, arm=arm, metric=metric.key, per_run=va, per_group=vb,
                             ratio=ratio(va, vb, higher_is_better=metric.higher_is_better),
                             timed_share_per_run=_share(ds, a), timed_share_per_group=_share(ds, b)))
    return rows


def _share(ds: Dataset, runs: pd.DataFrame) -> float | None:
    ok = runs.dropna(subset=["timed_s", "wall_s"])
    return float(ok["timed_s"].sum() / ok["wall_s"].sum()) if len(ok) and ok["wall_s"].sum() else None


def reuse_frame(rows: list[ReuseRow]) -> pd.DataFrame:
    return pd.DataFrame([{
        "leg": r.leg, "model": r.model, "workload": r.workload, "arm": r.arm, "metric": r.metric,
        "n per-run": len(r.per_run), "n per-group": len(r.per_group),
        "per-group ÷ per-run": r.ratio.value, "low": r.ratio.low, "high": r.ratio.high, "verdict": r.ratio.verdict,
        "spread per-run": r.ratio.spread_old, "spread per-group": r.ratio.spread_new,
        "timed share per-run": r.timed_share_per_run, "timed share per-group": r.timed_share_per_group,
    } for r in rows])


def reuse_md(rows: list[ReuseRow]) -> str:
    lines = ["| leg | model | workload | n (run / group) | per-group ÷ per-run [95% CI] | verdict | "
             "spread run / group | timed share run / group |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ci = f" [{r.ratio.low:.3f}, {r.ratio.high:.3f}]" if r.ratio.low is not None else ""
        val = "—" if r.ratio.value is None else f"{r.ratio.value:.3f}"
        wl = r.workload if r.arm == "default" else f"{r.workload} ({r.arm})"
        lines.append(f"| {r.leg} | `{r.model}` | {wl} | {len(r.per_run)} / {len(r.per_group)} | {val}{ci} | "
                     f"{r.ratio.verdict} | {fmt_share(r.ratio.spread_old)} / {fmt_share(r.ratio.spread_new)} | "
                     f"{fmt_share(r.timed_share_per_run)} / {fmt_share(r.timed_share_per_group)} |")
    lines.append("")
    lines.append("_Above 1.00x the workload measured faster on an engine that had served the group's earlier "
                 "workloads. Ratios of medians over the repeats of each mode; the verdict is the project's "
                 "significance rule (harness.analyze.stats)._")
    return "\n".join(lines) + "\n"
