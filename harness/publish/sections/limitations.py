"""Known limitations (each a bold-led item computed from the data) and where the numbers come from."""

from __future__ import annotations

from pathlib import Path

from harness.analyze import capacity
from harness.analyze.tables import _legs, ticked
from harness.analyze import wording as w
from harness.analyze.claims.base import models, passes
from harness.core.locate import rel
from harness.publish.sections.overview import devices, other_repeats
from harness.publish.study import Study


def limitations(st: Study) -> list[str]:
    from harness.analyze.manifest import stack_table

    canon, ds = st.canon, st.ds
    items = []
    cells = canon.cells
    if len(cells):
        single = cells[cells["n"] == 1]
        if len(single):
            ms = list(dict.fromkeys(cells["model"]))
            unrepeated = [m for m in ms if (cells.loc[cells["model"] == m, "n"] == 1).all()]
            txt = (f"**Little dispersion data.** {len(single)} of the {len(cells)} canonical figures "
                   f"{w.v(len(single), 'is', 'are')} one timed pass; {len(unrepeated)} of {w.n(len(ms), 'model')} "
                   f"{w.v(len(unrepeated), 'has', 'have')} no repeat in the main series.")
            extra = other_repeats(st)
            if extra:
                txt += f" Repeats outside it: {extra}."
            txt += (f" A single-pass ratio has no interval, so every conclusion within {st.params.band:.0%} of 1.00x "
                    f"reads \"undecided\", not \"no difference\".")
            items.append(txt)
        else:
            spreads, censored = capacity.cell_spreads(canon)
            worst = max(spreads, default=None)
            if censored:
                items.append(f"**Capacities without a spread.** For {w.n(censored, '(leg, model, workload) cell')} "
                             f"fewer than two searches measured a capacity (the others stopped censored: see "
                             f"\"Serving capacity at the SLO\"), so no spread of capacities is known there and "
                             f"no ratio of capacities can be tested.")
            if worst:
                sp, m, wl, lg, what = worst
                items.append(f"**Dispersion.** Every canonical figure is the median of {w.span(cells['n'])} "
                             f"repeats; the largest repeat spread is {sp:.1%} ({ticked(m)} {wl} on {lg}{what}). "
                             f"A cell the rule and its family do not decide reads \"undecided\" (or \"equivalent within "
                             f"±δ\" where the whole interval lies inside the study's margin), never \"no difference\"; "
                             f"an interval that excludes 1.00x can still read undecided where the study's cells, "
                             f"decided together, do not carry it (the row says so).")
    if len(cells) and "machines" in cells and (cells["machines"] > 1).any():
        many = cells[cells["machines"] > 1]
        shown = ", ".join(f"{ticked(m)} {wl} on {lg} ({n})" for m, wl, lg, n in
                          zip(many["model"], many["workload"], many["leg_label"], many["machines"]))
        why = ("study.yaml declares `allow_mixed_machines: true`" if st.ds.study.extra.get("allow_mixed_machines")
               else "paired engine blocks, each on one machine, compared within the block")
        items.append(f"**Figures that span machines.** {w.n(len(many), 'canonical figure')} "
                     f"{w.v(len(many), 'merges', 'merge')} repeats measured on different machines (by their GPUs' "
                     f"uuids; {why}): {shown}. Machines of one card model differ, so such a figure's spread "
                     f"includes the machines' difference.")
    devs = devices(canon)
    if devs:
        items.append(f"**{w.names(devs)} only.** Absolute numbers are specific to this device and runtime; do not "
                     f"put them in the same table as results from other hardware.")
    st_t = stack_table(canon)
    mixed = st_t[st_t["homogeneous"] != "yes"]
    if len(mixed):
        items.append("**Legs that are not internally homogeneous.** " + "; ".join(
            f"{r.leg}: {r.homogeneous.removeprefix('no: ')}" for r in mixed.itertuples())
            + " (see \"Runtime stack per leg\"). The difference must be disclosed with the numbers.")
    legs = _legs(canon)
    partial = []
    for m in models(canon):
        on = [lb for leg, lb in legs if passes(canon, leg, m)]
        if 0 < len(on) < len(legs):
            partial.append(f"{ticked(m)} ({', '.join(on)})")
    if partial:
        items.append(f"**Partial comparisons.** {w.n(len(partial), 'model')} have data on fewer than "
                     f"{w.all_legs(len(legs))}: " + ", ".join(partial) + "; they carry no comparison across every leg.")
    if len(canon.exclusions):
        reasons = canon.exclusions["reason"].str.split(":").str[0].value_counts()
        items.append(f"**Excluded runs.** {w.n(len(canon.exclusions), 'run')} of the main series "
                     f"{w.v(len(canon.exclusions), 'is', 'are')} not canonical ("
                     + ", ".join(f"{r}: {n}" for r, n in reasons.items()) + "); `CANONICAL.md` lists each.")
    if canon.different_work:
        shown = "; ".join(canon.different_work[:3]) + (" …" if len(canon.different_work) > 3 else "")
        items.append(f"**Legs compared although their runs did different work.** "
                     f"{w.n(len(canon.different_work), 'cell')} of the main series (allowed by "
                     f"`--allow-different-work` or study.yaml's `allow_different_work`): {shown}. A ratio there "
                     f"mixes the version's effect with the work's; `CANONICAL.md` lists each.")
    if ds.superseded:
        ok = sum(e.get("status") == "ok" for e in ds.superseded)
        items.append(f"**Re-measured runs.** Later sweeps measured over {w.n(len(ds.superseded), 'earlier record')} "
                     f"({ok} finished, {len(ds.superseded) - ok} failed or unreadable); the tables use the later "
                     f"ones, and the earlier are kept under `superseded/` (each sweep index in `sweeps/` says "
                     f"what had changed).")
    biased = _fixed_order_drift(st)
    if biased:
        items.append(biased)
    if ds.unfinished:
        shown = ", ".join(f"`{u}`" for u in ds.unfinished[:3]) + (" …" if len(ds.unfinished) > 3 else "")
        items.append(f"**Runs started but never recorded.** {w.n(len(ds.unfinished), 'run folder')} "
                     f"{w.v(len(ds.unfinished), 'holds', 'hold')} a run's spec and log but no record (the "
                     f"measurement was cut off, or is still going): {shown}. No figure here comes from them; "
                     f"`harness sweep --resume` measures them again.")
    if st.transcribed:
        items.append("**Rounded inputs.** The transcribed figures are rounded as printed, so a ratio recomputed from "
                     "them can differ from the source's own in the last digit.")
    # Problems by kind (harness.analyze.dataset.Problem): files left out, and files used in part.
    for kinds, title, verb in ((("unreadable", "excluded"), "Unreadable or excluded files",
                                "could not be used and are left out"),
                               (("note",), "Files used in part", "were loaded with a part left out")):
        found = [p for p in ds.problems if getattr(p, "kind", "unreadable") in kinds]
        if found:
            items.append(f"**{title}.** {w.n(len(found), 'file')} {verb}: "
                         + "; ".join(f"`{rel(Path(str(p.path)))}` ({p.what})" for p in found[:5])
                         + (" …" if len(found) > 5 else "") + ".")
    return items


