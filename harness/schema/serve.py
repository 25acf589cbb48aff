"""What a serve run keeps in its record (`results.json` → `serve`): the client that drove the load,
every point it measured, and how many times the server was started.

Format history: new in record schema 6 (harness.schema.record); absent from every other kind's record.
Record schema 9 adds `capacity` (a capacity search: its declaration, every probe with each SLO
percentile's order-statistic interval, the stopping rule and the result) and `inputs` (what an image
serve workload sent: the images' sha256); both optional, absent before. Record schema 11 adds a
point's `lead_requests` (uncounted requests that held it in steady state; 0, and absent before).
"""

from __future__ import annotations

from typing import Any, Literal

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
    # Every counted request's send against its schedule (waiting for the concurrency bound, or a client
    # behind its schedule); TTFT counts from the send. Empty in records older than schema 12.
    send_lag_ms: Dist = Dist()
    # Uncounted requests sent at the point's rate before and after its counted ones (the workload's
    # lead_in_s and lead_out); they enter none of the figures above but the client's CPU share.
    lead_requests: int = 0
    errors: list[str] = Field(default_factory=list)  # distinct request errors, at most five


class EngineView(Frozen):
    """The server's own stats lines over a point (harness.measure.engine_log): what the engine's scheduler
    held while the client measured. Averages and maxima over the samples logged inside the point."""
    samples: int                       # stats lines inside the point (the first after its start dropped)
    running_max: int                   # requests in the engine's running batch, at most
    waiting_max: int                   # requests queued in the scheduler, at most (> 0: saturated)
    kv_usage_max_pct: float            # KV cache in use, at most, in percent
    generation_tok_s_mean: float       # the engine's generated tokens per second, mean of the samples
    prompt_tok_s_mean: float           # the engine's prefilled tokens per second, mean of the samples


class EngineHistogram(Frozen):
    """One of the server's latency histograms over a point (harness.measure.engine_metrics): the requests
    that reached it inside the point's window, the sum of their seconds, and the cumulative count at or
    below each bucket's upper bound in seconds (ascending, the last inf)."""
    count: int
    sum_s: float
    buckets: list[tuple[float, int]]


class ServePoint(Frozen):
    index: int
    concurrency: int
    request_rate: float | None = None  # None: no pacing, only the concurrency bound
    seed: int
    status: Literal["ok", "failed"]
    reason: str = ""                   # a failed point: why (the server died, it never answered, ...)
    server_instance: int = 1           # which start of the server measured it
    metrics: PointMetrics | None = None
    engine: EngineView | None = None   # None: the server logged no stats inside the point, or an older record
    # The server's own histograms over the point: "ttft" (from its arrival in the server), "queue" (waiting
    # in the scheduler), "prefill"; None: the server has no /metrics, or an older record.
    engine_latency: dict[str, EngineHistogram] | None = None


class BoundCheck(Frozen):
    """One SLO bound on one probe: the percentile over the probe's requests and its interval."""
    metric: str                        # ttft_ms, tpot_ms or e2el_ms
    p: float
    max: float
    n: int                             # requests the percentile is over
    value: float | None = None         # the percentile (numpy's linear interpolation, like the point's)
    low: float | None = None           # order-statistic interval; None: the sample has no order
    high: float | None = None          #   statistic that far out (too few requests), unbounded
    ok: bool = False                   # under the search's pass rule
    decisive: bool = False             # the whole interval lies on one side of the bound


class CapacityProbe(Frozen):
    step: int                          # 0, 1, ... in the order probed
    phase: Literal["bracket", "bisect"]
    value: float                       # the request rate (per s) or concurrency probed
    point: int                         # its point in `serve.points` (by index)
    passed: bool | None = None         # None: the probe itself failed (the server died, ...)
    checks: list[BoundCheck] = Field(default_factory=list)
    good_share: float | None = None    # requests meeting every bound / requests sent
    why: str = ""                      # a failing probe: which bound; a failed probe: what happened


class CapacitySearch(Frozen):
    axis: Literal["request_rate", "concurrency"]
    declared: dict[str, Any]           # the workload's `capacity:` block as given
    method: str                        # the search, in words
    interval: str                      # the percentile interval, in words
    pass_rule: Literal["point", "upper"]
    probes: list[CapacityProbe] = Field(default_factory=list)
    status: Literal["found", "below_lo", "at_least_hi", "max_probes", "failed"]
    capacity: float | None = None      # the highest value that passed (None: none did, or failed)
    bracket_low: float | None = None   # the highest passing and lowest failing values probed
    bracket_high: float | None = None
    stop: str = ""                     # why the search stopped


class ServeInputs(Frozen):
    """What a multimodal serve workload sent besides text: identical on every leg, by these hashes."""
    modality: str
    images: int = 0                    # distinct images built for every point (a search's max_probes
                                       # groups, however many it probed) and the warm-up
    images_sha256: str | None = None   # sha256 over the PNG files' own sha256s, in order
    image_bytes: int = 0
    encoding: str = ""                 # how the images travel (e.g. PNG as a base64 data URL)


class ServeResult(Frozen):
    client: dict[str, str]             # name and version of the load generator (and its HTTP library)
    slo_ttft_ms: float
    slo_tpot_ms: float
    server_starts: int = 1
    server_port: int | None = None
    points: list[ServePoint] = Field(default_factory=list)
    capacity: CapacitySearch | None = None
    inputs: ServeInputs | None = None
