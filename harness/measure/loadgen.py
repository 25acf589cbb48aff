"""The serving load generator: one small async client, identical for every leg.

It runs in the harness's own environment (never the leg's), streams `/v1/completions` with prompts
given as token-id lists (or `/v1/chat/completions` with a prompt given as a chat request, `{"messages":
[...]}`: the image serve workload), and times each request the way vLLM's serve benchmark does
(vllm/benchmarks/lib/endpoint_request_func.py), so the two can be compared on one server:
  TTFT  - request sent to the first streamed chunk that carries a choice;
  ITL   - the gaps between consecutive such chunks;
  E2EL  - request sent to the last such chunk;
  TPOT  - (E2EL - TTFT) / (output tokens - 1), per request with more than one output token;
output tokens are the server's own `usage.completion_tokens` (stream_options.include_usage).
A point's duration runs from its first request's scheduled send to its last completion; warm-up
requests are sent before it and never enter it. A paced point may be held in steady state
(`run_point(lead=Lead(...))`, the workload's lead_in_s and lead_out): requests at the same rate that are
sent but never counted, before its counted requests (so that none meets a server still filling) and
after them until the last counted one has finished (so that none meets a server already draining); they
share the concurrency bound with the counted ones. The client's CPU time is counted over `run_point`
after `prepare`, so the HTTP library's first import is never charged to a point.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

import numpy as np

CLIENT = "harness-loadgen"
PERCENTILES = (50, 90, 99)


def client_info() -> dict[str, str]:
    from harness import __version__

    return {"name": CLIENT, "version": __version__, "aiohttp": version("aiohttp")}


@dataclass(kw_only=True)
class RequestResult:
    ok: bool = False
    error: str = ""
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    latency_s: float | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    sent_at: float = 0.0
    # How late the request left against its schedule: waiting for the concurrency bound, or a client
    # too busy to send on time. TTFT counts from the send, so a late client hides here, not there.
    send_lag_s: float | None = None


Prompt = list[int] | dict[str, Any]   # token ids for /v1/completions; a chat request for /v1/chat/completions
CHAT_PATH, COMPLETIONS_PATH = "/v1/chat/completions", "/v1/completions"


def endpoint(prompt: Prompt) -> str:
    return CHAT_PATH if isinstance(prompt, dict) else COMPLETIONS_PATH


def payload_of(prompt: Prompt, *, model: str, max_tokens: int) -> dict[str, Any]:
    # A chat request streams `choices[].delta` chunks; each one carrying a choice is timed as a
    # completions chunk is (vLLM's chat benchmark does the same), and usage gives the token counts.
    body: dict[str, Any] = {"messages": prompt["messages"]} if isinstance(prompt, dict) else {"prompt": prompt}
    return {"model": model, **body, "max_tokens": max_tokens, "temperature": 0.0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}


async def one_request(session: Any, url: str, *, model: str, prompt: Prompt, max_tokens: int,
                      timeout_s: float) -> RequestResult:
    import aiohttp

    payload = payload_of(prompt, model=model, max_tokens=max_tokens)
    out = RequestResult(prompt_tokens=0 if isinstance(prompt, dict) else len(prompt))
    st = time.perf_counter()
    out.sent_at = st
    last = st
    usage_tokens: int | None = None
    chunks = 0
    try:
        async with session.post(url, json=payload, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                out.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return out
            async for raw in resp.content:
                line = raw.strip()
                if not line:
                    continue
                data = line.decode("utf-8").removeprefix("data: ")
                if data == "[DONE]":
                    continue
                msg = json.loads(data)
                if msg.get("choices"):
                    now = time.perf_counter()
                    if chunks == 0:
                        out.ttft_s = now - st
                    else:
                        out.itl_s.append(now - last)
                    last = now
                    chunks += 1
                if msg.get("usage"):
                    usage_tokens = msg["usage"].get("completion_tokens")
                    if isinstance(prompt, dict):   # a chat prompt's tokens are the server's count
                        out.prompt_tokens = msg["usage"].get("prompt_tokens") or 0
    except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError, UnicodeDecodeError, OSError) as e:
        out.error = f"{type(e).__name__}: {e}"[:300] or type(e).__name__
        return out
    if chunks == 0:
        out.error = "stream ended without a token"
        return out
    out.ok = True
    out.latency_s = last - st
    out.output_tokens = usage_tokens if usage_tokens is not None else chunks
    return out


ARRIVALS = ("harness", "vllm")


def _gaps(n: int, rate: float, burstiness: float, draw: Callable[[float, float], float]) -> list[float]:
    """n gaps between arrivals: gamma of shape `burstiness` and mean 1/rate (burstiness 1: exponential,
    a Poisson process; inf: every gap exactly 1/rate). `draw(shape, scale)` is one gamma draw."""
    if math.isinf(burstiness):
        return [1.0 / rate] * n
    return [draw(burstiness, 1.0 / (rate * burstiness)) for _ in range(n)]


def arrival_offsets(n: int, rate: float | None, seed: int, *, arrivals: str = "harness",
                    burstiness: float = 1.0) -> list[float]:
    """When each request is due, in seconds from the point's start. Without a rate, all at 0. With one:
    - `harness` (the default): the first request at 0, each next one a seeded gap later (exponential,
      mean 1/rate, as every serve record before `arrivals` existed; gamma where burstiness is not 1);
    - `vllm`: the schedule of vLLM's `bench serve` (`get_request` in vllm/benchmarks/serve.py, the same
      in 0.24.0 and 0.26.0): every request, the first too, one gamma gap (shape burstiness, mean 1/rate)
      after the one before, then the whole schedule stretched so that the last request is due at exactly
      n / rate. vLLM does that so a run's offered rate does not wander with the seed (a sum of n random
      gaps misses n / rate by a few percent); comparing the two clients at one rate needs it on both.
    The draws are the harness's own (seeded numpy), not vLLM's: the same law and scaling, not the same
    numbers."""
    if arrivals not in ARRIVALS:
        raise ValueError(f"arrivals: {arrivals!r} should be one of {', '.join(ARRIVALS)}")
    if not burstiness > 0:
        raise ValueError(f"burstiness: {burstiness!r} should be greater than 0")
    if rate is None:
        return [0.0] * n
    if arrivals == "harness":
        rng = random.Random(seed)
        # Burstiness 1 keeps the exact draws of the records measured before burstiness existed.
        gaps = ([rng.expovariate(rate) for _ in range(n)] if burstiness == 1.0
                else _gaps(n, rate, burstiness, rng.gammavariate))
        t, out = 0.0, []
        for g in gaps:
            out.append(t)
            t += g
        return out
    gen = np.random.default_rng(seed)
    due = list(itertools.accumulate(_gaps(n, rate, burstiness, lambda k, th: float(gen.gamma(k, th)))))
    if n and due[-1] > 0:
        stretch = (n / rate) / due[-1]
        due = [d * stretch for d in due]
    return due


def lead_in_offsets(lead_in_s: float, rate: float, seed: int, *, burstiness: float = 1.0) -> list[float]:
    """When each uncounted lead-in request is due, in seconds from the lead-in's start: gaps of the point's
    own law (gamma of shape `burstiness`, mean 1/rate), from their own seed, every due time before
    `lead_in_s`, where the counted requests' schedule begins."""
    gen = np.random.default_rng(seed)
    out: list[float] = []
    t = 0.0
    while True:
        t += _gaps(1, rate, burstiness, lambda k, th: float(gen.gamma(k, th)))[0]
        if t >= lead_in_s:
            return out
        out.append(t)


