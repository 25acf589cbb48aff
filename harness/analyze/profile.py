"""Where the time went: the profiled runs of a study as tables, and the diff of two legs.

A profiled run (arm `profile:` or `harness sweep --profile`) leaves `profile.json` in its run folder
(harness.measure.worker.kernel_trace): its operators (CPU operators on a CPU leg, GPU kernels on a GPU)
by self time, with call counts and families, and the output tokens of the profiled calls. Here they
become one frame (`operators`), and `kernel_diff` compares two legs for one (model, workload): per
family and per operator, seconds per output token on each leg, the difference, and the share of the
total gap it explains; operators found on one leg only are called out.

Per output token, because the two legs did the same work (the canonical rule checks that for the
unprofiled runs; here the profiled calls' output tokens are compared and a difference is a note).
Repeats of a leg are combined by the median per operator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analyze.dataset import Dataset
from harness.core.errors import UserError
from harness.measure.worker.kernel_trace import FAMILY_NAMES, OUTSIDE

OP_COLUMNS = ("leg", "model", "workload", "arm", "repeat", "run_dir", "device", "name", "family",
              "self_s", "calls", "share", "output_tokens", "profiled_s", "s_per_token")


def operators(ds: Dataset) -> pd.DataFrame:
    """One row per (profiled run, operator): self time, calls, share of the run's profiled time, and
    self time per output token of the profiled calls."""
    rows = []
    recs = ds.records
    if "profiled" not in recs.columns:
        return pd.DataFrame(columns=list(OP_COLUMNS))
    for r in recs[recs["profiled"].fillna(False).astype(bool) & (recs["status"] == "ok")].to_dict("records"):
        prof = ds.profile(r["run_dir"])
        if prof is None:
            continue
        s, tok = prof["summary"], prof.get("output_tokens") or 0
        for o in s["ops"]:
            rows.append({"leg": r["leg"], "model": r["model"], "workload": r["workload"], "arm": r["arm"],
                         "repeat": r["repeat"], "run_dir": r["run_dir"], "device": s["device"], "name": o["name"],
                         "family": o["family"], "self_s": o["self_s"], "calls": o["calls"], "share": o["share"],
                         "output_tokens": tok, "profiled_s": s["profiled_s"],
                         "s_per_token": o["self_s"] / tok if tok else np.nan})
    return pd.DataFrame(rows, columns=list(OP_COLUMNS))


def families(ops: pd.DataFrame) -> pd.DataFrame:
    """Per (run, family): self time, calls, share of the run's profiled time, seconds per output token."""
    if not len(ops):
        return pd.DataFrame(columns=["leg", "model", "workload", "arm", "repeat", "run_dir", "family", "self_s",
                                     "calls", "share", "s_per_token"])
    keys = ["leg", "model", "workload", "arm", "repeat", "run_dir"]
    g = ops.groupby(keys + ["family"], sort=False).agg(self_s=("self_s", "sum"), calls=("calls", "sum"),
                                                         share=("share", "sum"), s_per_token=("s_per_token", "sum"))
    return g.reset_index()


@dataclass(frozen=True, kw_only=True)
class KernelDiff:
    """`families` and `kernels`: per row, seconds per output token on each leg (`a`, `b`), `diff` = b - a,
    and `share_of_gap` = diff / total gap (positive: it pushes the same way as the total).
    `only` lists the operators found on one leg only."""

    study: str
    model: str
    workload: str
    legs: tuple[str, str]
    labels: tuple[str, str]
    runs: dict[str, tuple[str, ...]]
    device: str
    total: tuple[float, float]               # profiled seconds per output token on each leg
    output_tokens: tuple[int, int]
    families: pd.DataFrame
    kernels: pd.DataFrame
    only: pd.DataFrame
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def gap(self) -> float:
        return self.total[1] - self.total[0]

    def headline(self, n: int = 3) -> str:
        """Which families explain the gap, in one sentence."""
        a, b = self.labels
        tot_a, tot_b = (x * 1e6 for x in self.total)
        direction = "more" if self.gap > 0 else "less"
        fam = self.families[self.families["diff"].abs() > 0].sort_values("share_of_gap", ascending=False)
        top = [f"{r.family} {r.share_of_gap:+.0%}" for r in fam.head(n).itertuples()]
        return (f"{self.model} / {self.workload}: {b} spends {abs(tot_b - tot_a):.1f} µs {direction} per output "
                f"token than {a} in the profiled calls ({tot_a:.1f} → {tot_b:.1f} µs, {self.gap / self.total[0]:+.1%}); "
                f"share of that gap by family: {', '.join(top)}.")


