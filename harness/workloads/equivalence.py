"""Equivalence: the same prompts decoded greedily with log-probabilities, so that two legs (or two arms)
can be checked for computing the same answer, not only for speed (harness.analyze.equivalence).

A fixed, seeded set of prompts (the modality's `build`, so multimodal inputs work too) is decoded at
temperature 0 with the top-`logprobs` log-probabilities of every position, `output_len` tokens each
(`ignore_eos`, the default, keeps the work identical on every leg whatever the outputs; the first EOS,
where a request would have stopped, is recorded as `eos_at`, and the comparison ends there). What each prompt produced
goes to `outputs.jsonl.gz` in the run folder, one JSON line per prompt; the record's `work.outputs`
keeps the file's name, the hash of its uncompressed lines, the hash of the token ids alone and counts.

The timed pass is measured like a throughput pass (one generate() over every prompt), and its output
tokens per second is this kind's metric; log-probabilities make it slower than a plain pass, so it is
a table of its own and never mixed with the throughput table.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.workloads import limits
from harness.workloads.base import Metric, Timed, sha256_json

NAME = "equivalence"
METRIC = Metric(key="output_tok_s", unit="tok/s", higher_is_better=True,
                title="Greedy decode with log-probabilities (output tok/s, higher is better)", digits=0,
                thousands=True)
LEGACY_WORK: dict[str, Any] = {}
OUTPUTS_FILE = "outputs.jsonl.gz"
# Format history of outputs.jsonl.gz (one JSON object per prompt, in prompt order):
#   1 - i, prompt_sha256, prompt_tokens, token_ids, logprobs (the chosen token's), top (per position,
#       [[token id, log-probability], ...] by rank), finish_reason, eos_at, sha256 (of token_ids).
OUTPUTS_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class Params:
    num_prompts: int = 16   # prompts decoded at once
    logprobs: int = 5       # top-k log-probabilities kept per position
    ignore_eos: bool = True

    def __post_init__(self) -> None:
        if not self.num_prompts > 0:
            raise ValueError("num_prompts: should be greater than 0")
        limits.at_most("num_prompts", self.num_prompts, limits.MAX_PROMPTS, "prompts")
        if not 1 <= self.logprobs <= 20:
            raise ValueError("logprobs: should be between 1 and 20")


Build = Callable[[int, int], list[Any]]


def prompt_groups(work: dict[str, Any], build: Build) -> list[list[Any]]:
    return [build(work["num_prompts"], work["seed"])]


def warmup_prompts(work: dict[str, Any], build: Build) -> list[Any]:
    return build(min(work["num_prompts"], 4), work["seed"] + 10_000)


def sampling(work: dict[str, Any]) -> dict[str, Any]:
    """SamplingParams keyword arguments: greedy, log-probabilities on, a fixed token budget."""
    return {"n": 1, "temperature": 0.0, "top_p": 1.0, "max_tokens": work["output_len"],
            "logprobs": work["logprobs"], "ignore_eos": bool(work.get("ignore_eos", True))}


def metrics(t: Timed) -> dict[str, Any]:
    passes = t.all_passes()
    out = [sum(p.group_output_tokens) for p in passes]
    first = passes[0]
    return {"output_tok_s": statistics.median(o / p.seconds for p, o in zip(passes, out)), "total_tok_s": (t.prompt_tokens + out[0]) / first.seconds,
            "requests_per_s": t.num_seqs / first.seconds}


def _position(entry: Any, chosen: int, k: int) -> tuple[float | None, list[list[float]]]:
    """(the chosen token's log-probability, the top-k as [id, log-probability] by rank) of one
    position of vLLM's logprobs (a mapping token id -> Logprob with .logprob and .rank)."""
    items = [(int(tid), float(lp.logprob), getattr(lp, "rank", None)) for tid, lp in entry.items()]
    chosen_lp = next((lp for tid, lp, _ in items if tid == chosen), None)
    # By rank where vLLM gives one, by value otherwise; the chosen token rides along even outside
    # the top-k, so only the k best are kept.
    items.sort(key=lambda x: (x[2] if isinstance(x[2], int) else 1 << 30, -x[1]))
    return chosen_lp, [[tid, lp] for tid, lp, _ in items[:k]]


def eos_ids(model_path: str | None) -> set[int]:
    """The model's end-of-sequence ids, from its own files (generation_config.json, then config.json)."""
    out: set[int] = set()
    for name in ("generation_config.json", "config.json"):
        try:
            v = json.loads((Path(str(model_path)) / name).read_text(encoding="utf-8")).get("eos_token_id")
        except (OSError, ValueError, AttributeError):
            continue
        out |= {int(x) for x in (v if isinstance(v, list) else [v]) if isinstance(x, int)}
    return out


def per_prompt(outputs: list[Any], k: int, eos: set[int] = frozenset()) -> list[dict[str, Any]]:
    rows = []
    for i, o in enumerate(outputs):
        c = o.outputs[0]
        ids = [int(x) for x in c.token_ids]
        chosen: list[float | None] = []
        top: list[list[list[float]]] = []
        for j, tid in enumerate(ids):
            entry = c.logprobs[j] if c.logprobs is not None and j < len(c.logprobs) else None
            lp, tk = _position(entry, tid, k) if entry is not None else (None, [])
            chosen.append(lp)
            top.append(tk)
        prompt_ids = [int(x) for x in (o.prompt_token_ids or [])]
        stopped = c.finish_reason == "stop" and getattr(c, "stop_reason", None) is None and ids
        eos_at = len(ids) - 1 if stopped else next((j for j, t in enumerate(ids) if t in eos), None)
        rows.append({"i": i, "prompt_sha256": sha256_json(prompt_ids), "prompt_tokens": len(prompt_ids),
                     "token_ids": ids, "logprobs": chosen, "top": top, "finish_reason": c.finish_reason,
                     "eos_at": eos_at, "sha256": sha256_json(ids)})
    return rows


def collect(outputs: list[Any], work: dict[str, Any], run_dir: Path, ctx: dict[str, Any]) -> dict[str, Any]:
    """Write every prompt's output to OUTPUTS_FILE; return what the record's `work.outputs` keeps."""
    rows = per_prompt(outputs, int(work["logprobs"]), eos_ids(ctx.get("model_path")))
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows).encode()
    tmp = run_dir / (OUTPUTS_FILE + ".tmp")
    # mtime 0: the same outputs give the same bytes; the hash is of the uncompressed lines all the same,
    # since another zlib may compress them differently.
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        f.write(text)
    os.replace(tmp, run_dir / OUTPUTS_FILE)
    return {"file": OUTPUTS_FILE, "format": OUTPUTS_VERSION, "sha256": hashlib.sha256(text).hexdigest(),
            "tokens_sha256": sha256_json([r["token_ids"] for r in rows]), "prompts": len(rows),
            "logprobs": int(work["logprobs"]), "stopped_at_eos": sum(r["eos_at"] is not None for r in rows)}


def read_outputs(run_dir: Path, kept: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-prompt rows of a run, checked against the hash its record keeps (ValueError if not)."""
    path = Path(run_dir) / str(kept.get("file") or OUTPUTS_FILE)
    text = gzip.decompress(path.read_bytes())
    want = kept.get("sha256")
    if want and hashlib.sha256(text).hexdigest() != want:
        raise ValueError(f"{path}: does not match the hash its record keeps")
    return [json.loads(line) for line in text.decode().splitlines() if line.strip()]
