"""A paced point held in steady state: uncounted requests at the point's rate before its counted ones
(`lead_in_s`) and after them until the last counted one has finished (`lead_out`), against a FAKE server
(an aiohttp app streaming vLLM-shaped chunks, no model) that logs what arrived when; the workload keys'
validation; and the seeds that keep warm-up, lead and counted prompts apart."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from harness.core.errors import UserError
from harness.measure import loadgen
from harness.measure.scenario import load_scenario
from harness.workloads import serve as kind
from tests import fakestream

ROOT = Path(__file__).resolve().parents[1]
COUNTED, LEAD_IN, LEAD_OUT = 1, 7, 8


def _fake_server(slow_lead_s: float = 0.0) -> tuple[str, threading.Event, list[tuple[float, int]]]:
    """Streams max_tokens chunks 10 ms apart; a lead-out request (prompt starting 8) waits `slow_lead_s`
    before its first chunk. Logs (arrival time, the prompt's first id) for every request."""
    return fakestream.serve(chunk_delay_s=0.01, before_first=lambda first: slow_lead_s if first == LEAD_OUT else 0.0)


def _build(seeds: list[int]):
    def build(n: int, seed: int) -> list[list[int]]:
        seeds.append(seed)
        return [[LEAD_IN if seed % 1000 == 1 else LEAD_OUT, 2]] * n
    return build


def test_a_lead_in_sends_uncounted_requests_at_the_rate_before_the_counted_ones_fake_server() -> None:
    base, stop, log = _fake_server()
    seeds: list[int] = []
    try:
        # evenly spaced (burstiness .inf), so that the last lead-in request and the first counted one are
        # at least 100 ms apart and arrive in that order however busy the host
        run = loadgen.run_point(base, model="m", prompts=[[COUNTED, 2]] * 10, max_tokens=3, concurrency=64,
                                rate=10.0, seed=3000, timeout_s=20, arrivals="vllm", burstiness=float("inf"),
                                lead=loadgen.Lead(build=_build(seeds), lead_in_s=1.0))
    finally:
        stop.set()
    assert len(run.results) == 10 and all(r.ok for r in run.results)
    firsts = [k for _, k in log]
    n_in = firsts.count(LEAD_IN)
    # 1 s at 10 per second, 100 ms apart: 9 or 10 (the last one falls at 1.0 s up to rounding)
    assert n_in == len(loadgen.lead_in_offsets(1.0, 10.0, 3001, burstiness=float("inf"))) and 9 <= n_in <= 10
    assert run.lead_requests == n_in and seeds == [3001]
    first_counted = min(t for t, k in log if k == COUNTED)
    assert all(t < first_counted for t, k in log if k == LEAD_IN)
    # the lead-in is not in the point's duration: 10 counted requests, the last due at 1 s, plus a stream
    assert 1.0 <= run.duration_s < 1.0 + 1.0
    m = loadgen.summarize(run, slo_ttft_ms=1000, slo_tpot_ms=50)
    assert m["requests"] == 10 and m["lead_requests"] == n_in


def test_a_lead_out_keeps_arrivals_going_until_the_counted_requests_finish_and_does_not_wait_for_its_own() -> None:
    base, stop, log = _fake_server(slow_lead_s=3.0)
    seeds: list[int] = []
    try:
        w0 = time.perf_counter()
        run = loadgen.run_point(base, model="m", prompts=[[COUNTED, 2]] * 8, max_tokens=20, concurrency=64,
                                rate=40.0, seed=5000, timeout_s=20,
                                lead=loadgen.Lead(build=_build(seeds), lead_out=True))
        wall = time.perf_counter() - w0
    finally:
        stop.set()
    assert all(r.ok for r in run.results) and seeds == [5002]
    last_counted = max(t for t, k in log if k == COUNTED)
    outs = [t for t, k in log if k == LEAD_OUT]
    # each counted request streams 20 chunks 10 ms apart (>= 0.2 s): at 40 per second several lead-out
    # requests arrive after the last counted one was sent, and none is counted
    assert len(outs) >= 3 and all(t > last_counted for t in outs) and run.lead_requests == len(outs)
    # a lead-out request takes 3 s on this server; the point ends when the counted ones do
    assert wall < 2.5 and len(run.results) == 8 and not run.lead_out_stopped


def test_a_bounded_lead_out_stops_its_arrivals_and_the_counted_requests_still_finish() -> None:
    # FAKE server on which a counted request waits 1.5 s before its first chunk: an unbounded lead-out
    # at 40 per second would send about 60 requests while they finish; bounded at 0.3 s, about 12.
    base, stop, log = fakestream.serve(chunk_delay_s=0.01, before_first=lambda first: 1.5 if first == COUNTED else 0.0)
    try:
        w0 = time.perf_counter()
        run = loadgen.run_point(base, model="m", prompts=[[COUNTED, 2]] * 8, max_tokens=3, concurrency=64,
                                rate=40.0, seed=5000, timeout_s=20, arrivals="vllm", burstiness=float("inf"),
                                lead=loadgen.Lead(build=_build([]), lead_out=True, lead_out_max_s=0.3))
        wall = time.perf_counter() - w0
    finally:
        stop.set()
    assert all(r.ok for r in run.results) and len(run.results) == 8 and wall >= 1.5
    last_counted = max(t for t, k in log if k == COUNTED)
    outs = [t for t, k in log if k == LEAD_OUT]
    assert run.lead_out_stopped and 1 <= len(outs) <= 20 and run.lead_requests == len(outs)
    assert max(outs) - last_counted < 0.3 + 0.5      # none after the bound (0.5 s of slack for a busy host)


def test_without_a_rate_or_a_lead_the_point_is_what_it_was() -> None:
    base, stop, log = _fake_server()
    try:
        run = loadgen.run_point(base, model="m", prompts=[[COUNTED, 2]] * 4, max_tokens=2, concurrency=4,
                                lead=loadgen.Lead(build=_build([]), lead_in_s=1.0, lead_out=True))
    finally:
        stop.set()
    assert [k for _, k in log] == [COUNTED] * 4 and run.lead_requests == 0


def _scenario(tmp_path: Path, extra: str, name: str = "cpu-capacity.yaml") -> Path:
    text = (ROOT / "scenarios" / name).read_text()
    old = "    warmup_requests: 4\n"
    assert old in text
    path = tmp_path / "s.yaml"
    path.write_text(text.replace(old, old + extra, 1))
    return path


@pytest.mark.parametrize("extra,msg", [
    ("    lead_in_s: -1\n", "lead_in_s: -1.0 should be a number of seconds, 0 or more"),
    ("    lead_in_s: soon\n", "lead_in_s: Input should be a valid number"),
    ("    lead_out: 1\n", "lead_out: 1 is not a boolean; write true or false"),
    ("    lead_out: true\n    lead_out_max_s: 0\n", "lead_out_max_s: 0.0 should be a number of seconds greater than 0"),
    ("    lead_out_max_s: 5\n", "lead_out_max_s bounds the lead-out: it needs lead_out: true"),
])
def test_bad_lead_keys_are_one_line_errors(tmp_path: Path, extra: str, msg: str) -> None:
    with pytest.raises(UserError) as e:
        load_scenario(_scenario(tmp_path, extra))
    assert "\n" not in str(e.value) and msg in str(e.value) and "s.yaml" in str(e.value)


def test_a_lead_needs_a_paced_point(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="lead_in_s and lead_out hold a paced point in steady state: they need "
                                        "request_rate"):
        load_scenario(_scenario(tmp_path, "    lead_out: true\n", "cpu-serve.yaml"))


def test_the_lead_keys_enter_the_work_only_when_set(tmp_path: Path) -> None:
    plain = load_scenario(ROOT / "scenarios" / "cpu-capacity.yaml").workloads[0].work
    assert "lead_in_s" not in plain and "lead_out" not in plain and "lead_out_max_s" not in plain
    work = load_scenario(_scenario(tmp_path, "    lead_in_s: 10\n    lead_out: true\n")).workloads[0].work
    assert work["lead_in_s"] == 10 and work["lead_out"] is True and "lead_out_max_s" not in work
    bounded = load_scenario(_scenario(tmp_path, "    lead_out: true\n    lead_out_max_s: 20\n")).workloads[0].work
    assert bounded["lead_out_max_s"] == 20


def test_warmup_lead_and_counted_prompts_never_share_a_seed() -> None:
    work = {"seed": 0, "warmup_requests": 4}
    seen: list[int] = []
    kind.warmup_prompts(work, lambda n, s: seen.append(s) or [])
    points = {kind.point_seed(work, i) + d for i in range(256) for d in (0, 1, 2)}
    assert seen[0] not in points and len(points) == 3 * 256


def test_send_lag_shows_requests_held_behind_their_schedule_fake_server() -> None:
    """A request that leaves late against its schedule (here: held by the concurrency bound) shows in
    send_lag_ms, not in its TTFT, which counts from the send (FAKE server: 5 chunks 20 ms apart)."""
    base, stop, _ = fakestream.serve(chunk_delay_s=0.02)
    try:
        def point(concurrency: int) -> dict:
            run = loadgen.run_point(base, model="m", prompts=[[COUNTED, 2]] * 8, max_tokens=5,
                                    concurrency=concurrency, rate=100.0, seed=0, timeout_s=20, arrivals="vllm",
                                    burstiness=float("inf"))
            assert all(r.ok and r.send_lag_s is not None for r in run.results)
            return loadgen.summarize(run, slo_ttft_ms=1000, slo_tpot_ms=1000)
        held, free = point(1), point(64)
    finally:
        stop.set()
    # One at a time, each ~100 ms against arrivals 10 ms apart: the 8th leaves ~0.6 s late.
    assert held["send_lag_ms"]["p99"] > 300 and held["send_lag_ms"]["p50"] > 100
    assert free["send_lag_ms"]["p50"] < held["send_lag_ms"]["p50"] / 2
    # TTFT counts from the send: the wait in line is not in it.
    assert held["ttft_ms"]["p99"] < held["send_lag_ms"]["p99"]
