"""Cold engines: the runs timed on an engine that compiled its graphs from an empty cache, against
their cell's runs on an engine that loaded them (harness.analyze.coldstart). Empty for a study whose
logs never say (eager engines, transcribed figures) or that has no cell with both kinds of run."""

from __future__ import annotations

from harness.analyze import coldstart
from harness.analyze.tables import ticked
from harness.publish.study import Study


def coldstart_section(st: Study) -> coldstart.ColdSummary | None:
    return coldstart.study_summary(st.ds)


def _p(p: float | None) -> str:
    return "too few cells for a sign test" if p is None else f"sign test p = {p:.3f}"


def coldstart_md(st: Study) -> str:
    sm = coldstart_section(st)
    if sm is None:
        return ""
    k, n, p = sm.first
    lk, ln = sm.later
    out = ["### Cold engines: the first engine of a leg and model on a machine", "",
           "An engine is *cold* when it compiles its graphs and kernels from an empty cache (the first engine of a "
           "leg and model on a machine), *warm* when it loads what an earlier engine left; compiling costs start-up time, "
           "and below each cold run's figure is set against its cell's warm runs.",
           "",
           f"vLLM's log says whether an engine compiled its graphs or loaded them from the cache a previous engine "
           f"left on the machine. Of the {sm.runs} runs whose log says, {sm.cold_runs} were timed on an engine that "
           f"compiled. Where a cell has runs of both kinds, the cold runs' median speed against the warm runs' median "
           f"(warm runs of the same machine where there are any; below 1, the cold runs were slower). Cells whose cold "
           f"run was the first workload its engine timed, one per cold engine: **{k} of {n} slower**, {_p(p)}: "
           f"{sm.verdict}. The cold engines' later workloads: {lk} of {ln} slower (not tested: they share those "
           f"engines). Where cold engines do measure apart, it is the first repeat of each leg and model on each "
           f"machine that carries it: a series can start with an engine kept out of its numbers (`harness "
           f"sweep --prime`, `harness check crosscheck --prime`), or read those runs apart.", "",
           "| series | leg | model | workload | arm | cold repeats | cold ÷ warm (speed) | first on its engine | "
           "warm runs from | engine start cold / warm (s) |",
           "|---|---|---|---|---|---|---:|---|---|---|"]
    for c in sm.cells:
        init = ("—" if c.cold_init_s is None or c.warm_init_s is None or not c.cold_init_s
                else f"{c.cold_init_s:.0f} / {c.warm_init_s:.0f}")
        out.append(f"| {c.series} | {st.canon.study.label(c.leg)} | {ticked(c.model)} | {c.workload} | {c.arm} | "
                   f"{', '.join(f'r{r}' for r in c.cold_repeats)} | {c.speed:.3f} | {'yes' if c.first else 'no'} | "
                   f"{'the same machine' if c.same_machine else 'other machines'} | {init} |")
    return "\n".join(out) + "\n"
