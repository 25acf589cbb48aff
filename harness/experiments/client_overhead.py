"""The serving client's own overhead: how much CPU `harness.measure.loadgen` spends on this machine,
and the highest request rate it can drive, against an endpoint that does no work.

A serve run's numbers hold only while the client is not the bottleneck. The endpoint here answers
`/health` and streams `/v1/completions` at once, with no model: `output_tokens` SSE chunks shaped like
vLLM's (`text_completion` objects, `usage: null` on each token chunk, a last chunk with no choices and
the `usage`, then `[DONE]`), HTTP/1.1 chunked and keep-alive, as vLLM's server sends them. It runs in
its own process, so its CPU is never counted as the client's, and reports its own CPU time on
`GET /cpu` (its process time, whatever the platform: no psutil, which the project does not depend
on, and no /proc). Each concurrency is driven by `loadgen.run_point`, the client every serve run
uses, unchanged; what it sees (TTFT, ITL) is the floor the client and the loopback add to any server.

The client's CPU share is `loadgen.summarize`'s `client_cpu_share`, the same number a serve record
keeps: the process's CPU time over `run_point` (all its threads, and asyncio.run's setup and
teardown) divided by the point's duration (first send to last completion). The event loop is one
thread holding the GIL, so the share stays near or under 1.0; it can pass 1.0 a little because the
numerator's window is wider than the denominator's (visible on short points) and because aiohttp
resolves host names in a worker thread. A point whose client share is at or above `SATURATED` was
limited by the client; one whose endpoint share is was limited by the endpoint, and its request
rate is then a lower bound on what the client can drive.

The result's format and its history: harness.schema.client_overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

from harness import __version__
from harness.core import flags
from harness.core.errors import UserError
from harness.experiments import Ran
from harness.schema import client_overhead as schema
from harness.schema.client_overhead import Headline, Inputs, Machine, OverheadResult, Point

JSON_NAME, MD_NAME, LOG_NAME = "client-overhead.json", "client-overhead.md", "client-overhead-endpoint.log"
HOST = "127.0.0.1"
MODEL = "overhead-endpoint"
SATURATED = 0.9   # a CPU share at or above this: that side was the bottleneck of the point
ENDPOINT = ("asyncio HTTP/1.1 server in its own process: /health, streaming /v1/completions "
            "(chunked, keep-alive, vLLM-shaped SSE chunks sent at once, no model), /cpu")


# --- the endpoint (its own process) ---------------------------------------------------------------

def _http(status: bytes, body: bytes = b"", ctype: bytes = b"application/json") -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


_STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
                b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")


def _chunk(obj: dict[str, Any] | str) -> bytes:
    """One SSE event as one HTTP chunk."""
    data = b"data: " + (obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def stream_chunks(*, request_id: str, max_tokens: int, prompt_tokens: int, created: int = 0) -> list[bytes]:
    """The HTTP chunks of one streamed completion, in order: `max_tokens` token events (the last
    with finish_reason "length"), the usage event with no choices, `[DONE]`, the terminating chunk."""
    def token(finish: str | None) -> bytes:
        return _chunk({"id": request_id, "object": "text_completion", "created": created, "model": MODEL,
                       "choices": [{"index": 0, "text": " x", "logprobs": None, "finish_reason": finish,
                                    "stop_reason": None}], "usage": None})

    mid, last = token(None), token("length")
    usage = _chunk({"id": request_id, "object": "text_completion", "created": created, "model": MODEL,
                    "choices": [], "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + max_tokens,
                                             "completion_tokens": max_tokens}})
    return [mid] * (max_tokens - 1) + [last] * (max_tokens > 0) + [usage, _chunk("[DONE]"), b"0\r\n\r\n"]


async def _connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counter: list[int]) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            method, path = lines[0].split(b" ")[:2]
            length = next((int(h.split(b":", 1)[1]) for h in lines[1:] if h.lower().startswith(b"content-length:")), 0)
            body = await reader.readexactly(length) if length else b""
            if path == b"/health":
                writer.write(_http(b"200 OK"))
            elif path == b"/cpu":
                writer.write(_http(b"200 OK", json.dumps({"cpu_s": time.process_time(), "pid": os.getpid()}).encode()))
            elif method == b"POST" and path == b"/v1/completions":
                req = json.loads(body)
                counter[0] += 1
                writer.write(_STREAM_HEAD)
                for part in stream_chunks(request_id=f"cmpl-{counter[0]}", max_tokens=int(req["max_tokens"]),
                                          prompt_tokens=len(req.get("prompt") or ()), created=int(time.time())):
                    writer.write(part)
                    # One event per write, and a turn of the loop between them, so that concurrent streams
                    # interleave and the client reads its events one by one, as from a real server.
                    await writer.drain()
                    await asyncio.sleep(0)
            else:
                writer.write(_http(b"404 Not Found", b'{"error":"not found"}'))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError, KeyError):
        pass  # the client closed the connection (or sent what this endpoint does not serve)
    finally:
        writer.close()


async def _serve(port: int) -> None:
    counter = [0]
    server = await asyncio.start_server(lambda r, w: _connection(r, w, counter), HOST, port, backlog=1024)
    async with server:
        await server.serve_forever()


def serve_endpoint(port: int) -> None:
    """Run the endpoint until killed (the child process's whole job)."""
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(port))


