"""The serving section: per model, each leg's throughput-vs-interactivity curve with its Pareto points,
and the ratio between the study's first two legs at matched load (the project's one significance rule),
with cost per million output tokens when study.yaml states a price (`price: {per_hour, unit, source}`).
A study whose serve runs searched for their capacity has its own section after it
(harness.publish.sections.capacity); a search's probes are not load points of this one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.analyze import serve as aserve
from harness.analyze.tables import _legs
from harness.publish.study import Study


@dataclass(frozen=True, kw_only=True)
class Serving:
    curve: pd.DataFrame                 # analyze.serve.curve: medians per (model, workload, leg, point), pareto
    ratios: pd.DataFrame                # analyze.serve.ratios between `old` and `new`
    old: str | None
    new: str | None
    price: aserve.Price | None
    slos: tuple[tuple[float, float], ...] = ()   # the (TTFT, TPOT) ms bounds goodput counted against
    repeated: pd.DataFrame | None = None         # analyze.serve.repeated: loads measured twice on one server
    requests: dict[tuple[str, str, str, int, float], int] | None = None   # per (model, workload, leg, c, rate)


def _slos(st: Study) -> tuple[tuple[float, float], ...]:
    out = []
    runs = st.canon.runs
    for d in (runs["run_dir"] if len(runs) and "run_dir" in runs else []):
        rec = st.canon.dataset.record(str(d))
        if rec.serve is not None:
            out.append((rec.serve.slo_ttft_ms, rec.serve.slo_tpot_ms))
    return tuple(sorted(set(out)))


def serving(st: Study) -> Serving:
    pts = aserve.points(st.canon)
    price = aserve.price_of(st.canon)
    legs = [n for n, _ in _legs(st.canon)]
    old, new = (legs[0], legs[1]) if len(legs) >= 2 else (None, None)
    ratios = aserve.ratios(pts, old, new) if old and new else pd.DataFrame()
    requests = ({k: int(v) for k, v in pts.groupby(["model", "workload", "leg", "concurrency", "request_rate"])["requests"]
                 .median().items()} if len(pts) else {})
    return Serving(curve=aserve.curve(pts, price), ratios=ratios, old=old, new=new, price=price,
                   slos=_slos(st) if len(pts) else (), requests=requests, repeated=aserve.repeated(pts))


def _title(model: str, workload: str, many: pd.Series) -> str:
    """A model's heading, naming the workload where the model has more than one serve workload."""
    return f"{model} · {workload}" if many.get(model, 1) > 1 else model


def _rate(v: float) -> str:
    return "∞" if v == float("inf") else f"{v:g}"


def _n(v: object, digits: int = 1) -> str:
    return "—" if v is None or pd.isna(v) else f"{v:,.{digits}f}"