def kernel_diff(ds: Dataset, *, model: str, workload: str, legs: tuple[str, str] | list[str],
                arm: str | None = None, top: int = 15) -> KernelDiff:
    """Compare the profiled runs of one (model, workload) on two legs (old first)."""
    if len(legs) != 2:
        raise UserError(f"profile-diff: give two legs, got {len(legs)}")
    if legs[0] == legs[1]:
        raise UserError(f"{ds.root}: profile-diff --legs names {legs[0]!r} twice; a leg compared with itself "
                        f"says nothing")
    ops = operators(ds)
    where = f"{ds.study.name}"
    sel = ops[(ops["model"] == model) & (ops["workload"] == workload)]
    if arm is not None:
        sel = sel[sel["arm"] == arm]
    a, b = legs
    for leg in legs:
        if not (sel["leg"] == leg).any():
            have = sorted(set(ops.loc[(ops["model"] == model) & (ops["workload"] == workload), "leg"]))
            raise UserError(f"{where}: no profiled run of {model} / {workload} on leg {leg!r}"
                            f" (profiled legs: {', '.join(have) or 'none'}); measure one with harness sweep --profile")
    per_leg = {leg: sel[sel["leg"] == leg] for leg in legs}
    runs = {leg: tuple(dict.fromkeys(per_leg[leg]["run_dir"])) for leg in legs}
    tokens = tuple(int(per_leg[leg].groupby("run_dir")["output_tokens"].first().median()) for leg in legs)
    devices = sorted(set(sel["device"]))

    def per_token(frame: pd.DataFrame, key: str) -> pd.Series:
        # Sum within a run, median across the leg's runs; an operator absent from a run counts 0 there.
        wide = frame.pivot_table(index=key, columns="run_dir", values="s_per_token", aggfunc="sum", fill_value=0.0)
        return wide.median(axis=1)

    fam = pd.DataFrame({"a": per_token(per_leg[a], "family"), "b": per_token(per_leg[b], "family")}).fillna(0.0)
    fam = fam.reindex([f for f in FAMILY_NAMES if f in fam.index])
    total = (float(fam["a"].sum()), float(fam["b"].sum()))
    gap = total[1] - total[0]
    fam["diff"] = fam["b"] - fam["a"]
    fam["share_of_gap"] = fam["diff"] / gap if gap else np.nan
    fam = fam.reset_index().rename(columns={"index": "family"})

    ka, kb = per_token(per_leg[a], "name"), per_token(per_leg[b], "name")
    k = pd.DataFrame({"a": ka, "b": kb})
    fam_of = dict(zip(sel["name"], sel["family"]))
    k["family"] = [fam_of.get(n, "other") for n in k.index]
    k["only"] = [a if pd.isna(y) else b if pd.isna(x) else "" for x, y in zip(k["a"], k["b"])]
    k = k.fillna({"a": 0.0, "b": 0.0})
    k["diff"] = k["b"] - k["a"]
    k["share_of_gap"] = k["diff"] / gap if gap else np.nan
    k = k.reset_index().rename(columns={"index": "name"})
    k = k.reindex(k["diff"].abs().sort_values(ascending=False).index)
    only = k[k["only"] != ""].reset_index(drop=True)
    notes = []
    if tokens[0] != tokens[1]:
        notes.append(f"The profiled calls generated {tokens[0]:,} and {tokens[1]:,} output tokens: per-token "
                     "figures compare different work.")
    if len(devices) > 1:
        notes.append(f"The legs were profiled on different devices ({', '.join(devices)}): not comparable.")
    left = [r for leg in legs for r in runs[leg]
            if (ds.profile(r) or {}).get("summary", {}).get("ops_left_out")]
    if left:
        notes.append("Some runs kept only their top operators; an operator 'on one leg only' may be below the "
                     "other leg's cut: " + ", ".join(left))
    capped = [r for leg in legs for r in runs[leg] if (ds.profile(r) or {}).get("steps_capped")]
    if capped:
        notes.append("The profiler's step cap was reached in " + ", ".join(capped) + ": per-token figures undercount.")
    if OUTSIDE in set(k["name"]):
        notes.append(f"`{OUTSIDE}`: the part of the profiled span on the engine's busiest thread that no operator "
                     "covers (Python, scheduling, waiting), counted in family `other`.")
    return KernelDiff(study=ds.study.name, model=model, workload=workload, legs=(a, b),
                      labels=(ds.study.label(a), ds.study.label(b)), runs=runs, device=",".join(devices),
                      total=total, output_tokens=tokens, families=fam, kernels=k.head(top).reset_index(drop=True),
                      only=only, notes=tuple(notes))


