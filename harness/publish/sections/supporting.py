"""Supporting measurements (every series besides the main one, through the diagnostic of its shape)
and the runtime stack per leg."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from harness import workloads
from harness.analyze.tables import MISSING, _legs, markdown_table, model_order, order_frame, ticked
from harness.core.errors import UserError
from harness.analyze import wording as w
from harness.publish.study import Study

SeriesKind = Literal["exit-status", "repeats", "one-leg", "arms"]


@dataclass(frozen=True, kw_only=True)
class Supporting:
    name: str
    kind: SeriesKind
    diagnostic: Any            # the diagnostic of `harness.analyze.studies.diagnostics`, or the UserError saying why none
    sources: list[str]         # the tables the series was transcribed from, if any


def series_kind(r: pd.DataFrame) -> SeriesKind:
    """What a supporting series is, from its records: exit status only, repeats of one arm (on two legs
    or more, or on one), or arms."""
    if not (r["throughput_tok_s"].notna().any() or r["ms_per_token"].notna().any()):
        return "exit-status"
    base = r[r["arm"] == "baseline"]
    if len(base) and (base["status"] != "ok").all():
        # A failing baseline and arms that each change one thing: a falsification matrix, whatever passed.
        return "exit-status"
    if set(r["arm"]) != {"default"}:
        return "arms"
    return "repeats" if r.loc[r["status"] == "ok", "leg"].nunique() > 1 else "one-leg"


def one_leg_values(st: Study, series: str) -> pd.DataFrame:
    """A series measured on one leg: its canonical cells with their spread and where each run's time
    went (medians over the repeats). Nothing to compare, so no ratio and no verdict."""
    canon = st.series[series]
    runs = canon.runs
    rows = []
    for c in canon.cells.to_dict("records"):
        r = runs[(runs["leg"] == c["leg"]) & (runs["model"] == c["model"]) & (runs["workload"] == c["workload"])]
        rows.append({"leg": c["leg"], "model": c["model"], "workload": c["workload"], "kind": c["kind"],
                     "value": float(c["value"]), "n": int(c["n"]), "spread": c["spread"],
                     "timed_s": r["timed_s"].median(), "wall_s": r["wall_s"].median(),
                     "engine_mode": ", ".join(sorted(set(r["engine_mode"].dropna())))})
    out = pd.DataFrame(rows, columns=["leg", "model", "workload", "kind", "value", "n", "spread", "timed_s",
                                      "wall_s", "engine_mode"])
    return order_frame(canon, out) if len(out) else out


def _side_runs(r: pd.DataFrame) -> pd.Series:
    """Runs other diagnostics made in a series' own folder: the crosscheck's, primers, profiled runs.
    Their arms are not the series' arms: a main series holding them still answers with its default arm."""
    from harness.experiments.crosscheck import is_crosscheck_arm
    from harness.measure.prime import is_prime

    return (r["arm"].map(lambda a: is_crosscheck_arm(a) or is_prime(a))
            | r["profiled"].fillna(False).astype(bool))


def supporting(st: Study) -> list[Supporting]:
    """Every series besides the main one, with its diagnostic (`harness.analyze.studies.diagnostics`, the
    functions the notebooks call): a single-variable control for exit-status series, a repeat study
    for repeats of one arm, an arm table for forced arms."""
    from harness.analyze.studies import diagnostics as dx

    recs = st.ds.records
    out: list[Supporting] = []
    names = sorted(set(recs["series"]) - {st.canon.series})
    main = recs[recs["series"] == st.canon.series]
    if len(main) and set(main.loc[~_side_runs(main), "arm"]) - {"default"}:
        # The main series itself compares arms (an arm or falsification study): its arms are the answer,
        # and the tables, which hold the default arm only, do not show them.
        names = [st.canon.series, *names]
    for name in names:
        r = recs[recs["series"] == name]
        kind = series_kind(r)
        d: Any
        try:
            if kind == "exit-status":
                base = "baseline" if "baseline" in set(r["arm"]) else str(r["arm"].iloc[0])
                d = dx.falsification_matrix(st.ds, series=name, baseline=base)
            elif kind == "repeats":
                d = dx.repeat_study(st.ds, series=name)
            elif kind == "one-leg":
                d = one_leg_values(st, name)
            else:
                d = dx.arm_table(st.ds, series=name)
        except UserError as e:
            d = e
        out.append(Supporting(name=name, kind=kind, diagnostic=d,
                              sources=sorted({str(x) for x in r["source_table"].dropna()})))
    return out


