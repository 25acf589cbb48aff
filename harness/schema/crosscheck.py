"""`crosscheck.json`: the harness against vLLM's own benchmark, per (leg, model, workload).

Format history (schema_version):
  1 - rows of harness/vLLM samples, ratio with interval, spreads, timed shares (the first version
      written; there is no unversioned form).
  2 - rows gain `unmeasured`: the planned run ids without a finished record, for a view summarised
      from the records of a crosscheck cut short (`harness check crosscheck --from-records`,
      invocation_id "from-records"), and `pair_ratios`: harness ÷ vLLM within each repeat that has
      both sides. Version 1 reads as having neither.
  3 - the interval is the paired rule's (one-sample t on the log pair ratios of the repeats that
      one invocation measured on both sides) wherever there are three such pairs or more, Welch's over
      the two sides' repeats otherwise: rows gain `method` ("paired" / "welch"), `n_pairs`, and
      `welch` (Welch's ratio, interval and verdict, kept beside a paired row), and `cold_runs`: the
      runs (side and repeat) whose engine compiled from an empty cache, as vLLM's log says. Versions
      1-2 read as method "welch" (their interval was Welch's) with `welch` copied from the row and
      no cold runs named.
  4 - rows gain `modality` (the workload's input modality; image and video are cross-checked
      against vLLM's random-mm dataset), `work_check` (each side's own prompt and output tokens per
      request and whether they match; a row whose sides did other work carries no ratio, its verdict
      says "refused: ..."), and `transport` (vLLM's side's decoding of its data-URL inputs, measured
      apart, as a share of its timed region). Versions 1-3 read as text rows, their work not checked.
  5 - rows gain `design`: "per run" (one engine per run, the two runs of a repeat back to back) or
      "one engine" (both tools timed on one engine per block, passes alternating: `n_pairs` counts
      blocks and `round_ratios` holds each block's rounds' pass ratios). Versions 1-4 read as "per run",
      the only design there was.
  6 - rows gain `handover`: for a one-engine row, per side ("harness", "vllm"), the median and range
      over its passes of the region's split at the last request handed to the engine (`call_s`,
      `handover_s`, `add_s`, `tail_s`; record version 10's `paired.passes[].handover`). Versions 1-5
      read as having none (it was not measured).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.schema import record

SCHEMA_VERSION = 6
KIND = "crosscheck"


class CrosscheckRow(BaseModel):
    model_config = ConfigDict(extra="allow")
    leg: str
    model: str
    workload: str
    harness_tok_s: list[float] = Field(default_factory=list)
    vllm_tok_s: list[float] = Field(default_factory=list)
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str | None = None
    spread_harness: float | None = None
    spread_vllm: float | None = None
    timed_share_harness: list[float] = Field(default_factory=list)
    wall_s_harness: list[float] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)
    unmeasured: list[str] = Field(default_factory=list)
    pair_ratios: list[float] = Field(default_factory=list)
    method: Literal["paired", "welch"] = "welch"
    n_pairs: int = 0
    welch: dict[str, Any] = Field(default_factory=dict)  # ratio, ci_low, ci_high, verdict by Welch's rule
    cold_runs: list[str] = Field(default_factory=list)
    modality: str = "text"
    work_check: dict[str, Any] = Field(default_factory=dict)  # crosscheck_work.work_check
    transport: dict[str, Any] = Field(default_factory=dict)   # crosscheck_work.transport
    design: Literal["per run", "one engine"] = "per run"
    round_ratios: list[list[float]] = Field(default_factory=list)  # one engine: each block's rounds
    handover: dict[str, Any] = Field(default_factory=dict)  # one engine: crosscheck_paired.handover


class CrosscheckRecord(BaseModel):
    model_config = ConfigDict(extra="allow")
    schema_version: int = SCHEMA_VERSION
    rows: list[CrosscheckRow]
    invocation_id: str | None = None
    scenario: str | None = None
    prefix_caching: bool | None = None


def _update_to_2(old: dict, path: Path) -> dict:
    """Version 1 -> 2: the new row fields take their defaults."""
    return {**old, "schema_version": 2}


def _update_to_3(old: dict, path: Path) -> dict:
    """Version 2 -> 3: the stored interval was Welch's, so each row reads as method "welch" with
    `welch` copied from it, its pairs counted and no cold runs named."""
    rows = old.get("rows")
    if isinstance(rows, list):
        rows = [{**r, "method": "welch", "n_pairs": len(r.get("pair_ratios") or []),
                 "welch": {k: r.get(k) for k in ("ratio", "ci_low", "ci_high", "verdict")}}
                if isinstance(r, dict) else r for r in rows]
    return {**old, "schema_version": 3, "rows": rows}


def _update_to_4(old: dict, path: Path) -> dict:
    """Version 3 -> 4: every row was a text workload (only those were cross-checked), its work not
    checked, no transport."""
    rows = old.get("rows")
    if isinstance(rows, list):
        rows = [{**r, "modality": "text", "work_check": {}, "transport": {}} if isinstance(r, dict) else r
                for r in rows]
    return {**old, "schema_version": 4, "rows": rows}


def _update_to_5(old: dict, path: Path) -> dict:
    """Version 4 -> 5: every row was measured one engine per run."""
    rows = old.get("rows")
    if isinstance(rows, list):
        rows = [{**r, "design": "per run", "round_ratios": []} if isinstance(r, dict) else r for r in rows]
    return {**old, "schema_version": 5, "rows": rows}


def _update_to_6(old: dict, path: Path) -> dict:
    """Version 5 -> 6: no row had its passes split (not measured before)."""
    rows = old.get("rows")
    if isinstance(rows, list):
        rows = [{**r, "handover": {}} if isinstance(r, dict) else r for r in rows]
    return {**old, "schema_version": 6, "rows": rows}


MIGRATIONS: dict[int, record.Migration] = {1: _update_to_2, 2: _update_to_3, 3: _update_to_4, 4: _update_to_5,
                                           5: _update_to_6}


def read(path: Path) -> CrosscheckRecord:
    """One record, lifted to this version; a UserError naming the file if it is unreadable, newer than
    this harness or not a valid record. No version has carried a `kind` key."""
    return record.read_typed(path, KIND, CrosscheckRecord, SCHEMA_VERSION,  # type: ignore[return-value]
                             migrations=MIGRATIONS, kind_since=SCHEMA_VERSION + 1)
