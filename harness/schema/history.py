"""`history.json`: a release history's plan and what became of each release (a study folder that holds
one is a history study: `harness.analyze.history` reads its runs release by release).

One entry per release the scenario's `history:` names, in release order: the leg it was measured on
(derived from the template leg, or the release's reviewed leg file), that leg's compat id and lock,
and its status: `measured` (its runs are in the study), `no-leg` (a prebuilt release without a leg
file), `not-installed` (its env did not resolve or build here: `reason` is the resolver's or
installer's last lines) or `dirty` (a foreign vLLM plugin in its env). `design` is the design the
sweep ran (paired, or serial where the paired one does not fit) with the reason; `finer_builds` says,
per step, whether builds between the two releases exist for a bisect to run into; `bisects` lists the
bisects the sweep ran into changed steps that have such builds, each with its record's file.

Format history (schema_version):
  1 - the first version (kind "history").
  2 - `finer` (step -> the builds between its releases) and `bisects` (one entry per changed step and
      (model, workload) the sweep bisected); version 1 files read as having found and run none. A
      release's `build_s` and `env_reused` (unknown in version 1 files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from harness.schema import record
from harness.schema.base import Frozen

SCHEMA_VERSION = 2
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
    build_s: float | None = None           # building (or finding) its env here, seconds
    env_reused: bool | None = None         # the env existed already (build_s is then the check's time)


class Bisected(Frozen):
    """A bisect the history ran into one changed step of one (model, workload)."""
    model: str
    workload: str
    step: str                              # "0.29.0→0.32.0"
    verdict: str                           # the step test's verdict that made it a changed step
    between: list[str]                     # the builds it searched, from the good side
    record: str | None = None              # its bisect record, relative to the results root
    conclusion: str                        # the record's conclusion, or why the bisect could not run


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
    finer: dict[str, list[str]] = Field(default_factory=dict)   # "a→b" -> the builds between a and b
    bisects: list[Bisected] = Field(default_factory=list)
    created_at: str

    def measured(self) -> list[Release]:
        return [r for r in self.releases if r.status == "measured"]


def write(study_dir: Path, hist: History) -> Path:
    path = study_dir / FILE
    record.write_json_atomic(path, hist.model_dump(mode="json"))
    return path


def _update_to_2(old: dict, path: Path) -> dict:
    """Version 1 -> 2: no finer builds listed by step and no bisect run (version 1 ran none)."""
    return {**old, "schema_version": 2, "finer": {}, "bisects": []}


MIGRATIONS: dict[int, record.Migration] = {1: _update_to_2}


def read(path: Path) -> History:
    """The record, lifted to this version; a UserError naming the file if unreadable or invalid."""
    return record.read_typed(path, KIND, History, SCHEMA_VERSION,  # type: ignore[return-value]
                             migrations=MIGRATIONS)


def find(study_dir: Path) -> History | None:
    path = Path(study_dir) / FILE
    return read(path) if path.exists() else None
