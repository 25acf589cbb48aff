"""`printed.yaml`: ratios a transcribed study's source printed without the figures behind them (a
companion study quoted only "1.03x"), so no record can hold them. Each entry names the cell and
step it belongs to, as the source's own figures would, and is labelled as a printed ratio wherever
it is shown; a step the source says cannot run at all carries `outcome` and no ratio.

Format history:
  1 - schema_version, source, ratios [{model, workload, old, new, ratio | outcome, where}].
Migration: a later version bumps SCHEMA_VERSION and lifts version 1 in `read_printed`.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError, model_validator

from harness.core.errors import InvalidFileError
from harness.core.yamlio import describe
from harness.schema.base import Frozen

SCHEMA_VERSION = 1
FILE = "printed.yaml"


class PrintedRatio(Frozen):
    model: str
    workload: str
    old: str            # leg labels, as the study's legs
    new: str
    ratio: float | None = None     # as printed, oriented as the tables orient it (above 1: newer faster)
    outcome: str | None = None     # instead of a ratio: what the source says happens ("cannot run")
    where: str                     # the place in the source document it was read

    @model_validator(mode="after")
    def _one(self) -> PrintedRatio:
        if (self.ratio is None) == (self.outcome is None):
            raise ValueError("give exactly one of ratio and outcome")
        return self


class Printed(Frozen):
    schema_version: int = SCHEMA_VERSION
    source: str
    ratios: tuple[PrintedRatio, ...] = ()

    def get(self, model: str, workload: str, old: str, new: str) -> PrintedRatio | None:
        return next((r for r in self.ratios if (r.model, r.workload, r.old, r.new) == (model, workload, old, new)),
                    None)


def read_printed(study_dir: Path) -> Printed | None:
    path = study_dir / FILE
    if not path.is_file():
        return None
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise InvalidFileError(path, f"not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise InvalidFileError(path, "expected a mapping")
    if int(raw.get("schema_version", 1)) > SCHEMA_VERSION:
        raise InvalidFileError(path, f"schema_version {raw['schema_version']} is newer than this harness reads "
                                     f"({SCHEMA_VERSION})")
    try:
        return Printed.model_validate(raw)
    except ValidationError as e:
        raise InvalidFileError(path, describe(e)) from None
