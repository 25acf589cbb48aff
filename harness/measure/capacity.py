"""The capacity search: the highest request rate (or concurrency) at which a server meets the SLO.

Method (docs/capacity.md says why): whether a load meets the SLO is treated as a monotone pass/fail
predicate of the load, so the search brackets, then bisects:
  bracket - probe `lo`; while a probe passes and is below `hi`, probe `growth` times higher (capped at
            `hi`). The first failure closes the bracket [highest pass, first failure]. Where `lo` itself
            fails and a `floor` is declared, probe `growth` times lower (not below `floor`) until a
            probe passes: the first pass closes the bracket [first pass, lowest failure].
  bisect  - probe the bracket's midpoint (geometric for request rates, which span scales; integer for
            concurrency) and keep the half the predicate says, until the bracket is within `rel_tol`
            (rates: top / bottom - 1 <= rel_tol; concurrency: top - bottom <= 1).
  stop    - `found` when the bracket is that narrow; `below_lo` when the lowest value allowed (`floor`,
            else `lo`) fails; `at_least_hi`
            when `hi` passes; `max_probes` when the budget ends first (the capacity is then the highest
            pass, the bracket wider than asked); `failed` when a probe could not be measured (the server
            died, or no request of it completed): a load that kills the server, or a server that answers
            nothing, is no measurement of the SLO, and the run says so rather than guess.
The capacity is the highest value that passed; the record keeps every probe as a serve point.

Each probe is judged on its own requests: per bound, the p-th percentile of that latency (numpy's
linear interpolation, as the point's own p50/p90/p99) and its distribution-free order-statistic
interval (binomial on the requests: no bootstrap, no shape assumed). The pass rule is declared:
`point` (the default) passes a bound when the percentile is within it; `upper` only when the
interval's top is, which needs enough requests for that order statistic to exist (for p99 at 95%,
about 300). Failed requests are never good and count against `goodput_share_min`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from harness.measure.loadgen import RequestResult, tpot_s
from harness.schema.serve import BoundCheck, CapacityProbe, CapacitySearch, ServePoint
from harness.workloads.capacity import Capacity

INTERVAL = "order-statistic (binomial) interval over the probe's requests, two-sided"

# (step, value, phase) -> the probe's point and its requests (None when it could not be measured).
Probe = Callable[[int, float, str], tuple[ServePoint, Sequence[RequestResult] | None]]


def method(cap: Capacity) -> str:
    s = cap.search
    mid = "integer" if cap.axis == "concurrency" else "geometric"
    tol = "top - bottom <= 1" if cap.axis == "concurrency" else f"top / bottom - 1 <= {s.rel_tol:g}"
    each = "" if s.probe_s is None else (f"; each probe sends num_prompts requests or {s.probe_s:g} s of "
                                         "arrivals at its rate, whichever is more")
    down = "" if s.floor is None else f"; /{s.growth:g} per failure from {s.lo:g}, at least {s.floor:g}"
    return (f"bracket from {s.lo:g} (x{s.growth:g} per pass, at most {s.hi:g}{down}), then bisect at the {mid} "
            f"midpoint until {tol}; at most {s.max_probes} probes{each}")


def _log_binom_pmf(k: int, n: int, q: float) -> float:
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
            + k * math.log(q) + (n - k) * math.log1p(-q))


def order_statistic_ranks(n: int, q: float, confidence: float) -> tuple[int | None, int | None]:
    """1-based ranks (l, u) with P(x(l) <= the q-quantile <= x(u)) >= confidence, from B ~ Binomial(n, q)
    (the number of requests below the true quantile): l is the largest rank with P(B < l) <= alpha/2, u
    the smallest with P(B >= u) <= alpha/2. None where no order statistic is far enough out."""
    alpha = 1 - confidence
    if n == 0:
        return None, None
    cdf, acc = [], 0.0
    for k in range(n + 1):
        acc += math.exp(_log_binom_pmf(k, n, q))
        cdf.append(min(acc, 1.0))          # cdf[k] = P(B <= k)
    low = max((r for r in range(1, n + 1) if cdf[r - 1] <= alpha / 2), default=None)
    high = next((r for r in range(1, n + 1) if 1 - cdf[r - 1] <= alpha / 2), None)
    return low, high


def percentile_interval(values_ms: Sequence[float], p: float, confidence: float
                        ) -> tuple[float | None, float | None, float | None]:
    """The p-th percentile and its order-statistic interval, in the values' unit."""
    if not values_ms:
        return None, None, None
    a = np.sort(np.asarray(values_ms, dtype=float))
    lo_r, hi_r = order_statistic_ranks(len(a), p / 100, confidence)
    return (float(np.percentile(a, p)), None if lo_r is None else float(a[lo_r - 1]),
            None if hi_r is None else float(a[hi_r - 1]))


def _per_request(r: RequestResult, metric: str) -> float | None:
    if not r.ok:
        return None
    if metric == "ttft_ms":
        return None if r.ttft_s is None else r.ttft_s * 1000
    if metric == "tpot_ms":
        t = tpot_s(r)
        return None if t is None else t * 1000
    return None if r.latency_s is None else r.latency_s * 1000


