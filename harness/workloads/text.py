"""Text prompts: seeded random token ids, identical on every leg (no tokenizer is asked)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from harness.workloads.base import sha256_json

NAME = "text"


@dataclass(frozen=True, kw_only=True)
class Params:
    pass


def token_ids(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    lo, hi = min(10, vocab // 4), vocab - 1
    return [[rng.randrange(lo, hi) for _ in range(length)] for _ in range(n)]


def build(n: int, seed: int, work: dict[str, Any], ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """`n` prompts of `work["input_len"]` ids below `ctx["vocab"]`, as vLLM token prompts."""
    return [{"prompt_token_ids": ids} for ids in token_ids(n, work["input_len"], ctx["vocab"], seed)]


def describe(prompts: list[dict[str, Any]], ctx: dict[str, Any]) -> dict[str, Any]:
    ids = [p["prompt_token_ids"] for p in prompts]
    return {"prompts_sha256": sha256_json(ids), "prompt_tokens": sum(len(x) for x in ids)}


def vllm_dataset(work: dict[str, Any], path: str) -> list[str]:
    """vLLM's `random` dataset at the workload's lengths, every prompt exactly `input_len` long. Its
    prompts are its own random ids: the same amount of work, not the same prompts."""
    return ["--dataset-name", "random", "--random-input-len", str(work["input_len"]),
            "--random-output-len", str(work["output_len"]), "--random-range-ratio", "0.0"]
