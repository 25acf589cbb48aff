"""The engine's own view of a serve point, from the stats lines vLLM's server logs into the run's log.

vLLM's server logs its scheduler every VLLM_LOG_STATS_INTERVAL seconds (10 by default), a line such as
    Engine 000: Avg prompt throughput: 15781.3 tokens/s, Avg generation throughput: 6265.3 tokens/s,
    Running: 289 reqs, Waiting: 0 reqs, GPU KV cache usage: 42.1%, Prefix cache hit rate: 0.0%
(the device's name before "KV": GPU, CPU, ...; 0.24.0-0.32.0 alike). The client sees a point's latency;
these lines say where it went: requests waiting in the scheduler and a full KV cache mean the engine was
saturated, while nothing waiting with a long client TTFT points at the front end or the client
(results/h100-capacity-steady).

A point reads the lines appended to run.log after its start (a byte offset taken then; the server runs
unbuffered, harness.measure.run) and drops the first, whose averaging window began before the point.
A point shorter than two intervals has no sample, and says so (None), as does a server that logs no
stats (--disable-log-stats). The harness does not change the interval: it is the leg's to set.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.schema.serve import EngineView

_LINE = re.compile(
    r"Engine \d+: Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, "
    r"Avg generation throughput: (?P<gen>[\d.]+) tokens/s, "
    r"Running: (?P<running>\d+) reqs, Waiting: (?P<waiting>\d+) reqs, "
    r"(?:\w+ )?KV cache usage: (?P<kv>[\d.]+)%")


def offset(log: Path) -> int:
    """Where the run's log ends now: a point's lines are those after it."""
    try:
        return log.stat().st_size
    except FileNotFoundError:
        return 0


def view(log: Path, start: int) -> EngineView | None:
    """The engine's stats over the lines logged after byte `start`, the first dropped; None without any."""
    rows = []
    try:
        with log.open("rb") as f:
            f.seek(start)
            for raw in f:   # line by line: a long point at a high rate logs megabytes of request lines
                if b"KV cache usage" in raw and (m := _LINE.search(raw.decode("utf-8", errors="replace"))):
                    rows.append(m)
    except FileNotFoundError:
        return None
    rows = rows[1:]
    if not rows:
        return None
    gen = [float(m["gen"]) for m in rows]
    prompt = [float(m["prompt"]) for m in rows]
    return EngineView(samples=len(rows), running_max=max(int(m["running"]) for m in rows),
                      waiting_max=max(int(m["waiting"]) for m in rows),
                      kv_usage_max_pct=max(float(m["kv"]) for m in rows),
                      generation_tok_s_mean=sum(gen) / len(gen), prompt_tok_s_mean=sum(prompt) / len(prompt))