def serving_md(st: Study) -> str:
    s = serving(st)
    if s.curve.empty:
        return ""
    out = ["## Serving under load\n",
           "Each leg's OpenAI-compatible server, driven by the harness's own streaming client (the same for every "
           "leg). Per load point: medians over repeats; TTFT and TPOT are the point's p50 over its requests; "
           "tok/s per user is 1000 / median TPOT. Pareto: no other point of the same leg is better on both axes.\n",
           _load_md(s)]
    cost = s.price is not None and "usd_per_m_output_tok" in s.curve
    many = s.curve.groupby("model")["workload"].nunique()
    for (model, wl), g in s.curve.groupby(["model", "workload"], sort=False):
        head = ("| leg | c | rate | requests | output tok/s | per device | tok/s per user | TTFT p50 / p99 ms "
                "| TPOT p50 / p99 ms | goodput req/s | failed | Pareto |"
                + (" cost per M output tok (USD, illustrative) |" if cost else ""))
        out += [f"### {_title(model, wl, many)}\n", head, "|" + "---|" * (head.count("|") - 1)]
        for _, r in g.iterrows():
            n = (s.requests or {}).get((model, wl, r["leg"], r["concurrency"], r["request_rate"]))
            row = (f"| {st.canon.study.label(r['leg'])} | {int(r['concurrency'])} | {_rate(r['request_rate'])} "
                   f"| {n if n is not None else '—'} | {_n(r['output_tok_s'])} | {_n(r['tok_s_per_device'])} | {_n(r['tok_s_per_user'])} "
                   f"| {_n(r['ttft_p50_ms'])} / {_n(r['ttft_p99_ms'])} | {_n(r['tpot_p50_ms'], 2)} / {_n(r['tpot_p99_ms'], 2)} "
                   f"| {_n(r['goodput_req_s'], 2)} | {int(r['failed'])} | {'yes' if r['pareto'] else ''} |")
            out.append(row + (f" {_n(r['usd_per_m_output_tok'], 2)} |" if cost else ""))
        out.append("")
        rt = s.ratios[(s.ratios["model"] == model) & (s.ratios["workload"] == wl)] if len(s.ratios) else s.ratios
        if len(rt):
            lab = (st.canon.study.label(s.old), st.canon.study.label(s.new))
            out += [f"Ratios at matched load, {lab[1]} vs {lab[0]} (above 1.00x the newer leg is better; 95% interval "
                    "over repeats):\n",
                    "| c | rate | output tok/s | tok/s per user | TTFT p50 | TPOT p50 | goodput |", "|---|---|---|---|---|---|---|"]
            for _, r in rt.iterrows():
                cells = [f"{r[f'{k}_label']} {r[f'{k}_verdict']}" for k, _ in aserve.RATIO_METRICS]
                out.append(f"| {int(r['concurrency'])} | {_rate(r['request_rate'])} | " + " | ".join(cells) + " |")
            out.append("")
    out += _repeated_md(st, s)
    return "\n".join(out) + "\n"


