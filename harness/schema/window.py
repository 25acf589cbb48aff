"""A window record: `results/window/<leg>--<package>--<probe sha>.json` (harness.experiments.window), which releases
of a package a leg works with, beside the range it declares.

Format history (schema_version):
# 1 - first format: inputs, declared requirements, one entry per tested release, windows, flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from harness import __version__
from harness.core import paths
from harness.schema import record
from harness.schema.base import Frozen

SCHEMA_VERSION = 1
KIND = "window"
RESULTS_DIR = paths.RESULTS / "window"


class Declared(Frozen):
    dist: str          # the installed distribution that declares it
    requirement: str   # as written in its metadata, marker included
    applies: bool      # its marker holds in the leg env (extras are not requested)


Install = Literal["lock", "relaxed", "failed"]


class ReleaseResult(Frozen):
    version: str
    admitted: bool                 # inside the combined declared range
    install: Install               # lock: leg lock + this release; relaxed: re-resolved around it
    install_error: str = ""
    moved: dict[str, str] = Field(default_factory=dict)  # other packages moved by a relaxed resolve
    works: bool | None = None      # None: never installed, so never probed
    rc: int | None = None
    seconds: float | None = None
    stderr_last: str = ""
    stdout_last: str = ""
    env: str | None = None         # the scratch env's name (leg + release + compat id)


class Window(Frozen):
    first: str                     # oldest and newest tested release that works, with every
    last: str                      # tested release between them working too
    below: str | None = None       # nearest tested release under `first` (it did not work)
    above: str | None = None


class WindowRecord(Frozen):
    schema_version: int = SCHEMA_VERSION
    kind: Literal["window"] = "window"
    harness_version: str = __version__
    created_at: str
    finished_at: str | None = None
    node: str | None = None
    package: str
    probe: str
    probe_sha256: str
    leg: str
    leg_label: str
    vllm_dist: str
    vllm_version: str
    leg_compat_id: str
    leg_resolves_to: str | None    # PACKAGE's version in the leg's own lock
    index: str
    declared: list[Declared]
    declared_range: str            # the combined specifier of the requirements that apply; "" = any
    releases: list[ReleaseResult]  # ascending
    windows: list[Window]
    flags: list[str]
    notes: list[str] = Field(default_factory=list)

    @property
    def admits_broken(self) -> list[str]:
        return [r.version for r in self.releases if r.admitted and r.works is False]


# --- the record ---------------------------------------------------------------------------------

def write_record(rec: WindowRecord, path: Path) -> Path:
    record.write_json_atomic(path, rec.model_dump(mode="json"))
    return path


def read_record(path: Path) -> WindowRecord:
    return record.read_typed(path, KIND, WindowRecord, SCHEMA_VERSION)


def read_records(root: Path = RESULTS_DIR) -> list[WindowRecord]:
    """Every window record directly under `root`, oldest first (for the report and the notebooks)."""
    return record.read_typed_dir(root, KIND, WindowRecord, SCHEMA_VERSION)  # type: ignore[return-value]
