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

from harness.workloads.base import Metric, NotComparable, Traits

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


def metric_of(name: str) -> Metric:
    """The one lookup of a kind's metric: its record field, unit, direction, title and format."""
    return kind(name).METRIC


def metric_reading(field: str) -> Metric | None:
    """The metric of the first registered kind whose value is the record field `field` (a file that
    kept only the field, such as a bisect record, gets its unit back), None where no kind reads it."""
    return next((m for m in map(metric_of, KINDS) if m.key == field), None)


def traits_of(name: str) -> Traits:
    """What a kind is beyond its metric (base.Traits); a kind that declares none has the defaults."""
    traits = getattr(kind(name), "TRAITS", None)
    return traits if isinstance(traits, Traits) else Traits()


__all__ = ["Metric", "NotComparable", "Traits"]


def metric_fields() -> tuple[str, ...]:
    """Every registered kind's record metrics fields (Metric.fields), in registry order, once each."""
    return tuple(dict.fromkeys(f for name in KINDS for f in metric_of(name).fields()))


def known(name: object) -> bool:
    """Whether `name` is a registered kind (a frame's kind column holds None or NaN where unknown)."""
    return isinstance(name, str) and name in KINDS


def vllm_dataset_args(modality_name: str, work: dict, path: str) -> list[str]:
    """The dataset flags of vLLM's `bench throughput` that make it do `work`'s work (the crosscheck's
    vLLM side): the modality module's `vllm_dataset(work, path)`, `path` an existing file or folder
    for datasets that insist on one. NotComparable with the reason where the modality has none."""
    mod = modality(modality_name)
    how = getattr(mod, "vllm_dataset", None)
    if how is None:
        raise NotComparable(f"the {modality_name} modality names no dataset of vLLM's throughput benchmark that "
                            "does its work")
    return list(how(work, path))