# --- the client side ------------------------------------------------------------------------------

def _endpoint_cpu_s(base: str) -> float | None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with contextlib.suppress(OSError, ValueError, KeyError):
        with opener.open(base + "/cpu", timeout=5) as r:
            return float(json.loads(r.read())["cpu_s"])
    return None


@contextlib.contextmanager
def endpoint(log: Path, *, startup_timeout_s: float = 30.0):
    """The endpoint's base URL while it runs, in its own process group, killed with it on exit."""
    from harness.measure.run import process_group
    from harness.measure.serve import free_port, wait_healthy

    port = free_port()
    cmd = [sys.executable, "-c", f"from harness.experiments.client_overhead import serve_endpoint; serve_endpoint({port})"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                         os.environ.get("PYTHONPATH")]))}
    log.parent.mkdir(parents=True, exist_ok=True)
    with process_group(cmd, env=env, log=log, cwd=log.parent) as proc:
        base = f"http://{HOST}:{port}"
        why = wait_healthy(base, proc, startup_timeout_s)
        if why is not None:
            raise UserError(f"{log}: the client-overhead endpoint did not start: {why}")
        yield base


def _share(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _limited_by(client: float | None, end: float | None) -> Literal["client", "endpoint", "neither"]:
    if client is not None and client >= SATURATED and (end is None or client >= end):
        return "client"
    if end is not None and end >= SATURATED:
        return "endpoint"
    return "neither"


def _point(base: str, *, concurrency: int, prompts: list[list[int]], output_tokens: int, timeout_s: float) -> Point:
    from harness.measure import loadgen

    e0, w0 = _endpoint_cpu_s(base), time.perf_counter()
    run = loadgen.run_point(base, model=MODEL, prompts=prompts, max_tokens=output_tokens, concurrency=concurrency,
                            timeout_s=timeout_s)
    wall, e1 = time.perf_counter() - w0, _endpoint_cpu_s(base)
    m = loadgen.summarize(run, slo_ttft_ms=float("inf"), slo_tpot_ms=float("inf"))
    done = [r for r in run.results if r.ok]
    chunks = sum(len(r.itl_s) + 1 for r in done)
    end_cpu = e1 - e0 if e0 is not None and e1 is not None else None
    client_share, end_share = m["client_cpu_share"], _share(end_cpu, wall)
    return Point(concurrency=concurrency, requests=m["requests"], completed=m["completed"], failed=m["failed"],
                 duration_s=run.duration_s, requests_per_s=m["requests_per_s"],
                 output_chunks_per_s=_share(chunks, run.duration_s), output_tok_s=m["output_tok_s"],
                 client_cpu_s=run.client_cpu_s, client_cpu_share=client_share, endpoint_cpu_s=end_cpu,
                 endpoint_cpu_share=end_share, ttft_p50_ms=m["ttft_ms"]["p50"], ttft_p99_ms=m["ttft_ms"]["p99"],
                 itl_p50_ms=m["itl_ms"]["p50"], itl_p99_ms=m["itl_ms"]["p99"], e2el_p50_ms=m["e2el_ms"]["p50"],
                 limited_by=_limited_by(client_share, end_share), errors=m["errors"])


def _loadavg() -> tuple[float, float, float] | None:
    with contextlib.suppress(OSError, AttributeError):
        return os.getloadavg()
    return None


def machine() -> Machine:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return Machine(cpu_count=os.cpu_count(), usable_cpus=usable, platform=platform.platform(),
                   machine=platform.machine(), python=platform.python_version(), harness_version=__version__,
                   aiohttp_version=version("aiohttp"), loadavg_start=_loadavg())


def _check(concurrencies: Sequence[int], requests: int, output_tokens: int, prompt_tokens: int,
           warmup_requests: int) -> tuple[int, ...]:
    cs = tuple(concurrencies)
    if not cs or any(not isinstance(c, int) or isinstance(c, bool) or c < 1 for c in cs):
        raise UserError(f"client-overhead: concurrencies must be integers >= 1, got {list(cs)}")
    for name, v, low in (("requests", requests, 1), ("output_tokens", output_tokens, 1),
                         ("prompt_tokens", prompt_tokens, 1), ("warmup_requests", warmup_requests, 1)):
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise UserError(f"client-overhead: {name} must be an integer >= {low}, got {v!r}")
    return cs


def client_overhead(*, concurrencies: Sequence[int] = (1, 4, 16, 64, 256), requests: int = 2000,
                    output_tokens: int = 64, prompt_tokens: int = 32, warmup_requests: int = 100,
                    timeout_s: float = 60.0, log: Path | None = None) -> OverheadResult:
    """Measure the client against the trivial endpoint, one point per concurrency, in order."""
    from harness.schema.record import now

    cs = _check(concurrencies, requests, output_tokens, prompt_tokens, warmup_requests)
    created, t0, mach = now(), time.perf_counter(), machine()
    prompts = [[1 + (i + j) % 1000 for j in range(prompt_tokens)] for i in range(requests)]
    points: list[Point] = []
    with contextlib.ExitStack() as stack:
        if log is None:
            import tempfile
            log = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="client-overhead-"))) / LOG_NAME
        base = stack.enter_context(endpoint(log))
        # Never none: the endpoint's and the client's first requests of a process pay one-off costs
        # that no point should carry. (aiohttp's first import, about half a CPU second, is outside
        # every point's CPU window anyway: loadgen.prepare.)
        from harness.measure import loadgen

        loadgen.run_point(base, model=MODEL, prompts=prompts[:warmup_requests], max_tokens=output_tokens,
                          concurrency=min(4, warmup_requests), timeout_s=timeout_s)
        for c in cs:
            points.append(_point(base, concurrency=c, prompts=prompts, output_tokens=output_tokens, timeout_s=timeout_s))
    best = max((p for p in points if p.requests_per_s is not None), key=lambda p: p.requests_per_s, default=None)
    head = Headline(requests_per_s=best.requests_per_s if best else None, concurrency=best.concurrency if best else None,
                    limited_by=best.limited_by if best else None, client_cpu_share=best.client_cpu_share if best else None)
    return OverheadResult(created_at=created, wall_s=time.perf_counter() - t0,
                          machine=mach.model_copy(update={"loadavg_end": _loadavg()}),
                          inputs=Inputs(concurrencies=cs, requests=requests, output_tokens=output_tokens,
                                        prompt_tokens=prompt_tokens, warmup_requests=warmup_requests,
                                        timeout_s=timeout_s, endpoint=ENDPOINT, saturated_at=SATURATED),
                          points=points, headline=head)