@dataclass(frozen=True, kw_only=True)
class Lead:
    """Uncounted requests that hold a paced point in steady state. `build(count, seed)` gives their prompts
    (the workload's own kind of request); lead-in prompts and gaps draw from the point's seed + 1, lead-out
    ones from seed + 2, so no uncounted request repeats a counted one (the server's prefix cache would
    make it cheaper). Lead-out prompts come from a pool as large as the point's counted requests, reused
    in turn past its end."""
    build: Callable[[int, int], Sequence[Prompt]]
    lead_in_s: float = 0.0        # seconds of arrivals at the point's rate before the counted ones
    lead_out: bool = False        # arrivals go on after the counted ones until the last of them finishes
    lead_out_max_s: float | None = None   # ... for at most this long after the last counted one was due


@dataclass(kw_only=True)
class PointRun:
    results: list[RequestResult]
    duration_s: float
    client_cpu_s: float           # this process's CPU time over the point
    lead_requests: int = 0        # uncounted requests sent (lead-in and lead-out)
    lead_out_stopped: bool = False  # the lead-out reached lead_out_max_s before the counted requests finished


async def _drive(base_url: str, *, model: str, prompts: Sequence[Prompt], max_tokens: int, concurrency: int,
                 rate: float | None, seed: int, timeout_s: float, arrivals: str = "harness",
                 burstiness: float = 1.0, lead: Lead | None = None) -> tuple[list[RequestResult], float, int, bool]:
    import aiohttp

    base = base_url.rstrip("/")
    sem = asyncio.Semaphore(concurrency)
    offsets = arrival_offsets(len(prompts), rate, seed, arrivals=arrivals, burstiness=burstiness)
    # Uncounted requests, built before the clock starts. The counted schedule is the same draw with or
    # without them, shifted by the lead-in.
    # A point without a rate ignores its lead.
    start, lead_due, lead_in, pool = 0.0, list[float](), list[Prompt](), list[Prompt]()
    if lead is not None and rate is not None:
        start = lead.lead_in_s
        lead_due = lead_in_offsets(start, rate, seed + 1, burstiness=burstiness) if start else []
        lead_in = list(lead.build(len(lead_due), seed + 1)) if lead_due else []
        pool = list(lead.build(len(prompts), seed + 2)) if lead.lead_out and prompts else []
    out_gen = np.random.default_rng(seed + 2)
    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=conn, trust_env=False) as session:
        t0 = time.perf_counter()

        sent_uncounted, stopped = [0], [False]

        async def send(p: Prompt, due: float, count: bool = True) -> RequestResult:
            delay = t0 + due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            async with sem:
                if not count:
                    sent_uncounted[0] += 1
                r = await one_request(session, base + endpoint(p), model=model,
                                      prompt=p if isinstance(p, dict) else list(p),
                                      max_tokens=max_tokens, timeout_s=timeout_s)
                r.send_lag_s = max(0.0, r.sent_at - (t0 + due))
                return r

        uncounted = [asyncio.ensure_future(send(p, d, False)) for p, d in zip(lead_in, lead_due)]
        counted = asyncio.ensure_future(asyncio.gather(*(send(p, start + o) for p, o in zip(prompts, offsets))))

        async def lead_out() -> None:
            # After the last counted request is due, arrivals go on by the same law until `counted` is done.
            due, k = start + (offsets[-1] if offsets else 0.0), 0
            until = due + lead.lead_out_max_s if lead is not None and lead.lead_out_max_s is not None else math.inf
            while True:
                due += _gaps(1, rate, burstiness, lambda a, th: float(out_gen.gamma(a, th)))[0]  # type: ignore[arg-type]
                if due > until:
                    stopped[0] = True
                    return
                await asyncio.sleep(max(0.0, t0 + due - time.perf_counter()))
                uncounted.append(asyncio.ensure_future(send(pool[k % len(pool)], due, False)))
                k += 1

        feeder = asyncio.ensure_future(lead_out()) if pool else None
        results = await counted
        end = time.perf_counter()
        # What is still in flight is not waited for: its streams are closed, and the server aborts them.
        for t in ([feeder] if feeder else []) + uncounted:
            t.cancel()
        await asyncio.gather(*([feeder] if feeder else []), *uncounted, return_exceptions=True)
        return list(results), end - t0 - start, sent_uncounted[0], stopped[0]