def supporting_md(st: Study) -> str:
    from harness.analyze.studies import diagnostics as dx

    out = []
    for s in supporting(st):
        d, kind = s.diagnostic, s.kind
        out += [f"### Series `{s.name}`", ""]
        if s.sources:
            out += [f"_Transcribed from: {'; '.join(s.sources)}._", ""]
        if isinstance(d, UserError):
            out += [f"_No {kind} diagnostic for this series: {d}. Its runs are in `CANONICAL.md`'s sources and "
                    f"the run records._", ""]
            continue
        if kind == "exit-status":
            tab = d.outcomes.reset_index().rename(columns={"index": "arm"})
            tab["arm"] = [f"`{a}`" + ("" if row.same_leg else f" ({st.canon.study.label(row.leg)})")
                          for a, row in zip(tab["arm"], d.rows.itertuples())]
            out += [markdown_table(tab.fillna(MISSING)), "", dx.single_variable_conclusion(d).text, ""]
        elif kind == "one-leg":
            out += [_one_leg_md(st, d), ""]
        elif kind == "repeats":
            out += [markdown_table(d.display), ""] + [f"- {x}" for x in dx.repeat_conclusion(d)] + [""]
            out += [f"_{n}_" for n in d.notes] + [""]
        else:
            out += [markdown_table(d.display), ""] + [f"- {x}" for x in dx.arm_conclusion(d)] + [""]
            out += [f"_{n}_" for n in d.notes] + [""]
    return "\n".join(out) + "\n" if out else "The study holds no series besides the main one.\n"


def _one_leg_md(st: Study, d: pd.DataFrame) -> str:
    if not len(d):
        return "_No canonical run in this series._"
    disp = pd.DataFrame({
        "leg": [st.canon.study.label(x) for x in d["leg"]], "model": [ticked(m) for m in d["model"]],
        "workload": d["workload"],
        "median": [f"{workloads.metric_of(k).fmt(v)} {workloads.metric_of(k).unit}"
                   for k, v in zip(d["kind"], d["value"])],
        "n": d["n"].astype(str),
        "spread": [MISSING if pd.isna(x) else f"{x:.1%}" for x in d["spread"]],
        "timed s / run": [MISSING if pd.isna(x) else f"{x:.1f}" for x in d["timed_s"]],
        "wall s / run": [MISSING if pd.isna(x) else f"{x:.1f}" for x in d["wall_s"]],
        "engine": d["engine_mode"]})
    group = (" A per-group engine's start is in the wall time of its group's first run."
             if d["engine_mode"].str.contains("per-group").any() else "")
    return (markdown_table(disp) + "\n\nOne leg only: medians of its repeats and their spread (max − min over the "
            "median), no ratio and no verdict." + group)


def mixed_versions(st: Study) -> list[str]:
    """Per leg, each package measured under more than one version, said as a warning."""
    from harness.analyze.manifest import NOT_RECORDED, versions

    canon = st.canon
    v = versions(canon)
    order = {m: i for i, m in enumerate(model_order(canon.dataset))}
    lines = []
    for leg, label in _legs(canon):
        g = v[(v["leg"] == leg) & (v["version"] != NOT_RECORDED)]
        for pkg, h in g.groupby("package", sort=False):
            if len(h) < 2:
                continue
            parts = []
            for x in h.sort_values(["pinned", "models"], ascending=[True, False]).itertuples():
                names = sorted(x.model_names, key=lambda m: (order.get(m, len(order)), m))
                who = ticked(names[0]) if len(names) == 1 else w.n(len(names), "model")
                parts.append(f"{x.version} for {who}{' (pinned)' if x.pinned else ''}")
            lines.append(f"- Leg {label} was measured under {len(h)} versions of {pkg}: {w.names(parts)}. Do not "
                         f"report a single {pkg} version for this leg.")
    return lines


def stack_md(st: Study) -> str:
    from harness.analyze.manifest import devices_table, stack_table

    canon = st.canon
    lines = ["A \"version comparison\" is a comparison of whole runtime stacks, so this table travels with the "
             "numbers. Counted over the canonical runs, as each run recorded its stack from inside its leg.", "",
             markdown_table(stack_table(canon)), "", markdown_table(devices_table(canon)), ""]
    return "\n".join(lines + mixed_versions(st)) + "\n"
