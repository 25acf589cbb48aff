"""A FAKE OpenAI completions server for load-generator tests: an aiohttp app in a thread that streams
vLLM-shaped chunks (no model), and logs every request's arrival time and the first id of its prompt."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable


def serve(*, chunk_delay_s: float = 0.0, before_first: Callable[[int], float] | None = None
          ) -> tuple[str, threading.Event, list[tuple[float, int]]]:
    """Start the server: (base url, the event that stops it, the arrival log). Each request streams
    max_tokens chunks, `chunk_delay_s` apart, after waiting `before_first(first prompt id)` seconds."""
    from aiohttp import web

    log: list[tuple[float, int]] = []

    async def completions(request: web.Request) -> web.StreamResponse:
        req = await request.json()
        log.append((time.perf_counter(), req["prompt"][0]))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if before_first is not None:
            await asyncio.sleep(before_first(req["prompt"][0]))
        for _ in range(req["max_tokens"]):
            if chunk_delay_s:
                await asyncio.sleep(chunk_delay_s)
            await resp.write(b"data: " + json.dumps({"choices": [{"text": " x"}]}).encode() + b"\n\n")
        usage = {"choices": [], "usage": {"completion_tokens": req["max_tokens"], "prompt_tokens": 2}}
        await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        return resp

    ready, stop, box = threading.Event(), threading.Event(), {}

    def run() -> None:
        async def main() -> None:
            app = web.Application()
            app.router.add_post("/v1/completions", completions)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            box["port"] = site._server.sockets[0].getsockname()[1]  # noqa: SLF001
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)
            await runner.cleanup()
        asyncio.run(main())

    threading.Thread(target=run, daemon=True).start()
    assert ready.wait(10)
    return f"http://127.0.0.1:{box['port']}", stop, log
