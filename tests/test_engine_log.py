"""The engine's own view of a serve point (harness.measure.engine_log), read from vLLM's stats lines.

The parser is checked on real server logs the project ships (vLLM 0.32.0 on the CPU, 0.24.0 on an H100);
the point's window (a byte offset, the first line dropped) on a log written here; the table's column on
a frame. tests/test_serve.py's real server checks that a point measured on vLLM carries the view."""

from __future__ import annotations

import glob
from pathlib import Path

import pandas as pd

from harness.analyze import serve as aserve
from harness.measure import engine_log
from harness.publish.sections.serving import _engine

ROOT = Path(__file__).resolve().parents[1]
GPU_LINE = ("(APIServer pid=905) INFO 12-07 16:35:09 [loggers.py:273] Engine 000: Avg prompt throughput: "
            "{p} tokens/s, Avg generation throughput: {g} tokens/s, Running: {r} reqs, Waiting: {w} reqs, "
            "GPU KV cache usage: {kv}%, Prefix cache hit rate: 0.0%\n")


def _one(pattern: str) -> Path:
    (path,) = glob.glob(str(ROOT / pattern))
    return Path(path)


def test_real_gpu_log_every_stats_line_but_the_first():
    log = _one("results/h100-capacity-steady/runs/*/h200-0.24.0/*/steady-grid/default/r1/run.log")
    lines = [x for x in log.read_text().splitlines() if "Engine 000: Avg prompt" in x]
    v = engine_log.view(log, 0)
    assert v is not None and v.samples == len(lines) - 1 == 92
    # The saturated probes of that run: a queue of 470 and a full KV cache (its README's table).
    assert v.waiting_max == 470 and v.kv_usage_max_pct == 100.0 and v.running_max == 881
    assert 4000 < v.generation_tok_s_mean < 8000


def test_real_cpu_log_names_its_kv_cache_cpu():
    log = _one("results/cpu-serve-steady/runs/*/cpu-0.32.0/tiny-llama/steady/default/r1/run.log")
    assert "CPU KV cache usage" in log.read_text()
    v = engine_log.view(log, 0)
    assert v is not None and v.samples == 5 and v.waiting_max == 0 and v.generation_tok_s_mean > 100


def test_a_points_window_starts_at_its_offset_and_drops_the_first_line(tmp_path):
    log = tmp_path / "run.log"
    assert engine_log.offset(log) == 0 and engine_log.view(log, 0) is None   # no log yet
    log.write_text("server up\n" + GPU_LINE.format(p=1, g=1, r=900, w=900, kv=99.0))
    at = engine_log.offset(log)
    with log.open("a") as f:
        f.write(GPU_LINE.format(p=5, g=50, r=500, w=500, kv=90.0))        # its window began before the point
        f.write("INFO POST /v1/completions 200 OK\n")
        f.write(GPU_LINE.format(p=10, g=100, r=3, w=0, kv=20.0))
        f.write(GPU_LINE.format(p=30, g=300, r=7, w=2, kv=40.5))
    v = engine_log.view(log, at)
    assert (v.samples, v.running_max, v.waiting_max, v.kv_usage_max_pct) == (2, 7, 2, 40.5)
    assert (v.generation_tok_s_mean, v.prompt_tok_s_mean) == (200.0, 20.0)
    # One line inside the point (its first), or none: no sample.
    assert engine_log.view(log, engine_log.offset(log)) is None
    with log.open("a") as f:
        f.write(GPU_LINE.format(p=1, g=1, r=1, w=0, kv=1.0))
    assert engine_log.view(log, log.stat().st_size - 200) is None


def test_the_repeated_loads_table_carries_the_engines_queue():
    base = {"model": "m", "workload": "w", "leg": "a", "concurrency": 64, "request_rate": 30.0, "tp": 1,
            "ttft_p99_ms": 900.0, "tpot_p99_ms": 20.0, "slo_ttft_ms": 1000.0, "slo_tpot_ms": 50.0, "good_share": 1.0}
    rows = [base | {"repeat": 1, "seed": s, "engine_waiting_max": w, "engine_kv_max_pct": kv, "send_lag_p99_ms": lag}
            for s, w, kv, lag in [(1, 0, 30.0, 2.0), (2, 12, 99.5, 40.0), (3, None, None, None)]]
    (r,) = aserve.repeated(pd.DataFrame(rows)).itertuples()
    assert (r.engine_points, r.engine_waiting_max, r.engine_kv_max_pct) == (2, 12.0, 99.5)
    assert r.send_lag_p99_max_ms == 40.0
    assert _engine(r) == "12 / 100%"
    none = [x | {"engine_waiting_max": None, "engine_kv_max_pct": None} for x in rows]
    (r,) = aserve.repeated(pd.DataFrame(none)).itertuples()
    assert r.engine_points == 0 and _engine(r) == "—"
    older = [{k: v for k, v in x.items() if not k.startswith(("engine", "send_lag"))} for x in rows]
    (r,) = aserve.repeated(pd.DataFrame(older)).itertuples()     # a frame without the columns at all
    assert r.engine_points == 0 and r.send_lag_p99_max_ms is None


def _metrics_server(bodies: list[str | None]):
    """FAKE /metrics endpoint: answers each GET with the next body (the last one repeats), 404 for None."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            body = bodies.pop(0) if len(bodies) > 1 else bodies[0]
            if body is None or self.path != "/metrics":
                self.send_response(404)
                self.end_headers()
                return
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def _prom(running: int, waiting: int) -> str:
    # vLLM's Prometheus names and shape (a HELP and TYPE line, then labelled gauges)
    return ("# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="m"}} {float(running)}\n'
            f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {float(waiting)}\n'
            'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 9.0\n')


def test_a_point_waits_until_the_engine_holds_no_request_fake_metrics():
    from harness.measure import serve as mserve

    srv, base = _metrics_server([_prom(3, 2), _prom(1, 0), _prom(0, 0)])
    try:
        assert mserve.in_engine(base) == 5
        waited, left = mserve.drain(base, timeout_s=10, poll_s=0.05)
        assert left == 0 and waited > 0
    finally:
        srv.shutdown()
    srv, base = _metrics_server([_prom(4, 1)])         # never drains: the wait is bounded
    try:
        waited, left = mserve.drain(base, timeout_s=0.3, poll_s=0.05)
        assert left == 5 and 0.3 <= waited < 2
    finally:
        srv.shutdown()
    srv, base = _metrics_server([None])                # no metrics: not waited for
    try:
        waited, left = mserve.drain(base, timeout_s=10, poll_s=0.05)
        assert left is None and waited < 2
    finally:
        srv.shutdown()
