"""The serve crosscheck as text: the study's serve-crosscheck.md and `harness check serve`'s output, one
table per (leg, model, workload) of harness ÷ vLLM at every load point (harness.experiments.serve_crosscheck)."""

from __future__ import annotations

from collections.abc import Sequence

from harness.schema.serve_crosscheck import TARGET_BAND, Comparison, PointSummary, ServeCrosscheckRecord

# What differs between the two clients, said at the head of the view (and kept in each record's notes).
NOTES = [
    "Prompts: same count and lengths, different token ids. vLLM's random dataset draws its own "
    "(consecutive ids from a random offset, seeded with the point's seed) and sends them as text "
    "that the server tokenizes; the harness sends token-id lists.",
    "Clients: vLLM's benchmark runs in the leg's environment (the leg's Python and aiohttp), the "
    "harness's load generator in the harness's environment.",
    "One server per repeat, warmed once by the workload's warm-up requests; at each point both "
    "clients in turn, the first alternating by point and repeat. vLLM's ready check and warm-ups "
    "stay off (their defaults), so its first prompt is not sent twice.",
]


def fmt_value(v: float | None, pattern: str) -> str:
    return "—" if v is None else pattern.format(v)


def point_label(concurrency: int, rate: float | None) -> str:
    return f"c={concurrency} rate={'inf' if rate is None else f'{rate:g}'}"


def _median(xs: Sequence[float]) -> float | None:
    import statistics

    return statistics.median(xs) if xs else None


def _ratio_cell(c: Comparison) -> str:
    if c.ratio is None:
        return "—"
    if c.ci_low is not None and c.ci_high is not None:
        # The band column is the point's one answer (does the harness agree with vLLM?); here only a
        # difference the interval decides is named, so "undecided" never stands beside "within".
        said = f" {c.verdict}" if c.verdict in ("harness higher", "harness lower") else ""
        return f"{c.ratio:.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}]{said}"
    return f"{c.ratio:.3f} ({c.verdict})"


def _band_cell(s: PointSummary) -> str:
    """The band column in words: a side only when the whole interval lies there."""
    o, lo, hi = s.output_tok_s, 1 - TARGET_BAND, 1 + TARGET_BAND
    if s.band == "below" or s.band == "above":
        return f"outside ({s.band})"
    if s.band == "undecided" and o.ci_low is not None and o.ci_high is not None:
        if o.ci_low < lo and o.ci_high > hi:
            return "undecided (interval wider than the band)"
        return f"undecided (interval crosses {lo if o.ci_low < lo else hi:.2f})"
    if s.band == "no interval":
        return f"no interval ({o.verdict})"
    return s.band or "—"


def _pair_cell(c: Comparison | None) -> str:
    if c is None:
        return "—"
    h, v = _median(c.harness), _median(c.vllm)
    return f"{fmt_value(h, '{:.2f}')} / {fmt_value(v, '{:.2f}')} ({fmt_value(c.ratio, '{:.3f}')})"


def crosscheck_md(records: Sequence[ServeCrosscheckRecord]) -> str:
    lines = ["# Harness vs vLLM's serve benchmark", "",
             "The same server, one per repeat; at each load point the harness's load generator and vLLM's "
             "`bench serve` (the leg's own, run with the leg's Python) one after the other. Ratios are "
             "harness ÷ vLLM of the medians over repeats; the interval and verdict are the project's rule "
             f"(Welch's t on log values) with 2 or more repeats per side. Target: 1.00 ± {TARGET_BAND:.2f}, judged "
             "by the interval: within only when the whole 95% interval lies inside the band, outside only when "
             "the whole interval lies outside it, undecided when it crosses an edge; a point with fewer than 2 "
             "repeats on a side has no interval and is not judged. The p99 columns are the tail an SLO "
             "judges: where the clients are compared at a capacity, they say whether both saw the SLO held.", ""]
    lines += [f"- {n}" for n in NOTES] + [""]
    lines += ["| leg | model | workload | point | repeats harness / vLLM | harness out tok/s | vLLM out tok/s | "
              f"harness ÷ vLLM [95% CI] | within ±{TARGET_BAND:.0%} (whole CI) | median TPOT ms harness / vLLM (÷) | "
              "median TTFT ms harness / vLLM (÷) | median ITL ms harness / vLLM (÷) | "
              "p99 TTFT ms harness / vLLM (÷) | p99 TPOT ms harness / vLLM (÷) |",
              "|---|---|---|---|---:|---:|---:|---|---|---|---|---|---|---|"]
    failures: list[str] = []
    for rec in records:
        for s in rec.summary:
            o = s.output_tok_s
            lines.append(f"| {rec.leg} | `{rec.model}` | {rec.workload} | {point_label(s.concurrency, s.request_rate)} | "
                         f"{len(o.harness)} / {len(o.vllm)} | {fmt_value(_median(o.harness), '{:,.1f}')} | "
                         f"{fmt_value(_median(o.vllm), '{:,.1f}')} | {_ratio_cell(o)} | {_band_cell(s)} | "
                         f"{_pair_cell(s.tpot_p50_ms)} | {_pair_cell(s.ttft_p50_ms)} | {_pair_cell(s.itl_p50_ms)} | "
                         f"{_pair_cell(s.ttft_p99_ms)} | {_pair_cell(s.tpot_p99_ms)} |")
            failures += [f"{rec.leg} `{rec.model}` {rec.workload} {point_label(s.concurrency, s.request_rate)} {x}"
                         for x in s.excluded]
    if failures:
        lines += ["", "Left out (not measured, or not every request completed):", ""] + [f"- {f}" for f in failures]
    # A record's own notes (where its points came from, repeats carried over), each once with its records.
    own: dict[str, list[ServeCrosscheckRecord]] = {}
    for rec in records:
        for n in rec.notes:
            if n not in NOTES:
                own.setdefault(n, []).append(rec)
    if own:
        lines += ["", "Notes:", ""] + [f"- {', '.join(r.leg for r in rs)} `{rs[0].model}` {rs[0].workload}: {n}"
                                       for n, rs in own.items()]
    versions = sorted({f"{r.leg}: vLLM {r.vllm}" for r in records if r.vllm})
    if versions:
        lines += ["", "Versions: " + "; ".join(versions) + "."]
    return "\n".join(lines) + "\n"
