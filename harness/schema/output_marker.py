"""`.harness-output.json`: the marker the harness leaves in every output folder it writes (and, as
`.NAME.harness-output.json` beside it, for an output that is a single file), so that a later run may
recognise, and with `--replace` replace, what the harness itself wrote and nothing else
(harness.schema.outdir).

Format history (schema_version):
  1 - verb, harness version, time written; for a folder the studies it holds (a bundle's copy of its
      study: relative paths of folders with study.yaml or runs/), for a file its name and sha256 (a
      file edited by hand since is no longer the harness's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from harness.schema import record
from harness.schema.base import Frozen

SCHEMA_VERSION = 1
KIND = "harness-output"
FOLDER_MARKER = ".harness-output.json"


class OutputMarker(Frozen):
    schema_version: int = SCHEMA_VERSION
    kind: Literal["harness-output"] = KIND
    verb: str                      # the CLI verb that wrote the output (publish, report, tables, ...)
    harness_version: str
    created_at: str
    target: Literal["folder", "file"] = "folder"
    studies: list[str] = Field(default_factory=list)   # folder: the study folders inside it, as written
    file: str | None = None        # file: its name
    sha256: str | None = None      # file: its content when written


def sidecar(path: Path) -> Path:
    """Where a single output file's marker lives: beside it, hidden."""
    return path.with_name(f".{path.name}.harness-output.json")


def read(path: Path) -> OutputMarker:
    return record.read_typed(path, KIND, OutputMarker, SCHEMA_VERSION)  # type: ignore[return-value]


def write(path: Path, marker: OutputMarker) -> None:
    record.write_json_atomic(path, marker.model_dump(mode="json"))


def new(verb: str, **kw: object) -> OutputMarker:
    from harness import __version__

    return OutputMarker(verb=verb, harness_version=__version__, created_at=record.now(), **kw)  # type: ignore[arg-type]