def prepare() -> None:
    """Import the HTTP client (aiohttp) if this process has not yet. Its first import costs about half a
    CPU second: inside a point's CPU window it would be charged to the first point measured, which with
    no warm-up requests is a timed one. Imported here rather than with this module because every sweep
    that measures imports the module (the local executor imports harness.measure.serve), serve or not."""
    importlib.import_module("aiohttp")


def run_point(base_url: str, *, model: str, prompts: Sequence[Prompt], max_tokens: int, concurrency: int,
              rate: float | None = None, seed: int = 0, timeout_s: float = 300.0, arrivals: str = "harness",
              burstiness: float = 1.0, lead: Lead | None = None) -> PointRun:
    # The point's duration runs from its counted schedule's start, before the first due time: under
    # `vllm` arrivals the first request waits its own gap, and vLLM's benchmark counts that wait in its
    # duration too. A lead-in comes before that start; a lead-out's requests are not waited for.
    # `lead` applies to a paced point only (a rate); without one it is ignored.
    prepare()  # before the CPU clock starts: the first call of a process imports aiohttp here
    cpu0 = time.process_time()
    results, duration, n_lead, stopped = asyncio.run(_drive(base_url, model=model, prompts=prompts, max_tokens=max_tokens,
                                                   concurrency=concurrency, rate=rate, seed=seed,
                                                   timeout_s=timeout_s, arrivals=arrivals, burstiness=burstiness,
                                                   lead=lead))
    return PointRun(results=results, duration_s=duration, client_cpu_s=time.process_time() - cpu0,
                    lead_requests=n_lead, lead_out_stopped=stopped)


