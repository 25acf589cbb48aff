"""Where the time went: the study's profiled runs, as a kernel diff of two legs per (model, workload),
the profiler's cost and the prefill/decode split. Empty for a study without profiled runs."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.analyze.profile import KernelDiff, kernel_diff, kernel_diff_md, operators, profile_overhead
from harness.analyze.tables import _legs
from harness.publish.study import Study


@dataclass(frozen=True, kw_only=True)
class ProfileSection:
    diffs: tuple[KernelDiff, ...]
    overhead: pd.DataFrame
    phases: pd.DataFrame          # per unprofiled run: time to first token, time per output token, decode share


def profile_section(st: Study) -> ProfileSection | None:
    """A kernel diff of the first and last leg of the study for every profiled (model, workload)."""
    ds = st.ds
    ops = operators(ds)
    if not len(ops):
        return None
    legs = [n for n, _ in _legs(st.canon)] or sorted(set(ops["leg"]))
    diffs = []
    for (model, workload), g in ops.groupby(["model", "workload"], sort=False):
        have = [lg for lg in legs if lg in set(g["leg"])]
        if len(have) >= 2:
            diffs.append(kernel_diff(ds, model=model, workload=workload, legs=(have[0], have[-1])))
    recs = ds.records
    cols = ["leg_label", "model", "workload", "arm", "ttft_s", "tpot_s", "decode_share"]
    phases = recs[recs["decode_share"].notna()][cols] if "decode_share" in recs.columns else pd.DataFrame(columns=cols)
    return ProfileSection(diffs=tuple(diffs), overhead=profile_overhead(ds), phases=phases.reset_index(drop=True))


def profile_md(st: Study) -> str:
    sec = profile_section(st)
    if sec is None:
        return ""
    out = ["### Where the time went (profiled runs)", "",
           "Profiled runs ran the torch profiler through vLLM's own hooks over the first timed calls; they are "
           "never canonical numbers (the canonical rule leaves them out). Per output token of the profiled calls, "
           "the self time of each operator family on each leg, and the share of the total difference it explains.",
           ""]
    for d in sec.diffs:
        out.append(kernel_diff_md(d).replace("## Kernel diff", "#### Kernel diff", 1))
    if len(sec.overhead):
        out += ["#### What profiling costs", "",
                "| leg | model | workload | unprofiled tok/s | profiled tok/s | overhead | trace MB |",
                "|---|---|---|---:|---:|---:|---:|"]
        for r in sec.overhead.itertuples():
            out.append(f"| {st.canon.study.label(r.leg)} | {r.model} | {r.workload} | {r.unprofiled_tok_s:,.0f} | "
                       f"{r.profiled_tok_s:,.0f} | {r.overhead:+.1%} | {r.trace_mb:.2f} |")
        out += ["", "Overhead: unprofiled over profiled throughput, minus 1 (median over repeats; "
                f"{int(sec.overhead['n_profiled'].min())} profiled run(s) per cell at least).", ""]
    if len(sec.phases):
        out += ["#### Prefill/decode split (vLLM's request stats)", "",
                "| leg | model | workload | arm | TTFT ms | TPOT ms | decode share |", "|---|---|---|---|---:|---:|---:|"]
        for r in sec.phases.itertuples():
            tpot = "—" if pd.isna(r.tpot_s) else f"{r.tpot_s * 1e3:.2f}"
            out.append(f"| {r.leg_label} | {r.model} | {r.workload} | {r.arm} | {r.ttft_s * 1e3:.1f} | {tpot} | "
                       f"{r.decode_share:.0%} |")
        out += ["", "Medians over the first timed pass's requests: time to first token (queueing and prefill), time "
                "per output token after the first, and decode time over (TTFT + decode time).", ""]
    return "\n".join(out) + "\n"