def _fixed_order_drift(st: Study) -> str | None:
    """Legs measured in the same order in every repeat while the host's speed trended: each ratio
    then carries the drift as a bias toward the leg measured later (or earlier, for a slowing host)."""
    from harness.analyze.studies import drift

    frame = drift.drift_frame(st.canon)
    order = drift.fixed_order(frame, st.canon.series) if len(frame) else None
    if not order:
        return None
    trend = drift.drift_summary(frame).trend
    if not trend.significant or trend.rho is None:
        return None
    favoured, how = (order[-1], "sped up") if trend.rho > 0 else (order[0], "slowed down")
    return (f"**Legs in a fixed order while the host drifted.** Every repeat measured the legs in the order "
            f"{' → '.join(order)}, and the host {how} over the study (Spearman ρ = {trend.rho:+.2f}, p = "
            f"{trend.p:.3f}, {trend.n} runs; the drift figure shows it). That favours {favoured} in every ratio "
            f"by an amount the records cannot separate from the version's effect; a sweep with the legs "
            f"alternating (`order: alternate`) turns it into noise both legs share.")


def limitations_md(st: Study) -> str:
    return "\n".join(f"- {x}" for x in limitations(st)) + "\n"


def sources_md(st: Study) -> str:
    from harness import __version__

    where = rel(st.root)
    return "\n".join([
        f"The tables are generated from `{where}/` by `harness.analyze.tables` from the canonical runs; which run is "
        f"canonical for each cell, and why, is in `CANONICAL.md`. Runs of the other series are supporting evidence "
        f"and are not folded into the tables. Rendered by vllm-harness {__version__}:",
        "",
        "```sh",
        f"python -m harness report {where}",
        "```",
    ]) + "\n"
