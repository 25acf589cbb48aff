"""The client-overhead result: `client-overhead.json` (harness.experiments.client_overhead), what the
serving load generator costs on one machine against an endpoint that does no work.

Result SCHEMA_VERSION history:
# 1 - first format: machine, inputs, one point per concurrency, the headline (highest request rate).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from harness.schema import record
from harness.schema.base import Frozen

SCHEMA_VERSION = 1
KIND = "client-overhead"


class Machine(Frozen):
    cpu_count: int | None                  # os.cpu_count(): the host's logical CPUs
    usable_cpus: int | None                # the ones this process may run on (a container's or taskset's share)
    platform: str
    machine: str
    python: str
    harness_version: str
    aiohttp_version: str
    loadavg_start: tuple[float, float, float] | None = None   # a busy machine shows here before any number is read
    loadavg_end: tuple[float, float, float] | None = None


class Inputs(Frozen):
    concurrencies: tuple[int, ...]
    requests: int                          # per point
    output_tokens: int                     # SSE token chunks per request (the endpoint honours max_tokens)
    prompt_tokens: int                     # ids in each request's prompt (its JSON size)
    warmup_requests: int                   # sent once before the first point (at least one), never measured
    timeout_s: float
    endpoint: str                          # what answered (the measuring module's description of it)
    saturated_at: float                    # the CPU share at which a side counted as the point's bottleneck


class Point(Frozen):
    concurrency: int
    requests: int
    completed: int
    failed: int
    duration_s: float                      # first send to last completion (loadgen's point duration)
    requests_per_s: float | None
    output_chunks_per_s: float | None      # token chunks the client received and timed
    output_tok_s: float | None             # from the endpoint's usage, as a serve run counts them
    client_cpu_s: float
    client_cpu_share: float | None         # client_cpu_s / duration_s, as a serve record's
    endpoint_cpu_s: float | None
    endpoint_cpu_share: float | None       # over the wall time of the point's run_point call
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    e2el_p50_ms: float | None
    limited_by: Literal["client", "endpoint", "neither"]
    errors: list[str] = Field(default_factory=list)


class Headline(Frozen):
    requests_per_s: float | None           # the highest over the points
    concurrency: int | None
    limited_by: Literal["client", "endpoint", "neither"] | None
    client_cpu_share: float | None


class OverheadResult(Frozen):
    schema_version: int = SCHEMA_VERSION
    kind: Literal["client-overhead"] = KIND
    created_at: str
    wall_s: float
    machine: Machine
    inputs: Inputs
    points: list[Point]
    headline: Headline


def read(path: Path) -> OverheadResult:
    return record.read_typed(path, KIND, OverheadResult, SCHEMA_VERSION)  # type: ignore[return-value]
