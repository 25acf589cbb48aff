"""What crosses between the harness and the worker, in one definition both sides import.

The worker runs with the leg's Python (standard library only, whatever else that venv holds), so
this module is plain dataclasses and json; the harness validates what comes back with pydantic
(`read_result`). spec.json goes in, worker.json comes out.

Format history (WIRE_VERSION):
  0 - unversioned: the same fields, written before the wire had a version (every shipped record).
  1 - `schema_version` in both files; worker.json's `work` may carry input descriptions beside the
      counts (`inputs`) and `passes`; spec.json may list several workloads for one engine (`runs`).
  2 - an item of `runs` may name its `worker` (vllm_bench.py: vLLM's own benchmark, each pass one call
      of its main() on the resident engine); its worker.json says `lent_engine` in `work.inputs`.
      Nothing of version 1 changes meaning, so version 1 files read as they are.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

WIRE_VERSION = 2


@dataclass(frozen=True, kw_only=True)
class WorkerSpec:
    run_dir: str
    model_path: str
    workload: dict[str, Any]           # Workload.work: kind, modality and their parameters
    tokenizer: str | None = None
    dtype: str = "auto"
    tp: int = 1
    engine_args: dict[str, Any] = field(default_factory=dict)
    # Engine reuse: every workload one engine measures, in order, each {run_dir, workload}; empty for
    # one workload per engine, which `run_dir` and `workload` then describe.
    runs: list[dict[str, Any]] = field(default_factory=list)
    schema_version: int = WIRE_VERSION

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def read(cls, path: Path | str) -> "WorkerSpec":
        raw = json.loads(Path(path).read_text())
        raw.setdefault("schema_version", 0)
        if raw["schema_version"] > WIRE_VERSION:
            raise ValueError(f"{path}: spec schema {raw['schema_version']} is newer than this worker's {WIRE_VERSION}")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})


@dataclass(frozen=True, kw_only=True)
class WorkerResult:
    metrics: dict[str, Any]
    work: dict[str, Any]               # num_seqs, prompt_tokens, output_tokens, prompts_sha256, seed, ...
    timing: dict[str, Any]             # engine_init_s, warmup_s, timed_s (and passes_s)
    schema_version: int = WIRE_VERSION

    def write(self, run_dir: Path) -> None:
        tmp = run_dir / "worker.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, run_dir / "worker.json")  # never a half-written result


def read_result(path: Path) -> WorkerResult | None:
    """worker.json as a validated WorkerResult; None when absent or unreadable (the run then failed)."""
    from pydantic import TypeAdapter, ValidationError  # the harness side only

    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(raw, dict):
        return None
    raw.setdefault("schema_version", 0)  # version 0 had the same fields
    if raw["schema_version"] > WIRE_VERSION:
        return None
    try:
        return TypeAdapter(WorkerResult).validate_python(raw)
    except ValidationError:
        return None
