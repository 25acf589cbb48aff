"""harness.measure.loadgen against a FAKE server (a few lines of http.server streaming vLLM-shaped
SSE chunks, no model), in a fresh interpreter so that aiohttp's first import really happens there."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Run in a child: this test process has long since imported aiohttp. The child wraps
# time.process_time to see, when run_point starts its CPU clock, whether aiohttp is loaded already.
CHILD = textwrap.dedent('''
    import json, sys, threading, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class FakeServer(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"          # the body ends when the connection closes

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            n = req["max_tokens"]
            for i in range(n):
                msg = {"choices": [{"index": 0, "text": " x", "finish_reason": "length" if i == n - 1 else None}],
                       "usage": None}
                self.wfile.write(b"data: " + json.dumps(msg).encode() + b"\\n\\n")
            usage = {"choices": [], "usage": {"completion_tokens": n, "prompt_tokens": len(req["prompt"])}}
            self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\\n\\ndata: [DONE]\\n\\n")

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeServer)
    threading.Thread(target=srv.serve_forever, daemon=True).start()

    seen = []
    real = time.process_time

    def clock():
        if sys._getframe(1).f_code.co_name == "run_point":
            seen.append("aiohttp" in sys.modules)
        return real()

    time.process_time = clock
    from harness.measure import loadgen

    at_import = "aiohttp" in sys.modules
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    runs = [loadgen.run_point(base, model="m", prompts=[[1, 2]] * 3, max_tokens=3, concurrency=2, timeout_s=20)
            for _ in range(2)]
    print(json.dumps({"at_import": at_import, "at_clock": seen,
                      "ok": [sum(r.ok for r in run.results) for run in runs],
                      "tokens": [sum(r.output_tokens for r in run.results) for run in runs]}))
''')


def test_first_point_cpu_clock_starts_after_aiohttp_is_imported_fake_server():
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["ok"] == [3, 3] and res["tokens"] == [9, 9]       # the fake server was really driven
    # Two points, each reading the clock at its start and its end. aiohttp was loaded before the first
    # point's clock started, so its import's CPU time is not in that point's client share (a point
    # measured with no warm-up requests before it); the old code read [False, True, True, True].
    assert res["at_clock"] == [True] * 4
