"""The sweep index: `sweeps/<invocation>.json`, one per sweep invocation, every run it measured or reused.

Format history (schema_version):
  0 - unversioned (every index written before versions): the same fields.
  1 - `schema_version`; `order` (the legs' order per repeat, as run) may be present.
  2 - `superseded`: the earlier records this invocation replaced, each moved under superseded/ first
      (run id, where it went, its status, the invocation that measured it, what had changed).
      Version 1 files read as having replaced nothing; the fields are otherwise the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.schema.record import write_json_atomic

SCHEMA_VERSION = 2


class SweepEntry(BaseModel):
    model_config = ConfigDict(extra="allow")
    run_id: str
    fingerprint: str | None = None
    status: str | None = None
    reused: bool = False
    measured_by: str | None = None
    attempt: int | None = None
    runner: str | None = None
    node: str | None = None


class SweepIndex(BaseModel):
    model_config = ConfigDict(extra="allow")
    schema_version: int = SCHEMA_VERSION
    invocation_id: str
    harness_version: str | None = None
    scenario: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    started_at: str | None = None
    finished_at: str | None = None
    planned: int | None = None
    runs: list[SweepEntry]
    # How the sweep ran (present since version 1 as free fields, declared here so the writer builds
    # this model): engine mode, leg order rule, the legs' order per repeat as run, and the paired design.
    engine: str | None = None
    order: str | None = None
    leg_order: Any = None
    design: dict[str, Any] | None = None
    superseded: list[dict[str, Any]] = Field(default_factory=list)

    def write(self, path: Path) -> None:
        """Written whole (temporary file, then renamed), after every run: a cut-off sweep leaves a
        readable index. Fields never set (a serial sweep's `design`) are left out, as before."""
        write_json_atomic(path, self.model_dump(mode="json", exclude_unset=True))


class TooNew(ValueError):
    pass


def parse(raw: Any, path: Path) -> SweepIndex:
    """A sweep index from its JSON; raises ValueError (pydantic's included) for an unusable one."""
    if not isinstance(raw, dict):
        raise ValueError("expected a JSON object")
    raw = {"invocation_id": path.stem, "schema_version": 0} | raw  # version 0 = the same fields
    if raw["schema_version"] > SCHEMA_VERSION:
        raise TooNew(f"schema {raw['schema_version']} is newer than this harness's {SCHEMA_VERSION}")
    return SweepIndex.model_validate(raw)
