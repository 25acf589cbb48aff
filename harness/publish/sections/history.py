"""A release history (a study folder holding `history.json`, docs/history.md): per (model, workload) the
metric over the releases with its intervals and the releases where its level changed, the table of steps
between consecutive releases, and in the column of a release where a model has no number, why
(the release did not install, or its runs' failure attribution). Empty for every other study."""

from __future__ import annotations

import re

import pandas as pd

from harness import workloads
from harness.analyze import history as hist
from harness.analyze.failure import attributions_by_model
from harness.analyze.fmt import ticked
from harness.publish.study import Study



def history_section(st: Study) -> hist.HistoryView | None:
    return hist.history_view(st.canon, st.root)


def _why_missing(view: hist.HistoryView, st: Study) -> dict[tuple[str, str], str]:
    """(leg, model) -> why the model has no number on that release."""
    out: dict[tuple[str, str], str] = {}
    models = sorted({s.model for s in view.series})
    for r in view.record.releases:
        if r.status != "measured":
            for m in models:
                out[(r.leg, m)] = f"{r.status.replace('-', ' ')}: {_short(_reason_line(r.reason or r.status))}"
    att = attributions_by_model(st.ds)
    for a in att.to_dict("records"):
        out.setdefault((a["leg"], a["model"]), f"fails: {a['signature']}")
    return out


def _reason_line(reason: str) -> str:
    """A reason's summary line, without the resolver's platform markers ({platform_machine == ...})."""
    line = reason.strip().splitlines()[0].strip()
    return re.sub(r"\{[^{}]*\}", "", line)


def _short(line: str, limit: int = 60) -> str:
    """What a table cell can hold of it: the pin a resolver could not meet, else its start."""
    m = re.search(r"depends on (\S+==\S+?)[,.]?(?:\s|$)", line)
    if m:
        return f"needs {m.group(1)}"
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _cell(p: hist.Point, kind: str, new_level: bool, why: str | None) -> str:
    if p.value is None:
        return why or "—"
    metric = workloads.metric_of(kind)
    s = metric.fmt(p.value)
    if p.low is not None and p.high is not None:
        s += f" [{metric.fmt(p.low)}, {metric.fmt(p.high)}]"
    return ("**▲** " if new_level else "") + s


def _simulation(view: hist.HistoryView) -> str:
    sim = hist.simulated_rates(view)
    if sim is None:
        return "No release has two samples or more: no step detection and no simulation."
    return (f"Simulated with the measured noise (median within-release sd of the log samples {sim.log_sd:.4f}; "
            f"{sim.releases} releases, {sim.n} samples each; {sim.reps} series, seeded): a flat series gains a change "
            f"point in {sim.flat:.1%} of series; a {sim.step:.0%} step in the middle is found at its release in "
            f"{sim.found:.1%}.")


