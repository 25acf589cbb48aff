"""The crosscheck's view: its rows as the study's crosscheck.md and the report print them (the table,
each side's work, the pairs, the one-engine rounds, the interval's rule, cold and missing runs)."""

from __future__ import annotations

import math
import statistics

from harness.analyze import significance
from harness.experiments import crosscheck_paired, crosscheck_work
from harness.schema.serve_crosscheck import interval_band


def _fmt(v: float | None, pattern: str = "{:,.0f}") -> str:
    return "—" if v is None else pattern.format(v)


def band_verdict(row: dict, band: float) -> str:
    """The row's ratio against 1 ± band, judged by its whole interval (the serve crosscheck's rule)."""
    side = interval_band(row.get("ratio"), row.get("ci_low"), row.get("ci_high"), band)
    return {"within": "within", "below": "below", "above": "above", "undecided": "undecided (the interval "
            "crosses the band)", "no interval": "no interval"}.get(side or "", "—")


def decide_md(rows: list[dict], band: float) -> list[str]:
    """What would decide each paired row the band leaves undecided: the pairs (one engine: blocks) at
    which, at the spread its pairs showed and if its ratio is the true one, the interval would clear
    1.00 or fit inside the band with the significance module's power (significance.units_to_decide)."""
    said = []
    for r in rows:
        logs = [math.log(x) for x in r.get("pair_ratios") or [] if x > 0]
        side = interval_band(r.get("ratio"), r.get("ci_low"), r.get("ci_high"), band)
        if r.get("method") != "paired" or len(logs) < 2 or side != "undecided":
            continue
        m, sd = statistics.fmean(logs), statistics.stdev(logs)
        n = significance.units_to_decide(m, sd, band)
        unit = "blocks" if r.get("design") == crosscheck_paired.DESIGN_LABEL else "pairs"
        said.append(f"{r['leg']} `{r['model']}` {_workload(r)}: " + (
            f"about {n} {unit} (it has {len(logs)}; sd of the log {unit[:-1]} ratio {sd:.3f}), where the interval "
            + ("would clear 1.00" if significance.decided_how(m, sd, band, n) == "differs" else "would fit inside the band")
            if n is not None else f"no number of {unit} up to 200 (its ratio sits on the band's edge; sd {sd:.3f})"))
    if not said:
        return []
    return ["", f"What would decide the 1 ± {band:g} column where it is undecided, if each row's ratio and spread are "
            f"the true ones ({significance.POWER:.0%} power): " + "; ".join(said) + "."]


def interval_text(row: dict) -> str:
    """The row's interval as the tables print it, naming the rule that gave it."""
    if row.get("ci_low") is None:
        if row.get("ratio") is None:
            return ""
        return " (one engine block: no interval)" if row.get("design") == "one engine" else " (single pass)"
    how = f", paired, {row['n_pairs']} pairs" if row.get("method") == "paired" else ""
    return f" [{row['ci_low']:.3f}, {row['ci_high']:.3f}]{how}"


def _workload(row: dict) -> str:
    return row["workload"] + (" (one engine)" if row.get("design") == crosscheck_paired.DESIGN_LABEL else "")


def crosscheck_md(summary: dict, band: float | None = None) -> str:
    col = f" 1 ± {band:g}? |" if band is not None else ""
    lines = ["| leg | model | workload | harness tok/s (median) | vLLM benchmark tok/s (median) | harness ÷ vLLM "
             "[95% CI] | spread harness / vLLM | timed share of wall |" + col,
             "|---|---|---|---:|---:|---|---|---:|" + ("---|" if band is not None else "")]
    st = statistics
    for r in summary["rows"]:
        ci = interval_text(r)
        med = lambda xs: st.median(xs) if xs else None  # noqa: E731
        spreads = f"{_fmt(r['spread_harness'], '{:.1%}')} / {_fmt(r['spread_vllm'], '{:.1%}')}"
        shown = ("refused: other work" if str(r.get("verdict") or "").startswith("refused")
                 else f"{_fmt(r['ratio'], '{:.3f}')}{ci}")
        lines.append(f"| {r['leg']} | `{r['model']}` | {_workload(r)} | {_fmt(med(r['harness_tok_s']))} | "
                     f"{_fmt(med(r['vllm_tok_s']))} | {shown} | {spreads} | "
                     f"{_fmt(med(r['timed_share_harness']), '{:.1%}')} |"
                     + (f" {band_verdict(r, band)} |" if band is not None else ""))
    if band is not None:
        lines += decide_md(summary["rows"], band)
    lines += crosscheck_work.note_md(summary["rows"])
    pairs = [f"{r['leg']} `{r['model']}` {_workload(r)}: " + ", ".join(f"{x:.3f}" for x in r["pair_ratios"])
             for r in summary["rows"] if len(r.get("pair_ratios") or []) > 1]
    if pairs:
        lines += ["", "Each repeat's pair on its own (harness ÷ vLLM, the two run back to back by one invocation; "
                  "one engine: each engine block's, the geometric mean of its rounds): " + "; ".join(pairs) + "."]
    lines += crosscheck_paired.rounds_md(summary["rows"])
    lines += crosscheck_paired.handover_md(summary["rows"])
    welch = [f"{r['leg']} `{r['model']}` {r['workload']}: {_fmt(w.get('ratio'), '{:.3f}')}"
             + (f" [{w['ci_low']:.3f}, {w['ci_high']:.3f}]" if w.get("ci_low") is not None else "")
             + f", {w.get('verdict')}" for r in summary["rows"] if r.get("method") == "paired" and (w := r.get("welch"))]
    lines += ["", "The interval: " + (
        "where a row has three pairs or more, the paired rule (a t-interval of the geometric mean of the pair "
        "ratios, n − 1 degrees of freedom, tested at 90% of the significance level α (a t-test on a few pairs "
        "runs slightly over its level, so the paired rule is a little stricter; docs/statistics.md): what the two runs of a repeat shared, such as the host "
        "running fast or slow that minute, cancels inside each pair; docs/statistics.md); otherwise Welch's rule over the two sides' "
        "repeats, as between legs." if any(r.get("method") == "paired" for r in summary["rows"])
        else "Welch's rule over the two sides' repeats, as between legs (fewer than three pairs in every row).")]
    if welch:
        lines += ["", "Welch's rule over the same repeats, unpaired (beside the paired interval, not instead of it): "
                  + "; ".join(welch) + "."]
    cold = [f"{r['leg']} `{r['model']}` {r['workload']}: {', '.join(r['cold_runs'])}"
            for r in summary["rows"] if r.get("cold_runs")]
    if cold:
        lines += ["", "Runs timed on an engine that compiled its graphs from an empty cache (the first engine of their "
                  "leg and model on that machine; vLLM's log says so): " + "; ".join(cold) + "."]
    missing = [f"{r['leg']} `{r['model']}` {r['workload']}: {', '.join(r.get('unmeasured') or [])}"
               for r in summary["rows"] if r.get("unmeasured")]
    if missing:
        lines += ["", "Planned but without a finished record (the row summarises the records there were): "
                  + "; ".join(missing) + "."]
    return "\n".join(lines) + "\n"
