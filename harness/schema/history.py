"""`history.json`: a release history's plan and what became of each release (a study folder that holds
one is a history study: `harness.analyze.history` reads its runs release by release).

One entry per release the scenario's `history:` names, in release order: the leg it was measured on
(derived from the template leg, or the release's reviewed leg file), that leg's compat id and lock,
and its status: `measured` (its runs are in the study), `no-leg` (a prebuilt release without a leg
file), `not-installed` (its env did not resolve or build here: `reason` is the resolver's or
installer's last lines) or `dirty` (a foreign vLLM plugin in its env). `design` is the design the
sweep ran (paired, or serial where the paired one does not fit) with the reason; `finer_builds` says,
per step, whether builds between the two releases exist for a bisect to run into.

Format history (schema_version):
  1 - the first version (kind "history").
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from harness.schema import record
from harness.schema.base import Frozen

SCHEMA_VERSION = 1
KIND = "history"
FILE = "history.json"

Status = Literal["measured", "no-leg", "not-installed", "dirty"]


class Release(Frozen):
    version: str
    leg: str
    label: str
    status: Status
    derived: bool = False                  # the leg was derived from the template (no leg file of its own)
    compat_id: str | None = None
    lock: str | None = None                # the leg env's uv.lock, relative to the harness cache
    stack: dict[str, str] = Field(default_factory=dict)   # vLLM, torch, transformers as locked
    reason: str | None = None              # why a release was not measured: a summary line, then the tool's log


class History(Frozen):
    schema_version: int = SCHEMA_VERSION
    kind: Literal["history"] = KIND
    scenario: str
    template: str
    dist: str
    releases: list[Release]
    design: Literal["paired", "serial"]
    design_reason: str
    finer_builds: str                      # where a bisect could run into a changed step, or why not
    created_at: str

    def measured(self) -> list[Release]:
        return [r for r in self.releases if r.status == "measured"]


def write(study_dir: Path, hist: History) -> Path:
    path = study_dir / FILE
    record.write_json_atomic(path, hist.model_dump(mode="json"))
    return path


def read(path: Path) -> History:
    """The record, lifted to this version; a UserError naming the file if unreadable or invalid."""
    return record.read_typed(path, KIND, History, SCHEMA_VERSION)  # type: ignore[return-value]


def find(study_dir: Path) -> History | None:
    path = Path(study_dir) / FILE
    return read(path) if path.exists() else None
