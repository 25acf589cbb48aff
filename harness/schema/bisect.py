"""A bisect record: `results/bisect/<slug>.json` (harness.experiments.bisect), the search between two
legs for the first release whose metric differs, rewritten after every measured step.

Format history (schema_version):
# 1 - first format: inputs with the rule, one entry per measured step in order, conclusion.
# 2 - inputs.releases_from: "index" (listed from inputs.index) or "given" (--versions; inputs.index is
#     then null). A version-1 record was always listed from the index.
# 3 - the record is written after every measured step, not only at the end: while the search runs (or
#     after it was stopped) conclusion.kind is "incomplete", finished_at is null, conclusion.suspects the
#     releases the first differing one can still be, conclusion.unmeasured the releases between not
#     measured yet; the search's end replaces it with the final record. updated_at: the last write. A
#     version-2 record was written once, at the end: its updated_at is its finished_at.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from pydantic import Field

from harness import __version__
from harness.core import paths
from harness.schema import record
from harness.schema.base import Frozen


class Interval(Protocol):
    """A ratio with its interval (harness.analyze.stats.Ratio), as the rule reads it."""
    value: float | None
    low: float | None
    high: float | None


SCHEMA_VERSION = 3
KIND = "bisect"
RESULTS_DIR = paths.RESULTS / "bisect"


class Rule(Frozen):
    threshold: float = Field(0.03, ge=0, description="smallest |ratio - 1| that counts as a change")
    confidence: float = Field(0.95, gt=0, lt=1)
    min_ok: int = Field(2, ge=2, description="fewer ok repeats than this and the release is skipped")

    def differs(self, r: Interval) -> bool:
        if r.value is None or r.low is None or r.high is None:
            return False
        return (r.low > 1 or r.high < 1) and abs(r.value - 1) > self.threshold


Role = Literal["good", "bad", "step"]


class Step(Frozen):
    index: int                     # order of measurement
    role: Role
    version: str
    leg: str
    compat_id: str | None = None
    stack: dict[str, str] = Field(default_factory=dict)
    samples: list[float] = Field(default_factory=list)
    median: float | None = None
    ratio: float | None = None     # step vs good, >1 is faster; the decision was made on it
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str = ""              # harness.analyze.stats' verdict, "reference" for the good leg, or "skipped"
    differs: bool | None = None
    skipped: bool = False
    reason: str = ""
    failures: list[str] = Field(default_factory=list)
    run_ids: list[str] = Field(default_factory=list)


# "incomplete": the search has not ended (it is running, or was stopped); no release is concluded.
ConclusionKind = Literal["first_differing", "no_change", "ambiguous", "endpoint_failed", "incomplete"]


class Conclusion(Frozen):
    kind: ConclusionKind
    text: str
    first_differing: str | None = None
    last_same: str | None = None
    suspects: list[str] = Field(default_factory=list)  # ambiguous, incomplete: any of these may be the first
    unmeasured: list[str] = Field(default_factory=list)  # incomplete: releases between not measured yet
    notes: list[str] = Field(default_factory=list)


class Inputs(Frozen):
    scenario: str
    good: str
    bad: str
    good_version: str
    bad_version: str
    vllm_dist: str
    model: str
    workload: str
    arm: str
    metric: str
    higher_is_better: bool
    repeats: int
    rule: Rule
    rule_text: str
    index: str | None = None       # the index the releases were listed from; None when they were given
    releases_from: Literal["index", "given"] = "index"


class BisectRecord(Frozen):
    schema_version: int = SCHEMA_VERSION
    kind: Literal["bisect"] = "bisect"
    harness_version: str = __version__
    created_at: str
    finished_at: str | None = None   # null while the search is incomplete
    updated_at: str | None = None    # when the record was last written
    node: str | None = None
    inputs: Inputs
    releases: list[str]            # between good and bad (listed or given), in search order (good side first)
    legs: dict[str, str] = Field(default_factory=dict)  # version -> its leg, whether measured or not
    steps: list[Step]
    conclusion: Conclusion
    runs_dir: str | None = None    # the run records, relative to the record file

    @property
    def complete(self) -> bool:
        """The search ended; an incomplete record says what was measured, never which release changed."""
        return self.conclusion.kind != "incomplete"


# --- the record -----------------------------------------------------------------------------------

def write_record(rec: BisectRecord, path: Path) -> Path:
    record.write_json_atomic(path, rec.model_dump(mode="json"))
    return path


def _update_to_2(old: dict, path: Path) -> dict:
    """Version 1 -> 2: a version-1 record's releases were listed from the index."""
    inputs = old.get("inputs")
    return old | {"schema_version": 2,
                  "inputs": ({"releases_from": "index"} | inputs) if isinstance(inputs, dict) else inputs}


def _update_to_3(old: dict, path: Path) -> dict:
    """Version 2 -> 3: a version-2 record was written once, when its search ended."""
    return old | {"schema_version": 3, "updated_at": old.get("finished_at")}


MIGRATIONS: dict[int, record.Migration] = {1: _update_to_2, 2: _update_to_3}


def read_record(path: Path) -> BisectRecord:
    """One bisect record, of this or an older version (migrated), complete or not (`.complete`)."""
    return record.read_typed(path, KIND, BisectRecord, SCHEMA_VERSION,  # type: ignore[return-value]
                             migrations=MIGRATIONS)


def read_records(root: Path = RESULTS_DIR) -> list[BisectRecord]:
    """Every bisect record directly under `root`, oldest first (for the report and the notebooks); an
    incomplete one among them (`.complete` false) concludes nothing."""
    return record.read_typed_dir(root, KIND, BisectRecord, SCHEMA_VERSION,  # type: ignore[return-value]
                                 migrations=MIGRATIONS)
