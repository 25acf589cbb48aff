"""The canonical measurement per (leg, model, workload), by a written rule.

Tables, comparisons, the manifest and the export are built from these and nothing else. Every run
of the main series that is not used is listed with the reason. Repeats measured on different
devices, hosts or leg environments are never merged (pyperf's rule): `MixedRunsError`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness import workloads
from harness.analyze.dataset import Dataset, StudyMeta
from harness.analyze.stats import spread
from harness.core.errors import MixedRunsError, UserError

# Each workload kind names the metric its tables use (harness.workloads).

RULE = """\
For each (leg, model, workload) of series `{series}`, arm `{arm}`, the canonical measurement is the
median of every repeat that passes all of these checks, in this order; the samples are kept.

1. The run finished with status `ok` and recorded the workload's metric: total tokens per second
   for a throughput workload, milliseconds per output token for a latency workload.
2. It was not measured under `--allow-dirty`, and not profiled (a profiled run's throughput includes
   the profiler's cost; its profile is evidence of where the time went, not a number to compare).
3. {reused_rule}
4. It did the same work as the other legs: `num_seqs` and `output_tokens`, where recorded, equal the
   value a strict majority of the (model, workload)'s runs recorded. Without such a majority every
   run of that (model, workload) is excluded: the legs cannot be compared.

The runs left must then have run the same prompts: `prompts_sha256`, `prompt_tokens`, `num_seqs` and
`output_tokens`, wherever recorded, are equal across every leg of a (model, workload). {work_rule}

Repeats of one (leg, model, workload) measured on different devices, hosts or leg environments
(compat id) are never merged: building the tables is refused. Runs of other series and arms are
supporting evidence, not canonical. Ratios are computed from the canonical samples, never stored."""

REUSED_STRICT = ("It was measured by the sweep that lists it, not reused from an earlier sweep by "
                 "`--resume` (the latest sweep index in `sweeps/` that lists the run decides).")
REUSED_ALLOWED = ("Runs reused by `--resume` are accepted (`allow_reused=True`); such runs are marked in "
                  "the table below.")

WORK_STRICT = ("Otherwise building the tables is refused, naming two records that differ "
               "(`--allow-different-work` or `allow_different_work: true` in study.yaml compares them anyway).")
WORK_ALLOWED = ("Runs that differ are compared anyway (`allow_different_work=True`); the differences are "
                "listed under \"Different work\" below.")
# The work two legs must share before they are compared, in the order a difference is reported.
WORK_KEYS = ("prompts_sha256", "prompt_tokens", "num_seqs", "output_tokens")


class DifferentWorkError(UserError):
    """Two legs about to be compared ran different prompts or token counts."""


# What may differ between repeats that are merged: nothing of these. `machine` (a GPU machine by its
# GPUs' uuids) unless study.yaml declares `allow_mixed_machines: true`: a lent machine's host name and
# card model say nothing about which machine it was, and machines of one card model differ by more
# than most version gaps (results/h100-capacity-clients, results/h100-capacity-1pct).
MIXED_KEYS = ("device", "host", "compat_id")


@dataclass(frozen=True, kw_only=True)
class Canonical:
    """`cells`: one row per (leg, model, workload) that has a canonical measurement.
    `runs`: the records behind them. `exclusions`: every run of the series/arm left out, and why.
    `expected`: every (leg, model, workload) the series holds a run for, measured or not."""

    study: StudyMeta
    series: str
    arm: str
    rule: str
    cells: pd.DataFrame
    runs: pd.DataFrame
    exclusions: pd.DataFrame
    expected: pd.DataFrame
    dataset: Dataset
    different_work: tuple[str, ...] = ()   # compared anyway under allow_different_work, one line each

    @property
    def provenances(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.runs["provenance"]))) if len(self.runs) else ()

    def samples(self, leg: str, model: str, workload: str) -> tuple[float, ...]:
        hit = self.cells[(self.cells["leg"] == leg) & (self.cells["model"] == model)
                         & (self.cells["workload"] == workload)]
        return tuple(hit["samples"].iloc[0]) if len(hit) else ()


def _fmt(v: object) -> str:
    if isinstance(v, (int, float, np.integer, np.floating)) and float(v).is_integer():
        return f"{int(v):,}"
    return str(v)


def _searches(g: pd.DataFrame) -> bool:
    """A capacity search sends as many requests as its path of probes needs, and legs take different
    paths: its same work is its declaration (in the fingerprint), not its request count or hash."""
    return "workload_spec" in g.columns and bool(g["workload_spec"].map(
        lambda s: isinstance(s, dict) and s.get("capacity") is not None).all())


def _work_exclusions(cand: pd.DataFrame) -> dict[int, str]:
    """Index -> reason for runs whose work differs from the (model, workload)'s majority."""
    out: dict[int, str] = {}
    for (model, workload), g in cand.groupby(["model", "workload"], sort=False):
        if _searches(g):
            continue
        for col in ("num_seqs", "output_tokens"):
            vals = g[col].dropna()
            if vals.nunique() <= 1:
                continue
            counts = vals.value_counts()
            top, n = counts.index[0], int(counts.iloc[0])
            by_leg = ", ".join(f"{r.leg_label}: {_fmt(getattr(r, col))}" for r in g.dropna(subset=[col]).itertuples())
            if n * 2 > len(vals):
                for idx, v in vals.items():
                    if v != top and idx not in out:
                        out[idx] = f"different work: {col} {_fmt(v)}, the other runs {_fmt(top)} ({by_leg})"
            else:
                for idx in vals.index:
                    out.setdefault(idx, f"different work and no majority: {col} differs across legs ({by_leg})")
    return out


def _different_work(used: pd.DataFrame, series: str, arm: str) -> list[str]:
    """One line per (model, workload) whose remaining runs disagree on WORK_KEYS, naming two records."""
    out = []
    keys = [k for k in WORK_KEYS if k in used.columns]
    for (model, workload), g in used.groupby(["model", "workload"], sort=False):
        if _searches(g):
            continue
        for col in keys:
            have = [(r["leg"], r[col], r["run_dir"]) for r in g.to_dict("records") if _present(r[col])]
            first = have[0] if have else None
            other = next((h for h in have if h[1] != first[1]), None) if first else None
            if other is not None:
                out.append(f"{model} / {workload} ({series}, {arm}) did different work: {col} "
                           f"{_fmt(first[1])} in {first[2]} ({first[0]}) but {_fmt(other[1])} in {other[2]} ({other[0]})")
                break
    return out


def _present(v: object) -> bool:
    return v is not None and not (isinstance(v, float) and np.isnan(v))


def _check_mixed(g: list[dict], leg: str, model: str, workload: str, keys: tuple[str, ...] = MIXED_KEYS) -> None:
    for key in keys:
        vals = sorted({str(r[key]) for r in g if _present(r[key])})
        if len(vals) > 1:
            dirs = ", ".join(r["run_dir"] for r in g)
            fix = (" (a repeat on another machine is not a repeat: measure the cell on one machine, or declare "
                   "allow_mixed_machines: true in study.yaml to merge them, which the page then says)"
                   if key == "machine" else "")
            raise MixedRunsError(f"refusing to merge the repeats of {leg} / {model} / {workload}: "
                                 f"they were measured with different {key} ({' vs '.join(map(str, vals))}){fix}; "
                                 f"runs: {dirs}")


def canonicalize(ds: Dataset, *, series: str | None = None, arm: str = "default",
                 allow_reused: bool | None = None, allow_different_work: bool | None = None) -> Canonical:
    """Apply the rule (RULE) to `ds` and return the canonical cells, runs and exclusions.

    `allow_reused=None` takes the study's own declaration (`allow_reused:` in study.yaml, for a
    study deliberately measured across several resumed invocations); the default is strict.
    `allow_different_work=None` likewise takes `allow_different_work:` from study.yaml; strict, legs
    whose runs did different work are refused (`DifferentWorkError`).
    """
    if allow_reused is None:
        allow_reused = bool(ds.study.extra.get("allow_reused", False))
    if allow_different_work is None:
        allow_different_work = bool(ds.study.extra.get("allow_different_work", False))
    mixed_keys = MIXED_KEYS + (() if ds.study.extra.get("allow_mixed_machines", False) else ("machine",))
    series = series or ds.study.main_series
    df = ds.records
    sel = df[(df["series"] == series) & (df["arm"] == arm)].copy()
    reasons: dict[int, str] = {}
    metric_col = sel["kind"].map(lambda k: workloads.metric_of(k).key if workloads.known(k) else None)
    value = pd.Series([sel.at[i, m] if isinstance(m, str) else np.nan for i, m in metric_col.items()],
                      index=sel.index, dtype=float)
    reused = sel["reused"].map(_true) & (not allow_reused)
    # Checked in the rule's order: a run is listed once, under the first check it fails.
    for idx in sel.index[sel["status"] != "ok"]:
        r = sel.loc[idx]
        reasons[idx] = f"status {r['status']}: {r['failure_reason'] or r['failure_error'] or 'no reason recorded'}"
    for idx in sel.index[(sel["status"] == "ok") & value.isna()]:
        reasons[idx] = "no metric recorded for this workload's kind"
    for idx in sel.index[sel["allow_dirty"].astype(bool)]:
        reasons.setdefault(idx, f"measured under --allow-dirty ({'; '.join(sel.at[idx, 'dirty']) or 'nothing found'})")
    for idx in sel.index[sel["profiled"].map(_true)]:
        reasons.setdefault(idx, "profiled run: the torch profiler's cost is in its timed region "
                                "(its profile is in the run folder, not a canonical number)")
    for idx in sel.index[reused]:
        reasons.setdefault(idx, f"reused by --resume in sweep {sel.at[idx, 'reused_by']} "
                                f"(measured by {sel.at[idx, 'invocation_id']})")
    cand = sel.drop(index=list(reasons))
    reasons |= _work_exclusions(cand)
    used = sel.drop(index=list(reasons))
    different = _different_work(used, series, arm)
    if different and not allow_different_work:
        raise DifferentWorkError(f"refusing to compare: {different[0]} (--allow-different-work compares anyway)")

    groups: dict[tuple[str, str, str], list[dict]] = {}
    # Plain dicts, not per-group frames: ten thousand records must stay a matter of seconds.
    for r in used.sort_values("repeat", kind="stable").to_dict("records"):
        groups.setdefault((r["leg"], r["model"], r["workload"]), []).append(r)
    cells = []
    for (leg, model, workload), g in groups.items():
        # Paired runs are compared within their engine block, each block on one machine: blocks on two
        # machines are two blocks, whose difference the nested rule's between-block term carries.
        paired = all(_present(r.get("paired_block")) for r in g)
        _check_mixed(g, leg, model, workload, MIXED_KEYS if paired else mixed_keys)
        kind = g[0]["kind"]
        metric = workloads.metric_of(kind)
        samples = tuple(float(r[metric.key]) for r in g)
        col = lambda k: _one([r[k] for r in g])  # noqa: E731
        cells.append({
            "study": ds.study.name, "leg": leg, "leg_label": ds.study.label(leg), "model": model,
            "tp": int(g[0]["tp"]), "workload": workload, "kind": kind, "metric": metric.key,
            "unit": metric.unit, "value": float(np.median(samples)), "n": len(samples), "samples": samples,
            # (max - min) / median of the repeats, what the pages print as the cell's dispersion; None for one.
            "spread": spread(samples),
            "provenance": ",".join(sorted({r["provenance"] for r in g})), "reused": any(_true(r["reused"]) for r in g),
            "num_seqs": col("num_seqs"), "output_tokens": col("output_tokens"),
            "vllm": col("vllm"), "torch": col("torch"), "torch_cuda": col("torch_cuda"),
            "transformers": col("transformers"), "cutlass": col("cutlass"),
            "device": col("device"), "host": col("host"), "compat_id": col("compat_id"),
            "machines": len({r["machine"] for r in g if _present(r.get("machine"))}),
            "pins": tuple(sorted({p for r in g for p in r["pins"]})),
            "source_document": col("source_document"), "source_table": col("source_table"),
            "run_dirs": tuple(r["run_dir"] for r in g),
            # The paired design's passes, {(block, round): value}: what the nested rule pairs across legs.
            "pairs": {(int(r["paired_block"]), int(rd)): float(v) for r in g if r.get("paired_passes")
                      for rd, v in r["paired_passes"]} or None,
        })
    cell_cols = ["study", "leg", "leg_label", "model", "tp", "workload", "kind", "metric", "unit", "value", "n",
                 "samples", "spread", "provenance", "reused", "num_seqs", "output_tokens", "vllm", "torch", "torch_cuda",
                 "transformers", "cutlass", "device", "host", "compat_id", "machines", "pins", "source_document",
                 "source_table", "run_dirs", "pairs"]
    excl = sel.loc[list(reasons), ["leg", "leg_label", "model", "workload", "repeat", "status", "run_dir"]].copy()
    excl["reason"] = [reasons[i] for i in excl.index]
    expected = sel[["leg", "model", "tp", "workload", "kind"]].drop_duplicates(["leg", "model", "workload"])
    return Canonical(study=ds.study, series=series, arm=arm,
                     rule=RULE.format(series=series, arm=arm,
                                      reused_rule=REUSED_ALLOWED if allow_reused else REUSED_STRICT,
                                      work_rule=WORK_ALLOWED if allow_different_work else WORK_STRICT),
                     cells=pd.DataFrame(cells, columns=cell_cols), runs=used, exclusions=excl.reset_index(drop=True),
                     expected=expected.reset_index(drop=True), dataset=ds, different_work=tuple(different))


def _true(v: object) -> bool:
    """A nullable flag: None/NA (not listed by any sweep) is not True."""
    return _present(v) and bool(v)


def _one(s: list) -> object:
    """The value repeats share; several values (e.g. versions no check refused) are joined."""
    vals = list(dict.fromkeys(v for v in s if _present(v)))
    if not vals:
        return None
    return vals[0] if len(vals) == 1 else " | ".join(map(str, vals))


def provenance_note(canon: Canonical) -> str:
    """A line saying where the figures come from; transcribed figures are always labelled so."""
    runs = canon.runs
    if not len(runs) or "transcribed" not in set(runs["provenance"]):
        return ""
    docs = sorted({str(d) for d in runs.loc[runs["provenance"] == "transcribed", "source_document"].dropna()})
    share = "All" if set(runs["provenance"]) == {"transcribed"} else "Some"
    return (f"{share} figures are transcribed from {', '.join(docs) or 'a published document'}, "
            f"not measured by this harness.")


def canonical_md(canon: Canonical) -> str:
    """CANONICAL.md: the rule, the canonical run(s) per (leg, model, workload), the exclusions."""
    from harness.analyze.fmt import markdown_table
    from harness.analyze.order import order_frame

    lines = [f"# Canonical runs — {canon.study.title or canon.study.name}", ""]
    note = provenance_note(canon)
    if note:
        lines += [f"**{note}**", ""]
    lines += ["## Rule", "", canon.rule, ""]
    if canon.different_work:
        lines += ["## Different work", "", "Compared anyway under `allow_different_work`:", ""]
        lines += [f"- {d}" for d in canon.different_work] + [""]
    cells = order_frame(canon, canon.cells)
    lines += ["## Canonical measurement per (leg, model, workload)", ""]
    if len(cells):
        show = pd.DataFrame({
            "leg": cells["leg_label"], "model": [f"`{m}`" for m in cells["model"]], "workload": cells["workload"],
            "value": [f"{workloads.metric_of(k).fmt(v)} {workloads.metric_of(k).unit}"
                      for v, k in zip(cells["value"], cells["kind"])],
            "repeats": cells["n"], "provenance": cells["provenance"],
            "run": ["<br>".join(f"`{d}`" for d in ds) for ds in cells["run_dirs"]],
        })
        lines += [markdown_table(show), ""]
    else:
        lines += ["No run qualifies.", ""]
    lines += ["## Excluded runs", ""]
    if len(canon.exclusions):
        ex = order_frame(canon, canon.exclusions)
        show = pd.DataFrame({"leg": ex["leg_label"], "model": [f"`{m}`" for m in ex["model"]],
                             "workload": ex["workload"], "repeat": ex["repeat"], "reason": ex["reason"],
                             "run": [f"`{d}`" for d in ex["run_dir"]]})
        lines += [markdown_table(show), ""]
    else:
        lines += ["None.", ""]
    # Records read but refused (impossible numbers, a duplicated run id) are listed apart from files
    # that could not be read, each with its reason: neither enters any table.
    for kind, title in (("excluded", "Records excluded from every table"),
                        ("unreadable", "Files that could not be used"),
                        ("note", "Files used in part")):
        found = [p for p in canon.dataset.problems if getattr(p, "kind", "unreadable") == kind]
        if found:
            lines += [f"## {title}", ""] + [f"- `{_rel(p.path, canon.dataset.root)}`: {p.what}" for p in found] + [""]
    return "\n".join(lines)


def _rel(path: object, root: object) -> str:
    from pathlib import Path

    try:
        return str(Path(str(path)).relative_to(Path(str(root))))
    except ValueError:
        return str(path)