# --- a point's numbers ------------------------------------------------------------------------------

def _dist(values_s: Sequence[float]) -> dict[str, float | None]:
    """Mean and percentiles in ms (numpy's linear interpolation, as vLLM's benchmark reports them)."""
    if len(values_s) == 0:
        return {"mean": None, **{f"p{q}": None for q in PERCENTILES}}
    a = np.asarray(values_s, dtype=float) * 1000.0
    return {"mean": float(a.mean()), **{f"p{q}": float(np.percentile(a, q)) for q in PERCENTILES}}


def tpot_s(r: RequestResult) -> float | None:
    if not r.ok or r.output_tokens < 2 or r.latency_s is None or r.ttft_s is None:
        return None
    return (r.latency_s - r.ttft_s) / (r.output_tokens - 1)


def good(r: RequestResult, *, slo_ttft_ms: float, slo_tpot_ms: float) -> bool:
    """Whether a request meets the SLO: completed, TTFT and TPOT within their bounds (a one-token
    request has no TPOT and is judged on its TTFT)."""
    if not r.ok or r.ttft_s is None or r.ttft_s * 1000 > slo_ttft_ms:
        return False
    t = tpot_s(r)
    return t is None or t * 1000 <= slo_tpot_ms


def summarize(run: PointRun, *, slo_ttft_ms: float, slo_tpot_ms: float) -> dict[str, Any]:
    """A point's metrics: throughputs over the point's duration, latency distributions in ms over its
    completed requests, failures, and goodput (requests per second meeting the SLO)."""
    done = [r for r in run.results if r.ok]
    d = run.duration_s
    out_tokens = sum(r.output_tokens for r in done)
    n_good = sum(good(r, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms) for r in run.results)
    tpots = [t for t in map(tpot_s, done) if t is not None]
    m: dict[str, Any] = {
        "requests": len(run.results), "completed": len(done), "failed": len(run.results) - len(done),
        "duration_s": d, "output_tokens": out_tokens, "prompt_tokens": sum(r.prompt_tokens for r in done),
        "requests_per_s": len(done) / d if d > 0 else None,
        "output_tok_s": out_tokens / d if d > 0 and out_tokens else None,
        "goodput_req_s": n_good / d if d > 0 else None,
        "good_share": n_good / len(run.results) if run.results else None,
        "ttft_ms": _dist([r.ttft_s for r in done if r.ttft_s is not None]),
        "tpot_ms": _dist(tpots),
        "itl_ms": _dist([x for r in done for x in r.itl_s]),
        "e2el_ms": _dist([r.latency_s for r in done if r.latency_s is not None]),
        "send_lag_ms": _dist([r.send_lag_s for r in run.results if r.send_lag_s is not None]),
        "client_cpu_share": run.client_cpu_s / d if d > 0 else None,
        "lead_requests": run.lead_requests,
        "errors": sorted({r.error for r in run.results if r.error})[:5],
    }
    # Tokens per second one user sees while streaming: the inverse of the median TPOT.
    med = m["tpot_ms"]["p50"]
    m["tok_s_per_user"] = 1000.0 / med if med else None
    return m
