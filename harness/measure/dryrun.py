"""What a dry run prints: the plan, each run's inputs, and legs it could not resolve here.

A dry run is how a user checks a scenario before spending a machine on it, often on a machine that
cannot reach the leg's index (a laptop, an offline node). So a leg that does not resolve does not
stop the dry run: its runs are listed under an `unresolved` env with the reason, and nothing is
built or measured from that plan.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from harness import workloads
from harness.core import paths
from harness.core.errors import LegEnvError
from harness.measure.leg import LegEnv, LegSpec

UNRESOLVED = "unresolved"


def unresolved_env(leg: LegSpec, pins: tuple[str, ...], err: LegEnvError) -> LegEnv:
    return LegEnv(leg=leg, pins=pins, lock="", compat_id=UNRESOLVED, additions=(f"# {err}",),
                  root=paths.legs_dir() / f"{leg.name}-{UNRESOLVED}")


def _params(module: Any, work: dict[str, Any]) -> list[str]:
    params = getattr(module, "Params", None)
    if params is None or not dataclasses.is_dataclass(params):
        return []
    return [f"{f.name}={work[f.name]}" for f in dataclasses.fields(params) if work.get(f.name) is not None]


def inputs_line(work: dict[str, Any]) -> str:
    """The workload's inputs as the worker will build them: kind, modality and their parameters,
    the lengths and the seed (identical on every leg, so one line per run says it all)."""
    kind, modality = work.get("kind", "?"), work.get("modality", "text")
    parts = [f"{kind}/{modality}"]
    parts += [f"{k}={work[k]}" for k in ("input_len", "output_len", "seed") if work.get(k) is not None]
    for name, load in ((kind, workloads.kind), (modality, workloads.modality)):
        try:
            parts += _params(load(name), work)
        except workloads.UnknownPlugin:
            parts.append(f"(unknown {name})")
    return " ".join(parts)