def _repeated_md(st: Study, s: Serving) -> list[str]:
    """Loads a server measured more than once: does a point's outcome at one load repeat?"""
    r = s.repeated
    if r is None or r.empty:
        return []
    out = ["### Loads measured more than once on one server\n",
           "Each point its own seeded prompts and arrivals. Met: the point's p99 TTFT and p99 TPOT within the "
           "record's bounds, as a capacity search judges a probe. The spreads are standard deviations of log p99 "
           "TTFT (0.10 is about 10%), within a server and between servers (one-way random-effects estimates; "
           "the between-server one rests on as few servers as the row names). A grid's point draws its prompts "
           "and arrivals from the same seed on every server, so where every server measured the same seeds, "
           "the within-server spread is split: the arrival draw's part (the seeds differ, the same on every "
           "server) and the rest (one draw measured again; seeds by servers, two-way estimates). Two legs "
           "probed with the same seeds share the draw's part. Engine: the server's own stats lines over the "
           "points (requests waiting in its scheduler and KV cache use, at most; — where the server logged "
           "none inside a point): a queue there means the engine itself was saturated, none with a long TTFT "
           "points at the front end or the client. Client lag: how late the client's requests left against their "
           "schedule, p99, at most over the points (— in records older than schema 12); a late client would "
           "show there. The last two columns read the server's own histograms (vLLM's /metrics, over each point's "
           "window, its uncounted requests included; — in records older than schema 13). Engine p99 bucket: "
           "the bucket bounds the points' p99 time to first token fell in (from arrival in the server), and "
           "the bucket edge every point's p99 scheduler wait and prefill time lay under; a histogram knows no "
           "more of a p99 than its bucket. Engine mean: the mean over the points of each point's mean time "
           "to first token, wait in the scheduler and prefill time, and what the first holds beyond the other "
           "two, the front end's time (from the request's rendering on: input processing, the hand-over to "
           "the engine core and the first token's way back through the output processing); means, because "
           "they add up where percentiles do not.\n",
           "| model · workload | leg | c | rate | points (servers) | met the SLO at p99 | p99 TTFT ms min / median / max "
           "| good share min–max | sd log p99 TTFT within / between | within: draw / rest | engine: waiting / KV at most | client lag p99 ms "
           "| engine p99 bucket ms: TTFT / queue / prefill | engine mean ms: TTFT = queue + prefill + front end |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in r.itertuples():
        sd = " / ".join("—" if v is None or pd.isna(v) else f"{v:.3f}" for v in (x.sd_within, x.sd_between))
        split = " / ".join("—" if v is None or pd.isna(v) else f"{v:.3f}" for v in (x.sd_draw, x.sd_rest))
        out.append(f"| {x.model} · {x.workload} "
                   f"| {st.canon.study.label(x.leg)} | {int(x.concurrency)} | {_rate(x.request_rate)} "
                   f"| {x.points} ({x.servers}) | {x.met} of {x.points} | {_n(x.ttft_p99_min, 0)} / {_n(x.ttft_p99_median, 0)} "
                   f"/ {_n(x.ttft_p99_max, 0)} | {x.good_share_min:.2f}–{x.good_share_max:.2f} | {sd} | {split} "
                   f"| {_engine(x)} | {_n(x.send_lag_p99_max_ms, 0)} "
                   f"| {_buckets(x)} | {_means(x)} |")
    return out + [""]


def _engine(x: Any) -> str:
    """A repeated-loads row's engine cell (analyze.serve.repeated): largest queue / fullest KV cache."""
    if x.engine_waiting_max is None or pd.isna(x.engine_waiting_max):
        return "—"
    return f"{int(x.engine_waiting_max):,} / {x.engine_kv_max_pct:.0f}%"


def _buckets(x: Any) -> str:
    """A repeated-loads row's engine p99 cell: TTFT's bucket range / queue's and prefill's upper edges."""
    if x.engine_ttft_p99_lo_min_ms is None or pd.isna(x.engine_ttft_p99_lo_min_ms):
        return "—"
    return (f"{x.engine_ttft_p99_lo_min_ms:,.0f}–{x.engine_ttft_p99_hi_max_ms:,.0f} / "
            f"≤ {_n(x.engine_queue_p99_hi_max_ms, 0)} / ≤ {_n(x.engine_prefill_p99_hi_max_ms, 0)}")


def _means(x: Any) -> str:
    """A repeated-loads row's engine mean cell: TTFT = queue + prefill + the front end's rest."""
    t, q, p, f = x.engine_ttft_mean_ms, x.engine_queue_mean_ms, x.engine_prefill_mean_ms, x.engine_front_mean_ms
    if any(v is None or pd.isna(v) for v in (t, q, p, f)):
        return "—"
    return f"{t:,.0f} = {q:,.0f} + {p:,.0f} + {f:,.0f}"


def _load_md(s: Serving) -> str:
    """What each point's load is, what goodput counts, and what the cost column is priced at."""
    text = ("Load: `c` is the concurrency (at most that many requests in flight at once), "
            "`rate` the request rate the client paces to (∞: no pacing, only the concurrency bound), "
            "`requests` how many requests the point sent (median over repeats).")
    if s.slos:
        bounds = "; ".join(f"TTFT ≤ {t:g} ms and TPOT ≤ {p:g} ms" for t, p in s.slos)
        text += f" Goodput: requests per second that met both service-level objectives, {bounds}."
    if s.price is not None:
        per = "per GPU of the run" if s.price.devices(2) == 2 else "per machine"
        text += (f" Cost: output tokens priced at USD {s.price.per_hour:g} per {s.price.unit} ({per}), an "
                 "illustrative price that study.yaml states, not a quote and not measured; the cost scales "
                 "inversely with the measured throughput and says nothing beyond it.")
    return text + "\n"


def serving_figures(st: Study) -> list:
    from harness.publish.figures import serve_curve

    s = serving(st)
    device = "GPU" if st.canon.runs["device"].astype(str).str.contains("GPU|NVIDIA|B200|H200", regex=True).any() \
        else "CPU host"
    if s.curve.empty:
        return []
    many = s.curve.groupby("model")["workload"].nunique()
    return [serve_curve(g.assign(model=_title(m, wl, many)), model=_title(m, wl, many), device=device)
            for (m, wl), g in s.curve.groupby(["model", "workload"], sort=False)]
