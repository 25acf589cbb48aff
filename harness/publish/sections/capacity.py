"""The capacity section (inside "Serving" on the page): per model and workload, each leg's capacity at
the SLO with its interval over repeats, the search's method, interval and pass rule as recorded, the
goodput there, the version ratio of capacities with the project's significance rule and verdict, and the
cost per million output tokens at capacity with the price and its source (study.yaml `price:`).
The latency-vs-load figure draws every probe with the SLO."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.analyze import capacity as acap
from harness.analyze import serve as aserve
from harness.analyze.tables import _legs, study_alpha, study_margin
from harness.analyze.verdicts import study_verdicts
from harness.publish.study import Study


@dataclass(frozen=True, kw_only=True)
class CapacityView:
    searches: pd.DataFrame      # analyze.capacity.searches: one row per canonical run that searched
    legs: pd.DataFrame          # analyze.capacity.per_leg
    ratios: pd.DataFrame        # analyze.capacity.ratios between `old` and `new`
    probes: pd.DataFrame        # analyze.capacity.probes: the latency-vs-load curve
    curves: pd.DataFrame        # analyze.capacity.pass_curves: how often a probe passes, against its load
    bounds: dict[tuple[str, str], list[tuple[str, float, float]]]
    old: str | None
    new: str | None
    price: aserve.Price | None
    margin: float
    margin_source: str


def capacity(st: Study) -> CapacityView:
    found = acap.searches(st.canon)
    price = aserve.price_of(st.canon) if len(found) else None
    legs = [n for n, _ in _legs(st.canon)]
    old, new = (legs[0], legs[1]) if len(legs) >= 2 else (None, None)
    margin, source = study_margin(st.canon)
    ratios = (acap.ratios(found, old, new, margin=margin, alpha=study_alpha(st.canon)) if old and new and len(found)
              else pd.DataFrame())
    probes = acap.probes(st.canon)
    return CapacityView(searches=found, legs=acap.per_leg(found, price), ratios=ratios, probes=probes,
                        curves=acap.pass_curves(probes), bounds=acap.slo_bounds(st.canon), old=old, new=new, price=price, margin=margin,
                        margin_source=source)


def _n(v: object, digits: int = 2) -> str:
    return "—" if v is None or pd.isna(v) else f"{v:,.{digits}f}"


def _slo_text(bounds: list[tuple[str, float, float]], declared: dict) -> str:
    parts = [f"p{p:g} {m.removesuffix('_ms').upper()} ≤ {mx:g} ms" for m, p, mx in bounds]
    share = ((declared or {}).get("slo") or {}).get("goodput_share_min")
    if share is not None:
        parts.append(f"good share ≥ {share:g}")
    return ", ".join(parts)




def capacity_md(st: Study) -> str:
    v = capacity(st)
    if v.searches.empty:
        return ""
    label = st.canon.study.label
    out = ["## Serving capacity at the SLO\n",
           "Per leg, the highest offered load at which the declared SLO holds, found by the recorded search "
           "(docs/capacity.md); the capacity is the highest load that passed. Over repeats: the median and a 95% "
           "interval (t on log capacities, its spread at least the search grid's rounding and its top raised by "
           "the last bracket's width, since each capacity is that bracket's lower end); only searches that "
           "bracketed a capacity (`found`, or `max_probes` with a wider bracket) enter it, the others are counted "
           "by status.\n"]
    if v.price is not None:
        src = v.price.source or "study.yaml states no source"
        out.append(f"Cost per million output tokens at capacity: {v.price.per_hour:g} USD per {v.price.unit} "
                   f"(source: {src}) over the output tokens per second measured at the capacity probe.\n")
    for (model, wl), g in v.legs.groupby(["model", "workload"], sort=False):
        s = v.searches[(v.searches["model"] == model) & (v.searches["workload"] == wl)]
        first = s.iloc[0]
        declared = next((r.serve.capacity.declared for r in acap.search_runs(st.canon)
                         if r.model == model and r.workload == wl), {})
        unit = "req/s" if first["axis"] == "request_rate" else "in flight"
        imgs = s["images_sha256"].dropna().unique()
        out += [f"### {model} / {wl}\n",
                f"SLO: {_slo_text(v.bounds.get((model, wl), []), declared)}. Search: {first['method']}. "
                f"Each probe's percentile interval: {first['interval']}; a probe passes on the "
                f"{'point estimate' if first['pass_rule'] == 'point' else 'upper end of the interval'}."
                + (f" Images: the same set on every run (sha256 {imgs[0][:16]}…)." if len(imgs) == 1 else
                   f" Images: {len(imgs)} different sets across runs." if len(imgs) > 1 else "") + "\n"]
        cost = v.price is not None and "usd_per_m_output_tok" in g
        head = (f"| leg | capacity ({unit}) | 95% interval | repeats | searches | output tok/s at capacity "
                "| goodput req/s |" + (f" USD per M output tok |" if cost else ""))
        out += [head, "|" + "---|" * (head.count("|") - 1)]
        for _, r in g.iterrows():
            ci = f"[{_n(r['low'])}, {_n(r['high'])}]" if r["low"] is not None and not pd.isna(r["low"]) else "—"
            row = (f"| {label(r['leg'])} | {_n(r['capacity'])} | {ci} | {int(r['repeats'])} | {r['statuses']} "
                   f"| {_n(r['output_tok_s'], 1)} | {_n(r['goodput_req_s'])} |")
            out.append(row + (f" {_n(r['usd_per_m_output_tok'])} |" if cost else ""))
        out.append("")
        curves = v.curves[(v.curves["model"] == model) & (v.curves["workload"] == wl)] if len(v.curves) else v.curves
        if len(curves) and curves["overlap"].any():
            out.append(_curves_md(curves, label, unit))
        # The study's verdict for the cell (harness.analyze.verdicts), as the answer and the tables print it.
        sv = study_verdicts(st.canon)
        for cv in (c for c in sv.cells if c.capacity and (c.model, c.workload) == (model, wl)):
            out.append(f"Capacity ratio {cv.new_label} / {cv.old_label}: {cv.ratio_text} — {cv.text} "
                       f"(above 1.00x the newer leg holds the SLO at a higher load; {cv.rule_text}; equivalence "
                       f"margin ±{v.margin:.0%} from {v.margin_source}; decided by {cv.family_text}).\n")
    return "\n".join(out) + "\n"


def _curves_md(curves: pd.DataFrame, label, unit: str) -> str:
    """How repeatable a probe is, per leg: shown where some pass lies above some failure."""
    parts = []
    for r in curves.itertuples():
        head = f"{label(r.leg)}: {r.probes} probes, {r.passed} passed"
        if r.overlap:
            parts.append(f"{head}; half pass at {r.mid:.3g} {unit}, 90% at {r.p90:.3g} and 10% at {r.p10:.3g}")
        else:
            gap = (f"highest pass {r.high_pass:.3g}, lowest failure {r.low_fail:.3g}"
                   if r.high_pass is not None and r.low_fail is not None else "all on one side")
            parts.append(f"{head}; outcomes monotone in load ({gap})")
    return ("Pass curve over every probe of every search: " + "; ".join(parts) + ". Some probe passed at a "
            "higher load than another failed at, so a probe's outcome at a load does not repeat (from probe to probe, "
            "or from one search's server to another's), and a search, which takes each outcome as given, lands "
            "wherever its probes fell: the wider the 90%-to-10% range, "
            "the wider the searches spread. A diagnostic, not a verdict (logistic in log load by maximum "
            "likelihood, `harness.analyze.capacity.pass_curves`; the searches chose their probes from earlier "
            "outcomes, and a server's probes share that server).\n")


def capacity_figures(st: Study) -> list:
    from harness.publish.figures import latency_vs_load

    v = capacity(st)
    if v.probes.empty:
        return []
    labels = {n: lab for n, lab in _legs(st.canon)}
    figs = []
    for (model, wl), g in v.legs.groupby(["model", "workload"], sort=False):
        caps = {r["leg"]: r["capacity"] for _, r in g.iterrows() if r["capacity"] is not None and not pd.isna(r["capacity"])}
        figs.append(latency_vs_load(v.probes, model=model, workload=wl, bounds=v.bounds.get((model, wl), []),
                                    capacities=caps, labels=labels))
    return figs
