"""Arrival schedules of a paced serve point (harness.measure.loadgen.arrival_offsets): the harness's own
and vLLM's `bench serve` one (`arrivals: vllm`, with `burstiness`), the workload keys that choose them,
and one point against a FAKE server (an aiohttp app streaming vLLM-shaped chunks, no model)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from harness.core.errors import UserError
from harness.measure import loadgen
from harness.measure.loadgen import arrival_offsets
from harness.measure.scenario import load_scenario
from tests import fakestream

ROOT = Path(__file__).resolve().parents[1]


def test_harness_schedule_is_the_one_every_earlier_record_used() -> None:
    # The schedule as it was written before `arrivals` existed: first at 0, exponential gaps.
    rng, t, old = random.Random(7), 0.0, []
    for _ in range(50):
        old.append(t)
        t += rng.expovariate(3.0)
    assert arrival_offsets(50, 3.0, 7) == old
    assert arrival_offsets(4, None, 7) == [0.0] * 4


def test_vllm_schedule_ends_at_n_over_rate_and_waits_before_the_first() -> None:
    for n, rate, b in ((400, 8.0, 1.0), (37, 0.5, 0.3), (1000, 50.0, 4.0)):
        due = arrival_offsets(n, rate, 0, arrivals="vllm", burstiness=b)
        assert due[-1] == pytest.approx(n / rate, rel=1e-12)
        assert due[0] > 0 and all(b2 >= a for a, b2 in zip(due, due[1:]))
    assert arrival_offsets(1, 4.0, 0, arrivals="vllm") == pytest.approx([0.25])


def test_burstiness_inf_is_evenly_spaced_on_both_schedules() -> None:
    inf = float("inf")
    assert arrival_offsets(4, 2.0, 0, arrivals="vllm", burstiness=inf) == pytest.approx([0.5, 1.0, 1.5, 2.0])
    assert arrival_offsets(4, 2.0, 0, burstiness=inf) == pytest.approx([0.0, 0.5, 1.0, 1.5])


def test_lower_burstiness_spreads_the_gaps_as_a_gamma_of_that_shape() -> None:
    # Gamma of shape k has coefficient of variation 1/sqrt(k): 2 at k = 0.25, 1 at k = 1, 0.5 at k = 4.
    for k in (0.25, 1.0, 4.0):
        due = np.asarray(arrival_offsets(20000, 10.0, 3, arrivals="vllm", burstiness=k))
        gaps = np.diff(due)
        assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(k), rel=0.08)


def test_bad_schedule_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="arrivals"):
        arrival_offsets(3, 1.0, 0, arrivals="uniform")
    with pytest.raises(ValueError, match="burstiness"):
        arrival_offsets(3, 1.0, 0, burstiness=0.0)


@pytest.mark.parametrize("new,msg", [("arrivals: poisson", "arrivals"), ("burstiness: 0", "burstiness"),
                                     ("burstiness: fast", "burstiness")])
def test_bad_workload_keys_are_one_line_errors(tmp_path: Path, new: str, msg: str) -> None:
    text = (ROOT / "scenarios" / "cpu-capacity.yaml").read_text()
    old = "    warmup_requests: 4\n"
    assert old in text
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace(old, old + f"    {new}\n", 1))
    with pytest.raises(UserError) as e:
        load_scenario(path)
    assert "\n" not in str(e.value) and msg in str(e.value)


def test_the_keys_enter_the_work_only_when_set(tmp_path: Path) -> None:
    text = (ROOT / "scenarios" / "cpu-capacity.yaml").read_text()
    assert "arrivals" not in load_scenario(ROOT / "scenarios" / "cpu-capacity.yaml").workloads[0].work
    path = tmp_path / "vllm.yaml"
    path.write_text(text.replace("    warmup_requests: 4\n", "    warmup_requests: 4\n    arrivals: vllm\n"
                                 "    burstiness: .inf\n", 1))
    work = load_scenario(path).workloads[0].work
    assert work["arrivals"] == "vllm" and math.isinf(work["burstiness"])


def test_a_vllm_paced_point_lasts_at_least_n_over_rate_fake_server() -> None:
    base, stop, _ = fakestream.serve()
    try:
        run = loadgen.run_point(base, model="m", prompts=[[1, 2]] * 10, max_tokens=2, concurrency=10,
                                rate=20.0, seed=1, timeout_s=20, arrivals="vllm")
        evenly = loadgen.run_point(base, model="m", prompts=[[1, 2]] * 10, max_tokens=2, concurrency=10,
                                   rate=20.0, seed=1, timeout_s=20, burstiness=float("inf"))
    finally:
        stop.set()
    assert all(r.ok for r in run.results) and all(r.ok for r in evenly.results)
    # the last request is due at 10 / 20 = 0.5 s after the point's start (harness: 9 gaps, 0.45 s)
    assert 0.5 <= run.duration_s < 5
    assert 0.45 <= evenly.duration_s < 0.5 + 4
    sent = sorted(r.sent_at for r in evenly.results)
    # evenly spaced, 50 ms apart: the k-th request is sent no sooner than k x 50 ms after the first, less
    # however late the first one was sent (a sleep ends late on a busy host, never early)
    late0 = 0.1
    assert all(t - sent[0] >= 0.05 * k - late0 for k, t in enumerate(sent)) and sent[-1] - sent[0] < 1.5


def test_vllm_bench_serve_gets_the_workloads_burstiness() -> None:
    from types import SimpleNamespace

    from harness.experiments.serve_crosscheck import bench_args
    from harness.workloads.serve import Point

    def args(work: dict, rate: float | None) -> list[str]:
        # FAKE run spec: only what bench_args reads
        spec = SimpleNamespace(workload=SimpleNamespace(work={"input_len": 8, "output_len": 4, "num_prompts": 368,
                                                              "seed": 0, **work}),
                               model=SimpleNamespace(name="m", tokenizer=None), model_path="/m")
        return bench_args(spec, Point(index=0, concurrency=368, request_rate=rate),  # type: ignore[arg-type]
                          base_url="http://x", result_dir=Path("/r"), result_file="f.json")

    paced = args({"arrivals": "vllm", "burstiness": 0.5}, 12.0)
    assert paced[paced.index("--request-rate") + 1] == "12.0" and paced[paced.index("--burstiness") + 1] == "0.5"
    assert "--burstiness" not in args({"arrivals": "vllm"}, 12.0)      # vLLM's default, 1
    assert "--burstiness" not in args({"burstiness": 0.5}, None)        # no rate: nothing to shape
