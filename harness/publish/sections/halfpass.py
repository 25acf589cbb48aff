"""The half-pass section (inside "Serving" on the page): for the serve workloads study.yaml lists under
`half_pass`, each server's fitted line of log p99 against log load per SLO bound, where it crosses the
bound (the rate its median probe passes half the time, harness.analyze.halfpass), which servers are
censored, the study's verdict on the legs' ratio as every view prints it, and how many servers a leg
would bring the ratio's interval within ±5% at the spread between servers measured here."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.analyze import halfpass as ahp
from harness.analyze import serve as aserve
from harness.analyze.verdicts import study_verdicts
from harness.publish.study import Study


@dataclass(frozen=True, kw_only=True)
class HalfPassView:
    servers: pd.DataFrame       # analyze.halfpass.per_server over the declared workloads
    sd: float | None            # analyze.halfpass.between_sd: log half-pass rates between servers of a leg
    df: int
    sd_interval: tuple[float, float] | None   # its 95% interval (chi-square)
    servers_for_width: int | None             # servers a leg for an interval within ±5% at `sd`
    servers_range: tuple[int | None, int | None] | None   # the same at the ends of sd_interval
    ttft_split: pd.DataFrame    # analyze.serve.ttft_split over the declared workloads (empty without histograms)


def half_pass(st: Study) -> HalfPassView:
    cells = study_verdicts(st.canon).half_pass
    pts = aserve.points(st.canon) if cells else pd.DataFrame()
    servers = ahp.per_server(pts, set(cells)) if cells else pd.DataFrame()
    sd, df = ahp.between_sd(servers)
    ci = ahp.sd_interval(sd, df)
    return HalfPassView(servers=servers, sd=sd, df=df, sd_interval=ci, servers_for_width=ahp.servers_for_width(sd),
                        servers_range=(ahp.servers_for_width(ci[0]), ahp.servers_for_width(ci[1])) if ci else None,
                        ttft_split=aserve.ttft_split(pts, servers) if not servers.empty else pd.DataFrame())


def _most(n: int | None) -> str:
    return "—" if n is None else f"{n:,}" if n < ahp.N_MAX else f"more than {ahp.N_MAX:,}"


def _n(v: object, digits: int = 2) -> str:
    return "—" if v is None or pd.isna(v) else f"{v:,.{digits}f}"


STATUS = {"measured": "measured", "above": "censored: above the grid", "below": "censored: below the grid",
          "no rise": "censored: p99 does not rise with load"}


def half_pass_md(st: Study) -> str:
    v = half_pass(st)
    if v.servers.empty:
        return ""
    label = st.canon.study.label
    out = ["## Half-pass rate at the SLO\n",
           "Per server (one run, one engine instance), every probe of its steady-state grid: for each SLO bound a "
           "least-squares line of log p99 against log offered rate, and the rate where it meets the bound, the rate "
           "at which its median probe passes. The server's half-pass rate is the lowest such crossing. A crossing "
           "more than one grid step beyond the rates probed is a bound, not a measurement, and is left out of the "
           "comparison (censored). The legs are compared over servers, not probes: the probes of one server share "
           "its engine instance (`harness.analyze.halfpass`; docs/capacity.md, \"Half-pass rates\", gives the "
           "rule's simulated error rate under an A/A).\n"]
    sv = study_verdicts(st.canon)
    for (model, wl), g in v.servers.groupby(["model", "workload"], sort=False):
        out += [f"### {model} / {wl}\n",
                "| leg | server | probes | met the SLO | rates (req/s) | TTFT p99: slope, residual sd, crossing, "
                "lack of fit p | TPOT p99: slope, residual sd, crossing, lack of fit p | half-pass rate (req/s) | status |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in g.itertuples():
            out.append(f"| {label(r.leg)} | {r.server} | {r.probes} | {r.met} | {r.rates} "
                       f"| {_n(r.ttft_slope)}, {_n(r.ttft_resid_sd)}, {_n(r.ttft_crossing, 1)}, {_n(r.ttft_lof_p)} "
                       f"| {_n(r.tpot_slope)}, {_n(r.tpot_resid_sd)}, {_n(r.tpot_crossing, 1)}, {_n(r.tpot_lof_p)} "
                       f"| {_n(r.half_pass)} | {STATUS.get(r.status, r.status)} |")
        out.append("")
        out.append("Lack of fit p: the F test of each straight line against the mean log p99 of each rate, where "
                   "rates were probed more than once (— where not). A small p (below 0.05) says log p99 bends "
                   "against log load over the grid, a knee near saturation, and that server's crossing is then "
                   "less to be trusted than its line suggests; the tests are not adjusted for their number.\n")
        for cv in (c for c in sv.cells if c.half_pass and (c.model, c.workload) == (model, wl)):
            family = f"; decided by {cv.family_text}" if cv.family_size else ""
            out.append(f"Half-pass ratio {cv.new_label} / {cv.old_label}: {cv.ratio_text} — {cv.text} "
                       f"(above 1.00x the newer leg holds the SLO at a higher load; {cv.rule_text}{family}).\n")
    out += _where_ttft_goes(st, v.ttft_split)
    if v.sd is None:
        out.append("No leg has two measured servers, so the spread between servers is unknown here, and so is the "
                   "number of servers a leg that would bring the ratio's interval within ±5%.\n")
    else:
        out.append(f"Between servers of one leg the log half-pass rate spreads by sd {v.sd:.3f} ({v.df} degree"
                   f"{'' if v.df == 1 else 's'} of freedom, the fit's own noise included). At that spread, an interval "
                   f"within ±5% needs about {v.servers_for_width} servers a leg. The spread itself is known only to "
                   f"[{v.sd_interval[0]:.3f}, {v.sd_interval[1]:.3f}] (95%, chi-square), which puts that number "
                   f"between {v.servers_range[0]} and {_most(v.servers_range[1])}.\n")
    return "\n".join(out) + "\n"


def _pct(v: float | None) -> str:
    return "—" if v is None or pd.isna(v) else f"{v:.0%}"


def _where_ttft_goes(st: Study, split: pd.DataFrame) -> list[str]:
    """Per leg and rate of the grids judged here, analyze.serve.ttft_split: the mean time to first token in
    the server split into scheduler wait, prefill and the front end's rest, beside the client's median
    p99 TTFT. Empty for records without the server's histograms."""
    if split.empty:
        return []
    rows = ["Where the time to first token goes, by rate: the mean over the probes of each probe's mean time "
            "to first token in the server (from its arrival there), its wait in the scheduler and its prefill, "
            "and what TTFT holds beyond the two, the front end's time (from the request's rendering in the server "
            "on: input processing, the hand-over to the engine core, and the first token's way back through the "
            "front end's output processing; the HTTP receive before it is not in any of them). Means, from the "
            "server's histograms, because they add up where percentiles do not; the client's p99 TTFT (median "
            "over the probes) beside them.\n",
            "| model · workload | leg | rate (req/s) | probes | client p99 TTFT ms (median) "
            "| engine mean ms: TTFT = queue + prefill + front end | front end's share of TTFT |",
            "|---|---|---|---|---|---|---|"]
    label = st.canon.study.label
    for r in split.itertuples():
        rows.append(f"| {r.model} · {r.workload} | {label(r.leg)} | {r.request_rate:g} | {r.probes} "
                    f"| {r.client_ttft_p99_median_ms:,.0f} | {r.engine_ttft_mean_ms:,.0f} = {r.engine_queue_mean_ms:,.0f} "
                    f"+ {r.engine_prefill_mean_ms:,.0f} + {r.engine_front_mean_ms:,.0f} | {_pct(r.front_share)} |")
    return rows + [""]


def half_pass_figures(st: Study) -> list:
    from harness.publish.figures import half_pass_lines

    v = half_pass(st)
    if v.servers.empty:
        return []
    pts = aserve.points(st.canon)
    labels = {n: st.canon.study.label(n) for n in v.servers["leg"].unique()}
    return [half_pass_lines(pts, v.servers, model=m, workload=w, labels=labels)
            for m, w in v.servers[["model", "workload"]].drop_duplicates().itertuples(index=False)]