def _us(v: float) -> str:
    return f"{v * 1e6:,.2f}"


def _pct(v: float) -> str:
    return "—" if v is None or not np.isfinite(v) else f"{v:+.0%}"


def short_kernel(name: str, limit: int = 90) -> str:
    """A kernel's name as a reader can take it in: a demangled CUDA kernel runs to a thousand characters
    of template arguments and parameter types, so the innermost <...> and (...) collapse to … a level
    at a time until the name fits (`void` dropped); a name that fits is left alone."""
    if len(name) <= limit:
        return name
    s = name.removeprefix("void ")
    while len(s) > limit:
        # Collapsed levels are marked with brackets the patterns do not match, so that the next pass
        # finds the enclosing level innermost.
        t = re.sub(r"\([^()]+\)", "\u2985\u2026\u2986", re.sub(r"<[^<>]+>", "\u27e8\u2026\u27e9", s))
        if t == s:
            break
        s = t
    s = s.replace("\u27e8\u2026\u27e9", "<…>").replace("\u2985\u2026\u2986", "(…)")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def kernel_diff_md(d: KernelDiff, *, only_rows: int = 10, full_names: bool = False) -> str:
    """The diff as markdown: headline, families, top operators by |difference|, one-leg operators.
    Kernel names are shortened (`short_kernel`) unless `full_names`; the derived file keeps them whole."""
    a, b = d.labels
    nm = (lambda n: str(n)) if full_names else (lambda n: short_kernel(str(n)))  # noqa: E731
    lines = [f"## Kernel diff: {d.model} / {d.workload}, {a} → {b}", "", d.headline(), "",
             f"Device: {d.device}. µs of self time per output token of the profiled calls "
             f"({d.output_tokens[0]:,} and {d.output_tokens[1]:,} tokens); share of gap = difference / total "
             f"difference ({_us(d.gap)} µs).", "",
             f"| family | {a} µs/tok | {b} µs/tok | difference | share of gap |", "|---|---:|---:|---:|---:|"]
    for r in d.families.itertuples():
        lines.append(f"| {r.family} | {_us(r.a)} | {_us(r.b)} | {_us(r.diff)} | {_pct(r.share_of_gap)} |")
    lines.append(f"| **total** | {_us(d.total[0])} | {_us(d.total[1])} | {_us(d.gap)} | 100% |")
    lines += ["", f"| operator | family | {a} µs/tok | {b} µs/tok | difference | share of gap |",
              "|---|---|---:|---:|---:|---:|"]
    for r in d.kernels.itertuples():
        name = nm(r.name).replace("|", "\\|") + (f" (only {r.only})" if r.only else "")
        lines.append(f"| `{name}` | {r.family} | {_us(r.a)} | {_us(r.b)} | {_us(r.diff)} | {_pct(r.share_of_gap)} |")
    if len(d.only):
        lines += ["", "Operators on one leg only:", ""]
        for leg in d.labels:
            names = d.only.loc[d.only["only"] == (d.legs[d.labels.index(leg)]), "name"].head(only_rows)
            if len(names):
                lines.append(f"- only {leg}: " + ", ".join(f"`{nm(n)}`" for n in names)
                             + (f" and {int((d.only['only'] == d.legs[d.labels.index(leg)]).sum()) - len(names)} more"
                                if (d.only["only"] == d.legs[d.labels.index(leg)]).sum() > len(names) else ""))
    if d.notes:
        lines += [""] + [f"- {n}" for n in d.notes]
    names = list(d.kernels["name"]) + list(d.only["name"]) if len(d.only) else list(d.kernels["name"])
    if not full_names and any(short_kernel(str(n)) != str(n) for n in names):
        lines += ["", "Long kernel names are shortened here (template arguments and parameters as …); "
                  "`harness compare profiles` writes them whole."]
    lines += ["", "Runs: " + "; ".join(f"{leg}: {', '.join(r)}" for leg, r in d.runs.items())]
    return "\n".join(lines) + "\n"


