"""What every workload kind and modality module provides (standard library only: the worker imports it).

A kind module defines:
  NAME, Params (a frozen dataclass of its typed parameters), METRIC (a Metric), optionally TRAITS
  (a Traits; a kind that declares none has the defaults),
  LEGACY_WORK (parameters of other kinds that records written before kinds were plugins carried,
  with their defaults, so those records' fingerprints still match under --resume),
  UNSET_WORK (its own parameters left out of a run's `work` at these values: one added later keeps
  the fingerprints of runs measured before it),
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
    # Further fields of the record's metrics that analysis reads for this kind beside `key` (the
    # dataset carries every kind's, in registry order).
    also: tuple[str, ...] = ()
    ratio_axis: str = ""        # a ratio's axis label; empty: from the direction and the unit
    # The metric in words ("total tok/s"): figures' value axis (empty: the unit) and the export's data
    # dictionary, which lists only kinds that have one (serve and equivalence have none: giving them one
    # rewrites every shipped dictionary).
    spoken: str = ""

    def fields(self) -> tuple[str, ...]:
        return (self.key, *self.also)

    def axis_label(self) -> str:
        return self.spoken or self.unit

    def ratio_axis_label(self) -> str:
        return self.ratio_axis or ("newer leg faster" if self.higher_is_better
                                   else f"newer leg faster (old/new {self.unit})")

    def fmt(self, v: float) -> str:
        return f"{v:,.{self.digits}f}" if self.thousands else f"{v:.{self.digits}f}"

    def ratio_label(self, old: str, new: str) -> str:
        # Higher-is-better ratios read new/old, lower-is-better old/new: above 1.00x the newer leg wins.
        return f"{new}/{old}" if self.higher_is_better else f"{old}→{new}"

    def ratio_note(self) -> str:
        side = "new/old" if self.higher_is_better else "old/new"
        return f"Ratios {side}: above 1.00x the newer leg is faster."


@dataclass(frozen=True, kw_only=True)
class Traits:
    """What a kind is beyond its metric. Code outside harness.workloads asks these (through
    workloads.traits_of), never the kind's name, so a new kind is its module and one registry line."""
    # The harness starts the leg's OpenAI-compatible server and drives it under load, point by point
    # (harness.measure.serve): never inside an engine group nor the paired design, and its records
    # carry `serve` points (the serving curves, the serve cross-check).
    server: bool = False
    # vLLM's own benchmarks/throughput.py does the same work, so `harness check crosscheck` can run it beside
    # the harness's run of this kind (harness.measure.worker.vllm_bench).
    vllm_throughput_bench: bool = False
    # The metric is one engine's speed measured offline in one process, comparable run by run: the
    # cold-start comparison and the repeat spread read it. Off for a server under load (its metric is a
    # peak over load points) and for a check whose speed is incidental.
    engine_speed: bool = False
    # Records written before kinds were declared may be of this kind, told by its metric's field being
    # set (schema.checks.kind_of; the first such kind in registry order wins).
    undeclared: bool = False


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


class NotComparable(ValueError):
    """vLLM's own throughput benchmark cannot be made to do a workload's work: the one-line reason."""