def judge(cap: Capacity, results: Sequence[RequestResult]) -> tuple[bool, list[BoundCheck], float | None, str]:
    """Whether one probe meets the SLO: (passed, each bound's check, good share, why it failed)."""
    checks, why = [], []
    for b in cap.bounds:
        vals = [v for v in (_per_request(r, b.metric) for r in results) if v is not None]
        value, low, high = percentile_interval(vals, b.p, cap.confidence)
        if cap.pass_rule == "upper":
            ok = high is not None and high <= b.max
        else:
            ok = value is not None and value <= b.max
        decisive = (high is not None and high <= b.max) or (low is not None and low > b.max)
        checks.append(BoundCheck(metric=b.metric, p=b.p, max=b.max, n=len(vals), value=value, low=low, high=high,
                                 ok=ok, decisive=decisive))
        if not ok:
            shown = "no request measured" if value is None else f"{value:.4g}"
            rule = " (interval top)" if cap.pass_rule == "upper" and value is not None else ""
            why.append(f"p{b.p:g} {b.metric} {shown}{rule} above {b.max:g}")
    good = [r.ok and all((v := _per_request(r, b.metric)) is None or v <= b.max for b in cap.bounds)
            and (r.ttft_s is not None) for r in results]
    share = sum(good) / len(good) if good else None
    if cap.goodput_share_min is not None and (share is None or share < cap.goodput_share_min):
        why.append(f"good share {0 if share is None else share:.3f} below {cap.goodput_share_min:g}")
    failed = sum(not r.ok for r in results)
    if results and not failed < len(results):
        why.append("no request completed")
    elif failed and cap.goodput_share_min is None:
        # Without a declared share, an errored request is never within the SLO.
        why.append(f"{failed} of {len(results)} requests failed")
    return not why, checks, share, "; ".join(why)


def _mid(cap: Capacity, a: float, b: float) -> float:
    if cap.axis == "concurrency":
        return float((int(a) + int(b)) // 2)
    return math.sqrt(a * b)


def _narrow(cap: Capacity, a: float, b: float) -> bool:
    return b - a <= 1 if cap.axis == "concurrency" else b / a - 1 <= cap.search.rel_tol


def _up(cap: Capacity, v: float) -> float:
    nxt = v * cap.search.growth
    if cap.axis == "concurrency":
        nxt = float(max(int(v) + 1, round(nxt)))
    return min(nxt, cap.search.hi)


def _down(cap: Capacity, v: float) -> float:
    nxt = v / cap.search.growth
    if cap.axis == "concurrency":
        nxt = float(min(int(v) - 1, round(nxt)))
    return max(nxt, cap.search.floor if cap.search.floor is not None else cap.search.lo)


def search(cap: Capacity, declared: dict, probe: Probe) -> tuple[CapacitySearch, list[ServePoint]]:
    """Run the search with `probe` measuring each step; the record's block and every probe's point."""
    s = cap.search
    probes: list[CapacityProbe] = []
    points: list[ServePoint] = []
    passed_at: float | None = None     # highest pass so far
    failed_at: float | None = None     # lowest fail so far
    value, phase = float(s.lo), "bracket"
    status, stop = "max_probes", f"the budget of {s.max_probes} probes ended before the bracket was narrow"
    while len(probes) < s.max_probes:
        step = len(probes)
        point, results = probe(step, value, phase)
        points.append(point)
        if point.status != "ok" or results is None:
            probes.append(CapacityProbe(step=step, phase=phase, value=value, point=point.index, passed=None,
                                        why=point.reason or "the probe was not measured"))
            status, stop = "failed", f"probe {step} ({cap.axis} {value:g}) could not be measured: {point.reason}"
            break
        ok, checks, share, why = judge(cap, results)
        probes.append(CapacityProbe(step=step, phase=phase, value=value, point=point.index, passed=ok,
                                    checks=checks, good_share=share, why=why))
        if ok:
            passed_at = value
        else:
            failed_at = value
        if failed_at is None:           # still bracketing upward
            if value >= s.hi:
                status, stop = "at_least_hi", f"the highest value allowed ({s.hi:g}) passed"
                break
            value = _up(cap, value)
            continue
        if passed_at is None:
            if s.floor is not None and value > s.floor:   # still bracketing downward
                value = _down(cap, value)
                continue
            status, stop = "below_lo", f"the lowest value ({value:g}) failed: {why}"
            break
        if _narrow(cap, passed_at, failed_at):
            status = "found"
            stop = (f"bracket [{passed_at:g}, {failed_at:g}] within "
                    + ("one request in flight" if cap.axis == "concurrency" else f"rel_tol {s.rel_tol:g}"))
            break
        phase = "bisect"
        value = _mid(cap, passed_at, failed_at)
    capacity = passed_at if status in ("found", "at_least_hi", "max_probes") else None
    block = CapacitySearch(axis=cap.axis, declared=declared, method=method(cap),
                           interval=f"{INTERVAL}, {cap.confidence:.0%}", pass_rule=cap.pass_rule, probes=probes,
                           status=status, capacity=capacity, bracket_low=passed_at, bracket_high=failed_at, stop=stop)
    return block, points
