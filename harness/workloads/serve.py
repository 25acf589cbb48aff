"""Serve: the leg's OpenAI-compatible server under online load, point by point.

A serve run starts the leg's server (harness.measure.serve), sends warm-up requests outside the timed
window, then measures one *point* per (concurrency, request rate): `num_prompts` streamed requests of
token-id prompts, at most `concurrency` in flight, arriving all at once or as seeded Poisson arrivals
at `request_rate` per second. Each point's TTFT, TPOT, ITL, end-to-end latency, throughputs and
goodput under the SLO are in the record's `serve.points`; the run's own metric (what the per-kind
table shows) is the highest output throughput of its points.

With a `capacity:` block (harness.workloads.capacity, docs/capacity.md) the run measures no grid: it
searches for the highest request rate (or concurrency) at which the declared SLO holds, one *probe*
per step, and each probe is a point of `serve.points`.

Standard library only, like every kind (the worker side imports the registry).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.workloads import capacity as capacity_spec
from harness.workloads import limits
from harness.workloads.base import Metric, Traits

NAME = "serve"
METRIC = Metric(key="output_tok_s", unit="tok/s", higher_is_better=True,
                title="Serving: peak output throughput over the load points (tok/s, higher is better)",
                digits=1, thousands=True)
TRAITS = Traits(server=True)
# Left out of a run's `work` at these values, so serve runs measured before they existed keep their
# fingerprints (harness.measure.scenario.Workload.work).
UNSET_WORK: dict[str, Any] = {"capacity": None, "arrivals": "harness", "burstiness": 1.0, "lead_in_s": 0.0,
                              "lead_out": False, "lead_out_max_s": None}
ARRIVALS = ("harness", "vllm")   # harness.measure.loadgen.arrival_offsets says what each one is


@dataclass(frozen=True, kw_only=True)
class Params:
    concurrency: list[int] = field(default_factory=lambda: [1, 4, 16])  # requests in flight at most
    # Requests per second, seeded Poisson arrivals; empty: every request is sent at once and only
    # `concurrency` paces them (vLLM's `--request-rate inf`). Points: every concurrency x every rate.
    request_rate: list[float] = field(default_factory=list)
    num_prompts: int = 32          # timed requests per point
    warmup_requests: int = 4       # sent before the first point, outside every timed window
    slo_ttft_ms: float = 1000.0    # goodput: a request is good when it meets both
    slo_tpot_ms: float = 100.0
    startup_timeout_s: float = 600.0   # the server's /health must answer within this
    request_timeout_s: float = 300.0   # one request, first byte to last
    # The capacity search instead of the grid above (harness.workloads.capacity); None: the grid.
    capacity: dict[str, Any] | None = None
    # How a rate's arrivals are scheduled: `harness` (first request at 0, seeded gaps) or `vllm` (vLLM's
    # `bench serve`: the first request after its own gap, the schedule stretched to end at n / rate), and
    # the gaps' gamma shape (vLLM's --burstiness: 1 Poisson, below 1 burstier, .inf evenly spaced).
    arrivals: str = "harness"
    burstiness: float = 1.0
    # Steady state for a paced point (a rate, or a capacity search on the request-rate axis): seconds of
    # uncounted arrivals at the point's rate before its counted ones, and whether uncounted arrivals go on
    # after them until the last counted request has finished. A short point that starts from an idle
    # server and ends draining it measures a transient (results/h100-capacity-probe: at one rate, 60 s
    # points had a p99 TTFT 1.37x that of 15 s ones).
    lead_in_s: float = 0.0
    lead_out: bool = False
    # At most this many seconds of lead-out arrivals after the last counted request was due; then the
    # counted ones finish without new arrivals. None: until they finish. An overloaded point's queue grows
    # with every lead-out arrival, so unbounded it can last minutes (results/h100-capacity-steady: 64-104 s
    # against 39-49 s below overload); a point that reaches the bound is failing its SLO anyway.
    lead_out_max_s: float | None = None

    def __post_init__(self) -> None:
        if not self.concurrency or any(not c > 0 for c in self.concurrency):
            raise ValueError("concurrency: a non-empty list of integers greater than 0")
        if any(not r > 0 for r in self.request_rate):
            raise ValueError("request_rate: every rate should be greater than 0 (leave it empty for no pacing)")
        for name in ("num_prompts", "slo_ttft_ms", "slo_tpot_ms", "startup_timeout_s", "request_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: should be greater than 0")
        if not self.warmup_requests >= 0:
            raise ValueError("warmup_requests: should be 0 or more")
        for i, c in enumerate(self.concurrency):
            limits.at_most(f"concurrency[{i}]", c, limits.MAX_CONCURRENCY, "requests in flight")
        for i, r in enumerate(self.request_rate):
            limits.at_most(f"request_rate[{i}]", r, limits.MAX_REQUEST_RATE, "requests per second")
        limits.at_most("concurrency", len(self.concurrency) * max(1, len(self.request_rate)),
                       limits.MAX_LOAD_POINTS, "load points (concurrency values x request rates)")
        limits.at_most("num_prompts", self.num_prompts, limits.MAX_PROMPTS, "requests per point")
        limits.at_most("warmup_requests", self.warmup_requests, limits.MAX_PROMPTS, "requests")
        limits.timeout("startup_timeout_s", self.startup_timeout_s)
        limits.timeout("request_timeout_s", self.request_timeout_s)
        for name in ("slo_ttft_ms", "slo_tpot_ms"):
            limits.at_most(name, getattr(self, name), limits.MAX_TIMEOUT_S * 1000, "ms (a week)")
        if self.arrivals not in ARRIVALS:
            raise ValueError(f"arrivals: {self.arrivals!r} should be one of {', '.join(ARRIVALS)}")
        if isinstance(self.burstiness, bool) or not isinstance(self.burstiness, (int, float)) \
                or not self.burstiness > 0:
            raise ValueError(f"burstiness: {self.burstiness!r} should be a number greater than 0 (.inf: evenly spaced)")
        # (A string or a quoted boolean never gets here: the scenario loader refuses it by the type.)
        if not self.lead_in_s >= 0:
            raise ValueError(f"lead_in_s: {self.lead_in_s!r} should be a number of seconds, 0 or more")
        if self.lead_in_s:
            limits.timeout("lead_in_s", self.lead_in_s)
        if self.lead_out_max_s is not None:
            if isinstance(self.lead_out_max_s, bool) or not self.lead_out_max_s > 0:
                raise ValueError(f"lead_out_max_s: {self.lead_out_max_s!r} should be a number of seconds greater than 0")
            if not self.lead_out:
                raise ValueError("lead_out_max_s bounds the lead-out: it needs lead_out: true")
            limits.timeout("lead_out_max_s", self.lead_out_max_s)
        cap = capacity_spec.parse(self.capacity) if self.capacity is not None else None
        paced = cap.axis == "request_rate" if cap is not None else bool(self.request_rate)
        if (self.lead_in_s or self.lead_out) and not paced:
            raise ValueError("lead_in_s and lead_out hold a paced point in steady state: they need request_rate "
                             "(or a capacity search on the request_rate axis)")


@dataclass(frozen=True, kw_only=True)
class Point:
    index: int
    concurrency: int
    request_rate: float | None     # None: no pacing

    @property
    def label(self) -> str:
        rate = "inf" if self.request_rate is None else f"{self.request_rate:g}"
        return f"c={self.concurrency} rate={rate}"


def points(work: dict[str, Any]) -> list[Point]:
    rates = list(work.get("request_rate") or []) or [None]
    combos = [(c, r) for c in work["concurrency"] for r in rates]
    return [Point(index=i, concurrency=c, request_rate=r) for i, (c, r) in enumerate(combos)]


Build = Callable[[int, int], list[Any]]   # (count, seed) -> prompts


def point_seed(work: dict[str, Any], index: int) -> int:
    # Fresh prompts per point: the server's prefix cache never serves a point from an earlier one.
    return work["seed"] + 1000 * (index + 1)


def capacity(work: dict[str, Any]) -> capacity_spec.Capacity | None:
    raw = work.get("capacity")
    return None if raw is None else capacity_spec.parse(raw)


def prompt_groups(work: dict[str, Any], build: Build) -> list[list[Any]]:
    """Each point's prompts; a capacity search's probes are its points, at most `max_probes` of them."""
    cap = capacity(work)
    if cap is not None:
        return [build(work["num_prompts"], point_seed(work, i)) for i in range(cap.search.max_probes)]
    return [build(work["num_prompts"], point_seed(work, p.index)) for p in points(work)]


# Warm-up prompts draw from seed + 500: never a point's seed (seed + 1000 (i + 1)) nor a point's lead
# seeds (+1, +2; harness.measure.loadgen.Lead). It was seed + 10_000 until 2026-12-07, the seed of point 9,
# so a grid's tenth point or a search's tenth probe began with the warm-up's prompts, which the server's
# prefix cache then served without their prefill.
WARMUP_SEED_OFFSET = 500


def warmup_prompts(work: dict[str, Any], build: Build) -> list[Any]:
    return build(work["warmup_requests"], work["seed"] + WARMUP_SEED_OFFSET)


def metrics(point_metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's metrics from its measured points: the peak output throughput and that point's rates."""
    ok = [p for p in point_metrics if p.get("output_tok_s")]
    if not ok:
        return {}
    best = max(ok, key=lambda p: p["output_tok_s"])
    return {"output_tok_s": best["output_tok_s"], "requests_per_s": best["requests_per_s"]}