def history_md(st: Study) -> str:
    view = history_section(st)
    if view is None:
        return ""
    rec = view.record
    why = _why_missing(view, st)
    releases = [(r.leg, r.version) for r in rec.releases]
    out = ["### Release history", "",
           f"Scenario `{rec.scenario}` on every release of `{rec.dist}` it names, each on leg `{rec.template}`'s "
           f"stack with only the release changed (or the release's reviewed leg file). Design: **{rec.design}** — "
           f"{rec.design_reason}. Per (model, workload) the canonical value per release with the 95% interval of "
           "the geometric mean of its samples; **▲** marks a release where the step detection finds a new level "
           "(a penalised piecewise-constant fit on the log samples, docs/history.md).", "",
           "| model | workload | " + " | ".join(lb for _, lb in releases) + " |",
           "|---|---|" + "---:|" * len(releases)]
    for s in view.series:
        cells = [_cell(p, s.kind, p.leg in s.change_points, why.get((p.leg, s.model))) for p in s.points]
        out.append(f"| {ticked(s.model)} | {s.workload} | " + " | ".join(cells) + " |")
    out += ["", "#### Steps between consecutive releases", "",
            "| model | workload | step | ratio | 95% CI | verdict | new level |", "|---|---|---|---:|---|---|---|"]
    label = dict(releases)
    for s in view.series:
        for old, new, r in s.steps:
            out.append(f"| {ticked(s.model)} | {s.workload} | {label.get(old, old)}→{label.get(new, new)} | "
                       f"{r.ratio_text.split(' [')[0]} | {r.interval_text} | {r.text} | "
                       f"{'yes' if new in s.change_points else 'no'} |")
    fam = next((r.family_text for s in view.series for _, _, r in s.steps if r.p_adj is not None), None)
    rules = sorted({r.rule_text.split(":")[0].split(" over ")[0] for s in view.series for _, _, r in s.steps
                    if r.ratio is not None})
    out += ["", "_Ratios above 1: the newer release faster. Each step's verdict is the study's, as every table "
                f"prints it ({'; '.join(rules) or 'no rule applied'}"
                + (f"; decided together by {fam}" if fam else "") + f"); equivalent: within ±{view.margin:.0%}._"]
    dis = [f"- {ticked(s.model)} {s.workload}, {d}" for s in view.series for d in s.disagreements]
    agree = ("The step tests and the step detection agree on every step." if any(s.sigma for s in view.series)
             else "No step detection: no release has two samples or more.")
    out += ["", ("Where the two passes disagree:" if dis else agree),
            *dis, "", _simulation(view), "", f"Finer builds for a bisect into a changed step: {rec.finer_builds}.", "",
            *_bisects(rec), *_costs(view, st),
            "| release | leg | status | compat id | torch | transformers | why not measured |",
            "|---|---|---|---|---|---|---|"]
    for r in rec.releases:
        reason = _reason_line(r.reason).replace("|", "\\|") if r.reason else ""
        out.append(f"| {r.version} | {r.leg}{' (derived)' if r.derived else ''} | {r.status} | "
                   f"{r.compat_id or '—'} | "
                   f"{r.stack.get('torch', '—')} | {r.stack.get('transformers', '—')} | {reason} |")
    return "\n".join(out) + "\n"


def _costs(view: hist.HistoryView, st: Study) -> list[str]:
    """What each measured release cost here: its env's build, its engines' starts, its timed regions
    and the runs' wall time (engine start and teardown included), from the run records."""
    df = st.ds.records
    if df.empty:
        return []
    df = df[df["series"] == st.canon.series] if "series" in df.columns else df
    out = ["What each release cost on this host (run records; build from history.json):", "",
           "| release | env | runs | engine starts | engine start, median (s) | timed (s) | runs' wall (s) |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for r in view.record.releases:
        d = df[df["leg"] == r.leg]
        if r.status != "measured" or d.empty:
            continue
        # A run that found its group's engine up records 0 s of engine start: count each engine once.
        starts = d.loc[d["engine_position"].fillna(1) == 1, "engine_init_s"].dropna()
        env = ("—" if r.build_s is None else
               f"{'found' if r.env_reused else 'built'} in {r.build_s:.1f} s")
        out.append(f"| {r.version} | {env} | {len(d)} | {len(starts)} | "
                   f"{starts.median():.0f} | {d['timed_s'].sum():.0f} | {d['wall_s'].sum():.0f} |"
                   if len(starts) else
                   f"| {r.version} | {env} | {len(d)} | 0 | — | {d['timed_s'].sum():.0f} | {d['wall_s'].sum():.0f} |")
    return [*out, ""]


def _bisects(rec) -> list[str]:
    """The bisects the sweep ran into changed steps (their full records are in the bisect section)."""
    if not rec.bisects:
        return []
    out = ["Bisected changed steps (the search runs on its own after the history is measured):", "",
           "| model | workload | step | verdict | builds searched | conclusion | record |", "|---|---|---|---|---|---|---|"]
    for b in rec.bisects:
        out.append(f"| {ticked(b.model)} | {b.workload} | {b.step} | {b.verdict} | {', '.join(b.between)} | "
                   f"{b.conclusion.replace('|', chr(92) + '|')} | {'`' + b.record + '`' if b.record else '—'} |")
    return [*out, ""]


def history_figures(st: Study) -> list:
    from harness.publish.figures import history_lines

    view = history_section(st)
    if view is None:
        return []
    figs = []
    for s in view.series:
        frame = pd.DataFrame([{"leg": p.leg, "label": p.label, "value": p.value, "low": p.low, "high": p.high}
                              for p in s.points])
        metric = workloads.metric_of(s.kind)
        figs.append(history_lines(frame, title=f"{s.model}, {s.workload}", unit=metric.unit,
                                  change_points=s.change_points, levels=s.levels))
    return figs
