"""Did the two sides of a crosscheck do the same work? Read from each side's own count.

vLLM's side counts the tokens of its request outputs (with its chat backend, the prompt after the
image or video placeholders are expanded) and prints the totals; the harness counts the prompt the
engine processed, placeholders included (workloads.mm.engine_counts). A ratio of two throughputs is
only a comparison of the two tools when these agree: per request, prompt tokens within
PROMPT_TOLERANCE (vLLM's random text is decoded and re-encoded inside a chat template, which moves a
prompt by a token or two) and output tokens equal within OUTPUT_TOLERANCE (both ignore EOS). Anything
else is other work: a text-only prompt where images were asked (vLLM's random-mm without a dataset
path) loses every placeholder token, tens to hundreds per request, and is refused, not printed.

Also here: what vLLM's side spends on transport that the harness's does not (worker/transport.py),
as a share of its timed region, reported beside the ratio, never folded into it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from harness.schema import record

PROMPT_TOLERANCE = 0.03
OUTPUT_TOLERANCE = 0.005


def per_request(r: record.RunRecord) -> tuple[float | None, float | None]:
    """(prompt, output) tokens per request of one run, as its own side counted them."""
    w = r.work
    if not w.num_seqs:
        return None, None
    return (w.prompt_tokens / w.num_seqs if w.prompt_tokens is not None else None,
            w.output_tokens / w.num_seqs if w.output_tokens is not None else None)


def _median(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def work_check(ours: Sequence[record.RunRecord], theirs: Sequence[record.RunRecord]) -> dict[str, Any]:
    """The two sides' tokens per request (medians over their runs) and whether they match; `matched`
    None where a side has no count (records from before vLLM's counts were kept)."""
    h = [per_request(r) for r in ours]
    v = [per_request(r) for r in theirs]
    hp, ho = _median([x[0] for x in h]), _median([x[1] for x in h])
    vp, vo = _median([x[0] for x in v]), _median([x[1] for x in v])
    out: dict[str, Any] = {"harness_prompt_per_request": hp, "vllm_prompt_per_request": vp,
                           "harness_output_per_request": ho, "vllm_output_per_request": vo,
                           "prompt_tolerance": PROMPT_TOLERANCE, "matched": None, "why": None}
    if None in (hp, vp, ho, vo) or not hp or not ho:
        out["why"] = "a side recorded no token count"
        return out
    problems = []
    if abs(vp / hp - 1) > PROMPT_TOLERANCE:
        problems.append(f"prompt tokens per request: harness {hp:,.1f}, vLLM {vp:,.1f} ({vp / hp - 1:+.1%})")
    if abs(vo / ho - 1) > OUTPUT_TOLERANCE:
        problems.append(f"output tokens per request: harness {ho:,.1f}, vLLM {vo:,.1f} ({vo / ho - 1:+.1%})")
    out["matched"] = not problems
    out["why"] = "; ".join(problems) or None
    return out


def transport(theirs: Sequence[record.RunRecord]) -> dict[str, Any]:
    """vLLM's side's decoding of its data URLs (measured apart by the worker), per request and as a
    share of its timed region; empty where the side sent none (text)."""
    parts = [(r.work.inputs.get("transport"), r) for r in theirs]
    parts = [(t, r) for t, r in parts if isinstance(t, dict) and t.get("s_per_request") is not None]
    if not parts:
        return {}
    # Per timed region: a one-engine run's timed_s sums its passes, each of which decoded every request.
    shares = [t["s_per_request"] * r.work.num_seqs / (r.timing.timed_s / (r.work.passes or 1)) for t, r in parts
              if r.work.num_seqs and r.timing.timed_s]
    first = parts[0][0]
    return {"what": first.get("what"), "s_per_request": statistics.median(t["s_per_request"] for t, _ in parts),
            "share_of_vllm_timed": statistics.median(shares) if shares else None,
            "frames_asked": first.get("frames_asked"), "frames_decoded": first.get("frames_decoded")}


def refusal(check: dict[str, Any]) -> str | None:
    """The verdict text of a row whose sides did other work, None where they did the same (or it
    cannot be told)."""
    return f"refused: the two sides did other work ({check['why']})" if check.get("matched") is False else None


def note_md(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Lines under the crosscheck table for rows that are not plain text: the work each side did, the
    refusals, and the transport cost measured apart."""
    lines: list[str] = []
    for r in rows:
        w, t = r.get("work_check") or {}, r.get("transport") or {}
        if r.get("modality", "text") == "text" and w.get("matched") is not False:
            continue
        name = f"{r['leg']} `{r['model']}` {r['workload']} ({r.get('modality', 'text')})"
        if w.get("harness_prompt_per_request") is not None and w.get("vllm_prompt_per_request") is not None:
            lines.append(f"- {name}: tokens per request, harness / vLLM: prompt {w['harness_prompt_per_request']:,.1f}"
                         f" / {w['vllm_prompt_per_request']:,.1f}, output {w['harness_output_per_request']:,.1f} / "
                         f"{w['vllm_output_per_request']:,.1f}: "
                         + ("the same work (prompt within ±{:.0%})".format(w["prompt_tolerance"]) if w.get("matched")
                            else f"**other work, no ratio printed**: {w.get('why')}" if w.get("matched") is False
                            else "not checked (a side kept no count)") + ".")
        if t:
            share = t.get("share_of_vllm_timed")
            lines.append(f"  vLLM's side also decoded its inputs from data URLs inside its timed region ({t['what']}): "
                         f"{t['s_per_request'] * 1000:,.2f} ms per request"
                         + (f", {share:.1%} of its timed region" if share is not None else "")
                         + (f"; frames asked {t['frames_asked']}, decoded {t['frames_decoded']}" if t.get("frames_asked")
                            else "") + ". Measured apart, after its run; not taken out of the ratio.")
    return (["", "Work done by each side (each side's own count) and what only vLLM's side paid:", *lines]
            if lines else [])
