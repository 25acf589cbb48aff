"""The client-overhead benchmark: the real load generator (`loadgen.run_point`, unchanged) against the
benchmark's own trivial endpoint, a stub with no model started in its own process; tiny numbers."""

from __future__ import annotations

import asyncio
import json

import pytest

from harness.core.errors import UserError
from harness.experiments import client_overhead as co
from harness.measure import loadgen
from harness.schema import client_overhead as schema


def test_stub_endpoint_chunks_are_what_loadgen_parses():
    """The stub endpoint's byte stream, served in-process: loadgen times one request per token chunk
    and takes the output tokens from the usage chunk, not from its own count."""
    async def main() -> tuple[loadgen.RequestResult, list[bytes]]:
        import aiohttp

        server = await asyncio.start_server(lambda r, w: co._connection(r, w, [0]), co.HOST, 0)
        port = server.sockets[0].getsockname()[1]
        async with server, aiohttp.ClientSession() as s:
            res = await loadgen.one_request(s, f"http://{co.HOST}:{port}/v1/completions", model="m",
                                            prompt=[1, 2, 3], max_tokens=5, timeout_s=10)
            async with s.get(f"http://{co.HOST}:{port}/health") as h:
                assert h.status == 200
            return res, co.stream_chunks(request_id="x", max_tokens=5, prompt_tokens=3)

    res, parts = asyncio.run(main())
    assert res.ok, res.error
    assert res.output_tokens == 5 and len(res.itl_s) == 4 and res.ttft_s is not None
    # The events as sent: 5 token chunks, the last one finished; usage with no choices; [DONE].
    events = [p.split(b"\r\n")[1].removeprefix(b"data: ").strip() for p in parts[:-1]]
    assert parts[-1] == b"0\r\n\r\n" and events[-1] == b"[DONE]"
    msgs = [json.loads(e) for e in events[:-1]]
    assert [m["choices"][0]["finish_reason"] for m in msgs[:5]] == [None] * 4 + ["length"]
    assert msgs[5]["choices"] == [] and msgs[5]["usage"]["completion_tokens"] == 5
    assert msgs[5]["usage"]["prompt_tokens"] == 3


def test_usage_not_chunk_count_gives_output_tokens(monkeypatch):
    """A stub endpoint whose usage claims more tokens than it streamed: loadgen reports the usage's."""
    real = co.stream_chunks

    def lying(**kw):
        parts = real(**kw)
        i = next(i for i, p in enumerate(parts) if b'"completion_tokens"' in p)
        parts[i] = co._chunk({"choices": [], "usage": {"completion_tokens": 99, "prompt_tokens": 1}})
        return parts

    monkeypatch.setattr(co, "stream_chunks", lying)

    async def main() -> loadgen.RequestResult:
        import aiohttp

        server = await asyncio.start_server(lambda r, w: co._connection(r, w, [0]), co.HOST, 0)
        port = server.sockets[0].getsockname()[1]
        async with server, aiohttp.ClientSession() as s:
            return await loadgen.one_request(s, f"http://{co.HOST}:{port}/v1/completions", model="m",
                                             prompt=[1], max_tokens=3, timeout_s=10)

    res = asyncio.run(main())
    assert res.ok and res.output_tokens == 99 and len(res.itl_s) == 2


def test_short_run_against_stub_endpoint_process(tmp_path):
    """Concurrency 1 and 4, 20 requests of 8 tokens, against the stub endpoint in its own process."""
    path = co.run_and_write(tmp_path, concurrencies=(1, 4), requests=20, output_tokens=8, warmup_requests=4)
    res = co.read(path)
    assert res.schema_version == schema.SCHEMA_VERSION and [p.concurrency for p in res.points] == [1, 4]
    for p in res.points:
        assert p.completed == p.requests == 20 and p.failed == 0 and not p.errors
        assert p.requests_per_s > 0 and p.output_chunks_per_s == pytest.approx(8 * p.requests_per_s)
        assert p.output_tok_s == pytest.approx(8 * p.requests_per_s)
        # One event-loop thread holds the GIL; the numerator's window (all of run_point) is a little
        # wider than the point's duration, hence the slack above 1.
        assert 0 <= p.client_cpu_share <= 1.5 and p.client_cpu_s > 0
        assert p.endpoint_cpu_share is not None and 0 <= p.endpoint_cpu_share <= 1.5
        assert 0 < p.ttft_p50_ms <= p.ttft_p99_ms and 0 < p.itl_p50_ms <= p.itl_p99_ms
    assert res.headline.requests_per_s == max(p.requests_per_s for p in res.points)
    assert res.machine.cpu_count and res.machine.aiohttp_version and res.machine.harness_version
    md = (tmp_path / co.MD_NAME).read_text()
    rows = [line for line in md.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == ["1", "4"]
    assert "20/20" in rows[0] and "Highest request rate" in md
    assert (tmp_path / co.LOG_NAME).exists()


@pytest.mark.parametrize("kw, what", [({"concurrencies": (0,)}, "concurrencies"), ({"concurrencies": ()}, "concurrencies"),
                                      ({"requests": 0}, "requests"), ({"output_tokens": 0}, "output_tokens"),
                                      ({"warmup_requests": 0}, "warmup_requests")])
def test_bad_input_is_one_line_and_nothing_started(tmp_path, kw, what):
    with pytest.raises(UserError, match=what):
        co.run_and_write(tmp_path / "out", **kw)
    assert not (tmp_path / "out").exists()


def test_read_refuses_another_kind(tmp_path):
    p = tmp_path / co.JSON_NAME
    p.write_text('{"kind": "bisect", "schema_version": 1}')
    with pytest.raises(UserError, match="not a client-overhead record"):
        co.read(p)
