"""What a serve run keeps in its record (`results.json` → `serve`): the client that drove the load,
every point it measured, and how many times the server was started.

Format history: new in record schema 5 (harness.schema.record); absent from every other kind's record.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from harness.schema.base import Frozen


class Dist(Frozen):
    """A latency distribution over a point's completed requests, in ms."""
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


class PointMetrics(Frozen):
    requests: int
    completed: int
    failed: int                        # errored, aborted or cut off by a dying server
    duration_s: float
    output_tokens: int
    prompt_tokens: int
    requests_per_s: float | None = None
    output_tok_s: float | None = None
    goodput_req_s: float | None = None   # requests per second meeting both SLOs
    good_share: float | None = None
    tok_s_per_user: float | None = None  # 1000 / median TPOT: what one streaming user sees
    ttft_ms: Dist = Dist()
    tpot_ms: Dist = Dist()
    itl_ms: Dist = Dist()
    e2el_ms: Dist = Dist()
    client_cpu_share: float | None = None  # the client's CPU seconds over the point's wall seconds
    errors: list[str] = Field(default_factory=list)  # distinct request errors, at most five


class ServePoint(Frozen):
    index: int
    concurrency: int
    request_rate: float | None = None  # None: no pacing, only the concurrency bound
    seed: int
    status: Literal["ok", "failed"]
    reason: str = ""                   # a failed point: why (the server died, it never answered, ...)
    server_instance: int = 1           # which start of the server measured it
    metrics: PointMetrics | None = None


class ServeResult(Frozen):
    client: dict[str, str]             # name and version of the load generator (and its HTTP library)
    slo_ttft_ms: float
    slo_tpot_ms: float
    server_starts: int = 1
    server_port: int | None = None
    points: list[ServePoint] = Field(default_factory=list)
