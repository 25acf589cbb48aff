"""How planned runs get measured: executors, one module each, named in EXECUTORS.

An executor takes the sweep's plan in order and calls `on_done` once per run. It is looked up by
name, and imported only when asked for (Ray is an optional extra). Adding an executor is one module
with a class that has `run_all` plus one line in EXECUTORS.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from harness.core.errors import UserError
from harness.measure.run import RunSpec
from harness.schema.record import RunRecord

console = Console(stderr=True, soft_wrap=True)  # one line per run, also in a log file

EXECUTORS: dict[str, str] = {
    "local": "harness.measure.executors.local:LocalExecutor",
    "ray": "harness.measure.executors.ray:RayExecutor",
}


@dataclass(kw_only=True)
class PlannedRun:
    index: int
    spec: RunSpec
    run_dir: Path
    reuse: RunRecord | None = None
    dirty: list[str] = field(default_factory=list)


class Executor(Protocol):
    def run_all(self, planned: list[PlannedRun], *, invocation_id: str, allow_dirty: bool,
                on_done: Callable[[PlannedRun, RunRecord, bool], None]) -> None: ...


def executor_named(name: str, **options: Any) -> Executor:
    if name not in EXECUTORS:
        raise UserError(f"unknown executor {name!r} (known: {', '.join(EXECUTORS)})")
    module, cls = EXECUTORS[name].split(":")
    factory = getattr(importlib.import_module(module), cls)
    return factory(**{k: v for k, v in options.items() if k in getattr(factory, "OPTIONS", ())})
