"""Audio inputs: declared so scenarios that name them load and plan; the worker refuses to measure them
until this module builds their inputs (a text prompt under an audio workload's name would be a wrong
number)."""

from __future__ import annotations

from dataclasses import dataclass

NAME = "audio"
SUPPORTED = False


@dataclass(frozen=True, kw_only=True)
class Params:
    pass
