"""`crosscheck.json`: the harness against vLLM's own benchmark, per (leg, model, workload).

Format history (schema_version):
  1 - rows of harness/vLLM samples, ratio with interval, spreads, timed shares (the first version
      written; there is no unversioned form).
  2 - rows gain `unmeasured`: the planned run ids without a finished record, for a view summarised
      from the records of a crosscheck cut short (`harness crosscheck --from-records`,
      invocation_id "from-records"), and `pair_ratios`: harness ÷ vLLM within each repeat that has
      both sides. Version 1 reads as having neither.
  3 - the interval is the paired rule's (one-sample t on the log pair ratios of the repeats that
      one invocation measured on both sides) wherever there are three such pairs or more, Welch's over
      the two sides' repeats otherwise: rows gain `method` ("paired" / "welch"), `n_pairs`, and
      `welch` (Welch's ratio, interval and verdict, kept beside a paired row), and `cold_runs`: the
      runs (side and repeat) whose engine compiled from an empty cache, as vLLM's log says. Versions
      1-2 read as method "welch" (their interval was Welch's) with `welch` copied from the row and
      no cold runs named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 3


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


class CrosscheckRecord(BaseModel):
    model_config = ConfigDict(extra="allow")
    schema_version: int = SCHEMA_VERSION
    rows: list[CrosscheckRow]
    invocation_id: str | None = None
    scenario: str | None = None
    prefix_caching: bool | None = None


def read(path: Path) -> CrosscheckRecord:
    rec = CrosscheckRecord.model_validate_json(path.read_text(encoding="utf-8"))
    if rec.schema_version > SCHEMA_VERSION:
        raise ValueError(f"{path}: crosscheck schema {rec.schema_version} is newer than this harness's {SCHEMA_VERSION}")
    return migrate(rec)


def migrate(rec: CrosscheckRecord) -> CrosscheckRecord:
    """A record of an older version in the current form (see the format history)."""
    if rec.schema_version >= 3:
        return rec
    rows = [row.model_copy(update={"method": "welch", "n_pairs": len(row.pair_ratios), "welch": {
        "ratio": row.ratio, "ci_low": row.ci_low, "ci_high": row.ci_high, "verdict": row.verdict}}) for row in rec.rows]
    return rec.model_copy(update={"rows": rows, "schema_version": SCHEMA_VERSION})
