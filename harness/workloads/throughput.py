"""Throughput: one generate() over all prompts at once, as vLLM's benchmarks/throughput.py does."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.workloads import limits
from harness.workloads.base import Metric, Timed, Traits

NAME = "throughput"
METRIC = Metric(key="throughput_tok_s", unit="tok/s", higher_is_better=True,
                title="Throughput (tok/s, higher is better)", digits=0, thousands=True,
                also=("output_tok_s",), spoken="total tok/s")
TRAITS = Traits(vllm_throughput_bench=True, engine_speed=True, undeclared=True)
# Total tok/s counts prompt and output tokens, as vLLM's benchmark does.
LEGACY_WORK = {"batch_size": 1, "iterations": 5}


@dataclass(frozen=True, kw_only=True)
class Params:
    num_prompts: int = 1   # prompts submitted at once

    def __post_init__(self) -> None:
        if not self.num_prompts > 0:
            raise ValueError("num_prompts: should be greater than 0")
        limits.at_most("num_prompts", self.num_prompts, limits.MAX_PROMPTS, "prompts")


Build = Callable[[int, int], list[Any]]   # (count, seed) -> prompts


def prompt_groups(work: dict[str, Any], build: Build) -> list[list[Any]]:
    return [build(work["num_prompts"], work["seed"])]


def warmup_prompts(work: dict[str, Any], build: Build) -> list[Any]:
    return build(8, work["seed"] + 10_000)


def metrics(t: Timed) -> dict[str, Any]:
    """Per pass, then the median over passes (a single pass is its own median)."""
    passes = t.all_passes()
    out = [sum(p.group_output_tokens) for p in passes]
    total = [(t.prompt_tokens + o) / p.seconds for p, o in zip(passes, out)]
    m = {"total_tok_s": statistics.median(total),
         "output_tok_s": statistics.median([o / p.seconds for p, o in zip(passes, out)]),
         "requests_per_s": statistics.median([t.num_seqs / p.seconds for p in passes])}
    m["throughput_tok_s"] = m["total_tok_s"]
    if len(passes) > 1:
        m["samples_tok_s"] = total
    return m