def profile_overhead(ds: Dataset) -> pd.DataFrame:
    """Profiled vs unprofiled throughput of the same (leg, model, workload), median over repeats, and the
    profile's trace size: what profiling costs."""
    recs = ds.records
    if "profiled" not in recs.columns:
        return pd.DataFrame()
    ok = recs[(recs["status"] == "ok") & recs["throughput_tok_s"].notna()]
    rows = []
    for (leg, model, wl), g in ok.groupby(["leg", "model", "workload"], sort=False):
        prof, plain = g[g["profiled"].astype(bool)], g[~g["profiled"].astype(bool)]
        if not len(prof) or not len(plain):
            continue
        sizes = [(ds.profile(r) or {}).get("trace_bytes", 0) for r in prof["run_dir"]]
        p, u = float(prof["throughput_tok_s"].median()), float(plain["throughput_tok_s"].median())
        rows.append({"leg": leg, "model": model, "workload": wl, "unprofiled_tok_s": u, "profiled_tok_s": p,
                     "overhead": u / p - 1, "n_unprofiled": len(plain), "n_profiled": len(prof),
                     "trace_mb": float(np.median(sizes)) / 1e6 if sizes else np.nan})
    return pd.DataFrame(rows)


def profile_diff(study_dir: Path | str, *, model: str, workload: str, legs: list[str] | tuple[str, str],
                 arm: str | None = None, out: Path | None = None, replace: bool = False) -> tuple[str, Path]:
    """`harness compare profiles`: the diff as markdown, written to `out` or the study's derived/profile-diff/
    (schema.outdir: an existing file the harness did not write is refused; one it wrote is replaced
    only with `replace`, or at the default place)."""
    from harness.analyze.dataset import load
    from harness.core import paths
    from harness.schema.outdir import check_file, output_file

    study_dir = Path(study_dir)
    default = out is None
    if out is not None:
        check_file(out, verb="profile-diff", replace=replace)   # before the traces are read
    d = kernel_diff(load(study_dir), model=model, workload=workload, legs=tuple(legs), arm=arm)
    md = kernel_diff_md(d, full_names=True)
    if out is None:
        name = "__".join(re.sub(r"[^A-Za-z0-9._-]+", "_", x) for x in (model, workload, *legs))
        out = paths.inside(study_dir, "derived", "profile-diff", f"{name}.md")
    with output_file(out, verb="profile-diff", replace=replace, default=default) as tmp:
        tmp.write_text(md, encoding="utf-8")
    return md, out
