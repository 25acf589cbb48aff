"""Sweep time: the share of each kind of invocation's wall time that was timed work, and the share
spent starting engines (harness.analyze.sweeptime). Empty for a study without sweep indexes
(transcribed figures, records copied without their sweeps/)."""

from __future__ import annotations

from harness.analyze import sweeptime
from harness.analyze.fmt import fmt_share as pct
from harness.analyze import wording as w
from harness.publish.study import Study


def sweeptime_section(st: Study) -> sweeptime.SweepTime | None:
    invs = sweeptime.invocations(st.ds.sweeps, st.ds.records)
    return sweeptime.summarize(invs) if invs else None


def _minutes(s: float) -> str:
    return f"{s / 60:.1f}"


def sweeptime_md(st: Study) -> str:
    sm = sweeptime_section(st)
    if sm is None or not sm.wall_s:
        return ""
    left = (f" {w.n(sm.left_out, 'invocation')} {w.v(sm.left_out, 'enters', 'enter')} no sum: cut off before "
            f"the index was closed (a lease ended under it), or partial (some of its records were measured over "
            f"since)." if sm.left_out else "")
    out = ["### Sweep time: how much of it was measurement", "",
           f"Each sweep or crosscheck invocation's wall time is its index's, first run started to last run finished; "
           f"timed seconds are its runs' timed passes, engine start their engines' initialisation (compile and "
           f"graph capture included, from an empty cache or the cache an earlier engine left). Over the "
           f"{w.n(len(sm.invocations) - sm.left_out, 'invocation')} counted, {_minutes(sm.timed_s)} of "
           f"{_minutes(sm.wall_s)} minutes were timed ({pct(sm.share)}).{left} A per-run invocation pays one engine "
           f"start per run; a per-group one, one per group of workloads; a workload's own `min_timed_s` sets how "
           f"long it measures against that fixed cost.", "",
           "| series | arms | engine | invocations (left out) | runs | wall (min) | engine start | timed | "
           "best invocation |",
           "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for k in sm.kinds:
        if not k.wall_s:
            continue  # nothing of it counted: its invocations are among those left out above
        out.append(f"| {k.series} | {k.arms} | {k.engine} | {k.invocations} ({k.left_out}) | {k.runs} | "
                   f"{_minutes(k.wall_s)} | {pct(k.init_share)} | {pct(k.share)} | "
                   f"{pct(k.best) if k.best is not None else '—'} |")
    return "\n".join(out) + "\n"
