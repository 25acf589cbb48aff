"""A serve workload's capacity search, as declared: the SLO it holds the server to and how the search
looks for the highest load that still meets it (docs/capacity.md).

    capacity:
      axis: request_rate              # or concurrency: what the search raises
      slo:
        ttft_ms: {p: 99, max: 500}    # the p-th percentile over a probe's requests, at most `max`
        tpot_ms: {p: 99, max: 50}
        goodput_share_min: 0.99       # share of a probe's requests meeting every bound, at least this
      search: {lo: 0.5, hi: 32, growth: 2, rel_tol: 0.1, max_probes: 10, concurrency: 64, probe_s: 20}
      confidence: 0.95                # of each percentile's order-statistic interval
      pass_rule: point                # point: the estimate within the bound; upper: the interval's top

The parsed form is plain data (standard library only, like every kind); the search itself runs in
harness.measure.capacity. Every error names its key from `capacity.` down, so the scenario loader can
prefix the file and workload and print one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from harness.workloads import limits

AXES = ("request_rate", "concurrency")
# Per-request latencies a bound may name: each request has one value of each (a one-token request has
# no TPOT and is left out of the TPOT percentile, as the serve point's own TPOT figures leave it out).
METRICS = ("ttft_ms", "tpot_ms", "e2el_ms")
PASS_RULES = ("point", "upper")

Axis = Literal["request_rate", "concurrency"]


@dataclass(frozen=True, kw_only=True)
class Bound:
    metric: str       # one of METRICS
    p: float          # the percentile, 0 < p < 100
    max: float        # in ms


@dataclass(frozen=True, kw_only=True)
class Search:
    lo: float                 # the first value probed
    hi: float                 # never probed above
    # Never probed below. Where `lo` fails the search steps down by `growth` to this before it gives up
    # (`below_lo`): a capacity belongs to a machine, and machines of one card model differed by more
    # than the step between lo and the capacity a first machine found (results/h100-capacity-spread).
    # None: lo (no step down).
    floor: float | None = None
    growth: float = 2.0       # bracketing: each passing probe multiplies the value by this
    rel_tol: float = 0.1      # bisecting stops once the bracket's top is within this of its bottom
    max_probes: int = 10
    concurrency: int | None = None   # the request_rate axis: requests in flight at most (None: num_prompts)
    # The request_rate axis: each probe's arrivals span at least this many seconds. A fixed count of
    # requests at a high rate arrives in a second or two, too short for a queue to build: a server can
    # pass a rate it could never sustain. None: every probe sends num_prompts.
    probe_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class Capacity:
    axis: Axis
    bounds: tuple[Bound, ...]
    goodput_share_min: float | None
    search: Search
    confidence: float = 0.95
    pass_rule: str = "point"

    def bound(self, metric: str) -> Bound | None:
        return next((b for b in self.bounds if b.metric == metric), None)


class CapacityError(ValueError):
    pass


def _num(key: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise CapacityError(f"{key}: {v!r} is not a number")
    return float(v)


def _keys(key: str, raw: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise CapacityError(f"{key}: should be a mapping (keys: {', '.join(allowed)})")
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise CapacityError(f"{key}.{unknown[0]}: unknown key (known: {', '.join(allowed)})")
    return raw


def _bound(key: str, raw: Any, metric: str) -> Bound:
    raw = _keys(key, raw, ("p", "max"))
    for k in ("p", "max"):
        if k not in raw:
            raise CapacityError(f"{key}.{k}: missing (a bound is {{p: 99, max: 500}}: the p-th percentile in ms at most max)")
    p, mx = _num(f"{key}.p", raw["p"]), _num(f"{key}.max", raw["max"])
    if not 0 < p < 100:
        raise CapacityError(f"{key}.p: {p:g} should be between 0 and 100, e.g. 99")
    if not mx > 0:
        raise CapacityError(f"{key}.max: {mx:g} should be greater than 0 (ms)")
    limits.at_most(f"{key}.max", mx, limits.MAX_TIMEOUT_S * 1000, "ms (a week)")
    return Bound(metric=metric, p=p, max=mx)


def _search(key: str, raw: Any, axis: str) -> Search:
    raw = _keys(key, raw, ("lo", "hi", "floor", "growth", "rel_tol", "max_probes", "concurrency", "probe_s"))
    for k in ("lo", "hi"):
        if k not in raw:
            raise CapacityError(f"{key}.{k}: missing (the lowest and highest {axis} the search may probe)")
    lo, hi = _num(f"{key}.lo", raw["lo"]), _num(f"{key}.hi", raw["hi"])
    if not lo > 0:
        raise CapacityError(f"{key}.lo: {lo:g} should be greater than 0")
    if not hi > lo:
        raise CapacityError(f"{key}.hi: {hi:g} should be greater than lo ({lo:g})")
    cap = limits.MAX_CONCURRENCY if axis == "concurrency" else limits.MAX_REQUEST_RATE
    limits.at_most(f"{key}.hi", hi, cap, "requests in flight" if axis == "concurrency" else "requests per second")
    if axis == "concurrency" and (lo != int(lo) or hi != int(hi)):
        raise CapacityError(f"{key}.lo: the concurrency axis probes whole numbers of requests in flight")
    floor = raw.get("floor")
    if floor is not None:
        floor = _num(f"{key}.floor", floor)
        if not 0 < floor < lo:
            raise CapacityError(f"{key}.floor: {floor:g} should be greater than 0 and below lo ({lo:g})")
        if axis == "concurrency" and floor != int(floor):
            raise CapacityError(f"{key}.floor: the concurrency axis probes whole numbers of requests in flight")
    growth = _num(f"{key}.growth", raw.get("growth", 2.0))
    if not growth > 1:
        raise CapacityError(f"{key}.growth: {growth:g} should be greater than 1")
    rel_tol = _num(f"{key}.rel_tol", raw.get("rel_tol", 0.1))
    if not 0 < rel_tol < 1:
        raise CapacityError(f"{key}.rel_tol: {rel_tol:g} should be between 0 and 1, e.g. 0.1")
    probes = raw.get("max_probes", 10)
    if isinstance(probes, bool) or not isinstance(probes, int) or probes < 2:
        raise CapacityError(f"{key}.max_probes: {probes!r} should be an integer of at least 2")
    limits.at_most(f"{key}.max_probes", probes, limits.MAX_LOAD_POINTS, "probes")
    conc = raw.get("concurrency")
    if conc is not None:
        if axis != "request_rate":
            raise CapacityError(f"{key}.concurrency: only the request_rate axis holds concurrency fixed")
        if isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
            raise CapacityError(f"{key}.concurrency: {conc!r} should be an integer of at least 1")
        limits.at_most(f"{key}.concurrency", conc, limits.MAX_CONCURRENCY, "requests in flight")
    probe_s = raw.get("probe_s")
    if probe_s is not None:
        if axis != "request_rate":
            raise CapacityError(f"{key}.probe_s: only the request_rate axis spreads arrivals over time")
        probe_s = _num(f"{key}.probe_s", probe_s)
        if not probe_s > 0:
            raise CapacityError(f"{key}.probe_s: {probe_s:g} should be greater than 0 (seconds of arrivals)")
        limits.at_most(f"{key}.probe_s", probe_s, limits.MAX_TIMEOUT_S, "seconds (a week)")
        limits.at_most(f"{key}.probe_s", math.ceil(hi * probe_s), limits.MAX_PROMPTS,
                       "requests in the probe at hi (hi x probe_s)")
    return Search(lo=lo, hi=hi, floor=floor, growth=growth, rel_tol=rel_tol, max_probes=probes, concurrency=conc,
                  probe_s=probe_s)


def probe_requests(cap: Capacity, num_prompts: int, value: float) -> int:
    """How many requests the probe at `value` sends: num_prompts, or more where probe_s asks for more."""
    if cap.axis != "request_rate" or cap.search.probe_s is None:
        return num_prompts
    return max(num_prompts, math.ceil(value * cap.search.probe_s))


def parse(raw: Any, key: str = "capacity") -> Capacity:
    """The declared capacity search, checked; a CapacityError (a ValueError) names the key at fault."""
    raw = _keys(key, raw, ("axis", "slo", "search", "confidence", "pass_rule"))
    axis = raw.get("axis", "request_rate")
    if axis not in AXES:
        raise CapacityError(f"{key}.axis: {axis!r} is not one of {', '.join(AXES)}")
    if "slo" not in raw:
        raise CapacityError(f"{key}.slo: missing (e.g. {{ttft_ms: {{p: 99, max: 500}}, goodput_share_min: 0.99}})")
    slo = _keys(f"{key}.slo", raw["slo"], (*METRICS, "goodput_share_min"))
    bounds = tuple(_bound(f"{key}.slo.{m}", slo[m], m) for m in METRICS if m in slo)
    share = slo.get("goodput_share_min")
    if share is not None:
        share = _num(f"{key}.slo.goodput_share_min", share)
        if not 0 < share <= 1:
            raise CapacityError(f"{key}.slo.goodput_share_min: {share:g} should be in (0, 1], e.g. 0.99")
    if not bounds and share is None:
        raise CapacityError(f"{key}.slo: declares no bound (give at least one of {', '.join(METRICS)} "
                            "or goodput_share_min)")
    if "search" not in raw:
        raise CapacityError(f"{key}.search: missing (e.g. {{lo: 0.5, hi: 32}})")
    search = _search(f"{key}.search", raw["search"], axis)
    conf = _num(f"{key}.confidence", raw.get("confidence", 0.95))
    if not 0.5 <= conf < 1:
        raise CapacityError(f"{key}.confidence: {conf:g} should be at least 0.5 and below 1, e.g. 0.95")
    rule = raw.get("pass_rule", "point")
    if rule not in PASS_RULES:
        raise CapacityError(f"{key}.pass_rule: {rule!r} is not one of {', '.join(PASS_RULES)}")
    return Capacity(axis=axis, bounds=bounds, goodput_share_min=share, search=search, confidence=conf,
                    pass_rule=rule)
