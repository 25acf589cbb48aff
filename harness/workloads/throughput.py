"""Throughput: one generate() over all prompts at once, as vLLM's benchmarks/throughput.py does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.workloads.base import Metric, Timed

NAME = "throughput"
METRIC = Metric(key="throughput_tok_s", unit="tok/s", higher_is_better=True,
                title="Throughput (tok/s, higher is better)", digits=0, thousands=True)
# Total tok/s counts prompt and output tokens, as vLLM's benchmark does.
LEGACY_WORK = {"batch_size": 1, "iterations": 5}


@dataclass(frozen=True, kw_only=True)
class Params:
    num_prompts: int = 1   # prompts submitted at once

    def __post_init__(self) -> None:
        if self.num_prompts <= 0:
            raise ValueError("num_prompts: should be greater than 0")


Build = Callable[[int, int], list[Any]]   # (count, seed) -> prompts


def prompt_groups(work: dict[str, Any], build: Build) -> list[list[Any]]:
    return [build(work["num_prompts"], work["seed"])]


def warmup_prompts(work: dict[str, Any], build: Build) -> list[Any]:
    return build(8, work["seed"] + 10_000)


def metrics(t: Timed) -> dict[str, Any]:
    total = (t.prompt_tokens + t.output_tokens) / t.seconds
    return {"total_tok_s": total, "output_tok_s": t.output_tokens / t.seconds,
            "requests_per_s": t.num_seqs / t.seconds, "throughput_tok_s": total}
