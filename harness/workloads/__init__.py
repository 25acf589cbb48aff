"""Workload kinds and input modalities, as plugins: one module each plus one line below.

A *kind* says what is timed and what the number means (throughput: one pass over all prompts,
tok/s; latency: fixed batches, ms per output token). A *modality* says what a prompt is and how it is
built (text: seeded random token ids; image/video/audio add their inputs). A scenario's workload
names one of each.

Every module here is standard-library only at import time, because the worker imports them too,
inside the leg's venv, whatever that venv holds. The harness validates their parameter dataclasses
with pydantic (harness.measure.scenario); the worker only reads them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

KINDS: dict[str, str] = {
    "throughput": "harness.workloads.throughput",
    "latency": "harness.workloads.latency",
    "serve": "harness.workloads.serve",
    "equivalence": "harness.workloads.equivalence",
}

MODALITIES: dict[str, str] = {
    "text": "harness.workloads.text",
    "image": "harness.workloads.image",
    "video": "harness.workloads.video",
    "audio": "harness.workloads.audio",
}


class UnknownPlugin(LookupError):
    pass


def _load(table: dict[str, str], name: str, what: str) -> ModuleType:
    if name not in table:
        raise UnknownPlugin(f"unknown workload {what} {name!r} (known: {', '.join(table)})")
    return importlib.import_module(table[name])


def kind(name: str) -> ModuleType:
    return _load(KINDS, name, "kind")


def modality(name: str) -> ModuleType:
    return _load(MODALITIES, name, "modality")