# --- files and formatting -------------------------------------------------------------------------

def _num(v: float | None, fmt: str) -> str:
    from harness.analyze.fmt import MISSING

    return MISSING if v is None else format(v, fmt)


def _pct(v: float | None) -> str:
    return _num(None if v is None else v * 100, ".0f") + ("%" if v is not None else "")


def _load(t: tuple[float, float, float] | None) -> str:
    return _num(None, "") if t is None else " / ".join(f"{x:.2f}" for x in t)


def main_md(result: OverheadResult) -> str:
    """The result as markdown: the headline, the machine, one table row per concurrency."""
    r, m, h = result, result.machine, result.headline
    lines = [
        "# Client overhead: the serving load generator against a trivial local endpoint", "",
        f"**Highest request rate: {_num(h.requests_per_s, ',.0f')} req/s** at concurrency {h.concurrency} "
        f"({r.inputs.output_tokens} token chunks per request; limited by: {h.limited_by}; client CPU "
        f"{_pct(h.client_cpu_share)}).", "",
        f"Machine: {m.platform}, {m.machine}, {m.cpu_count} CPUs ({m.usable_cpus} usable), Python {m.python}, "
        f"harness {m.harness_version}, aiohttp {m.aiohttp_version}; load average (1/5/15 min) "
        f"{_load(m.loadavg_start)} at the start, {_load(m.loadavg_end)} at the end.", "",
        f"Endpoint: {r.inputs.endpoint}. {r.inputs.requests} requests per point, prompts of "
        f"{r.inputs.prompt_tokens} ids, {r.inputs.warmup_requests} warm-up requests before the first point; "
        f"{r.created_at}, {r.wall_s:.0f} s in all.", "",
        "| concurrency | completed | req/s | chunks/s | client CPU s | client CPU | endpoint CPU | "
        "TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | E2EL p50 ms | limited by |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for p in r.points:
        lines.append(f"| {p.concurrency} | {p.completed}/{p.requests} | {_num(p.requests_per_s, ',.0f')} | "
                     f"{_num(p.output_chunks_per_s, ',.0f')} | {p.client_cpu_s:.2f} | {_pct(p.client_cpu_share)} | "
                     f"{_pct(p.endpoint_cpu_share)} | {_num(p.ttft_p50_ms, '.2f')} | {_num(p.ttft_p99_ms, '.2f')} | "
                     f"{_num(p.itl_p50_ms, '.3f')} | {_num(p.itl_p99_ms, '.3f')} | {_num(p.e2el_p50_ms, '.2f')} | "
                     f"{p.limited_by} |")
    lines += ["", f"CPU shares are of one core (100% = one core busy for the whole point). A side at or above "
              f"{SATURATED:.0%} limited its point; where the endpoint did, the point's rate is a lower bound on "
              "what the client can drive. TTFT and ITL here are the floor the client and the loopback add to "
              "any server's numbers."]
    if m.usable_cpus is not None and m.usable_cpus < 2:
        lines += ["", f"Only {m.usable_cpus} CPU usable: the client and the endpoint shared it, so these rates "
                      "understate what the client alone can drive."]
    errs = sorted({e for p in r.points for e in p.errors})
    if errs:
        lines += ["", "Errors: " + "; ".join(errs)]
    return "\n".join(lines) + "\n"


def write(result: OverheadResult, out_dir: Path) -> Path:
    from harness.schema.record import write_json_atomic

    path = Path(out_dir) / JSON_NAME
    write_json_atomic(path, result.model_dump(mode="json"))
    (Path(out_dir) / MD_NAME).write_text(main_md(result), encoding="utf-8")
    return path


def read(path: Path) -> OverheadResult:
    return schema.read(path)


def run_and_write(out_dir: Path, *, replace: bool = False, **kw: Any) -> Path:
    """Measure (keyword arguments as `client_overhead`'s) and write client-overhead.json and .md under
    `out_dir`, with the endpoint's log beside them; the JSON's path. Measured into a new folder moved
    into place whole (schema.outdir): an `out_dir` the harness did not write is refused, one it wrote
    is replaced only with `replace`."""
    from harness.schema.outdir import output_dir

    out_dir = Path(out_dir)
    with output_dir(out_dir, verb="client-overhead", replace=replace) as tmp:
        write(client_overhead(**{"log": tmp / LOG_NAME, **kw}), tmp)
    return out_dir / JSON_NAME


# --- the experiment (harness.experiments) ---------------------------------------------------------

NAME = "client-overhead"
GROUP = "check"
HELP = "the serving client's own CPU share and highest request rate against a trivial local endpoint (no model)"
EXAMPLE = "harness check client-overhead /tmp/overhead --concurrency 1 16 64 --requests 500"
SIDE_SECTION = False
quote = None


@dataclass(frozen=True, kw_only=True)
class Args:
    out_dir: Path
    replace: bool = False
    concurrency: tuple[int, ...] = (1, 4, 16, 64, 256)
    requests: int = 2000
    output_tokens: int = 64

    @classmethod
    def add_cli_args(cls, p: argparse.ArgumentParser) -> None:
        p.add_argument("out_dir", type=Path, help="folder for client-overhead.json / .md")
        flags.replace(p)
        p.add_argument("--concurrency", type=int, nargs="+", default=list(cls.concurrency))
        p.add_argument("--requests", type=int, default=cls.requests, help="requests per point")
        p.add_argument("--output-tokens", type=int, default=cls.output_tokens, help="streamed tokens per request")

    @classmethod
    def from_cli_args(cls, a: argparse.Namespace) -> "Args":
        return cls(out_dir=a.out_dir, replace=a.replace, concurrency=tuple(a.concurrency), requests=a.requests,
                   output_tokens=a.output_tokens)


def run(args: Args) -> Ran:
    path = run_and_write(args.out_dir, concurrencies=args.concurrency, requests=args.requests,
                         output_tokens=args.output_tokens, replace=args.replace)
    return Ran(record=read(path), files=(path, path.parent / MD_NAME))


@dataclass(frozen=True)
class Summary:
    result: OverheadResult


def summary(rec: OverheadResult) -> Summary:
    return Summary(rec)


def summary_md(s: Summary) -> str:
    return main_md(s.result)


def study_records(study_dir: Path, legs: set[str], models: set[str]) -> list[OverheadResult]:
    """None: the client's overhead is a property of the machine and the client, not of a study."""
    return []
