"""What every workload kind and modality module provides (standard library only: the worker imports it).

A kind module defines:
  NAME, Params (a frozen dataclass of its typed parameters), METRIC (a Metric),
  LEGACY_WORK (parameters of other kinds that records written before kinds were plugins carried,
  with their defaults, so those records' fingerprints still match under --resume),
  prompt_groups(work, build) -> list of prompt groups, each timed as one unit,
  warmup_prompts(work, build) -> the prompts of one warmup iteration,
  metrics(timed) -> the record's metrics dict.
A modality module defines:
  NAME, Params, build(n, seed, work, ctx) -> prompts for vLLM's generate(), and
  describe(prompts, ctx) -> what the record keeps about the inputs (hashes, counts).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class Metric:
    key: str                    # the record's metrics field the tables use
    unit: str
    higher_is_better: bool
    title: str                  # table title
    digits: int                 # printed decimals
    thousands: bool = False     # "21,943" vs "3.82"
    # A rate or a time: zero or less is no measurement, and a record holding one is excluded
    # (harness.schema.checks). False for a metric that may be zero or negative (a difference, a score).
    positive: bool = True

    def fmt(self, v: float) -> str:
        return f"{v:,.{self.digits}f}" if self.thousands else f"{v:.{self.digits}f}"

    def ratio_label(self, old: str, new: str) -> str:
        # Higher-is-better ratios read new/old, lower-is-better old/new: above 1.00x the newer leg wins.
        return f"{new}/{old}" if self.higher_is_better else f"{old}→{new}"

    def ratio_note(self) -> str:
        side = "new/old" if self.higher_is_better else "old/new"
        return f"Ratios {side}: above 1.00x the newer leg is faster."


@dataclass(frozen=True, kw_only=True)
class Pass:
    """One timed pass over the workload's prompt groups."""
    seconds: float
    group_seconds: list[float] = field(default_factory=list)
    group_output_tokens: list[int] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Timed:
    """What the worker measured in one workload's timed region, handed to the kind's `metrics`.
    The top-level fields describe the first pass; `passes` holds every pass (the same work each)."""
    seconds: float
    group_seconds: list[float] = field(default_factory=list)
    group_output_tokens: list[int] = field(default_factory=list)
    prompt_tokens: int = 0          # per pass
    output_tokens: int = 0          # per pass
    num_seqs: int = 0               # per pass
    passes: list[Pass] = field(default_factory=list)

    def all_passes(self) -> list[Pass]:
        return self.passes or [Pass(seconds=self.seconds, group_seconds=self.group_seconds,
                                    group_output_tokens=self.group_output_tokens)]


def sha256_json(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj).encode()).hexdigest()
