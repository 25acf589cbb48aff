"""Latency: fixed batches of batch_size, timed one by one, as vLLM's benchmarks/latency.py does.

The metric is the median over batches of (batch seconds / output tokens of the batch), in ms.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.workloads import limits
from harness.workloads.base import Metric, Timed, Traits

NAME = "latency"
METRIC = Metric(key="ms_per_token", unit="ms/tok", higher_is_better=False,
                title="Latency (ms/tok, lower is better)", digits=2,
                also=("samples_ms_per_token",), spoken="ms per output token",
                ratio_axis="newer leg faster (old/new ms per token)")
TRAITS = Traits(engine_speed=True, undeclared=True)
LEGACY_WORK = {"num_prompts": 1}


@dataclass(frozen=True, kw_only=True)
class Params:
    batch_size: int = 1    # requests per timed batch
    iterations: int = 5    # timed batches

    def __post_init__(self) -> None:
        for name in ("batch_size", "iterations"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: should be greater than 0")
        limits.at_most("batch_size", self.batch_size, limits.MAX_PROMPTS, "prompts")
        limits.at_most("iterations", self.iterations, limits.MAX_ITERATIONS, "batches")


Build = Callable[[int, int], list[Any]]


def prompt_groups(work: dict[str, Any], build: Build) -> list[list[Any]]:
    return [build(work["batch_size"], work["seed"] + i) for i in range(work["iterations"])]


def warmup_prompts(work: dict[str, Any], build: Build) -> list[Any]:
    return build(min(work["batch_size"], 8), work["seed"] + 10_000)


def metrics(t: Timed) -> dict[str, Any]:
    # Every batch of every pass is a sample.
    samples = [dt * 1000 / n for p in t.all_passes() for dt, n in zip(p.group_seconds, p.group_output_tokens)]
    return {"ms_per_token": statistics.median(samples), "samples_ms_per_token": samples}
