"""What a study tells its report, under the one top-level key `report:` of its `study.yaml`.

Claims that belong to one study live here, with that study's data, not in the generic report code:
which study-specific claim kinds it checks (`claims`), how its model names map to model classes
(`model_classes`), and which diagnostic notebooks its page points to (`notebooks`). A study without
the block gets the generic claims only, no model classes and no notebook list.

Format history (the block rides in study.yaml, whose own version carries it):
  1 - strict_claims, claims, model_classes {rules, plain, overrides}, notebooks; citation {date, source,
      publisher} added later, optional (a block without it reads as before); citation {author, url}
      added later still, optional.
Migration: a later version of the block is upgraded by study.yaml's migration steps.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator

from harness.core.errors import InvalidFileError
from harness.core.yamlio import describe
from harness.schema.base import Frozen


class ModelClassRule(Frozen):
    """A model class and the regex on model names that denotes it."""

    name: str
    pattern: str

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as e:
            raise ValueError(f"not a regular expression ({e})") from None
        return v


class ModelClasses(Frozen):
    """What kind of model a name denotes, for claims such as "flat on dense models"."""

    rules: tuple[ModelClassRule, ...] = Field(min_length=1)  # first match wins
    plain: tuple[str, ...] = ()  # the classes a new release is expected to leave alone
    overrides: dict[str, str] = Field(default_factory=dict)  # model name -> class

    def of(self, model: str) -> str:
        if model in self.overrides:
            return str(self.overrides[model])
        return next((r.name for r in self.rules if re.search(r.pattern, model)), "other")


class CitationConfig(Frozen):
    """What the records cannot say for the citation block: the source's date, name, publisher, author and
    address."""

    date: str | None = None
    source: str | None = None
    publisher: str | None = None
    author: str | None = None     # who made the data (a transcribed study: the source's authors)
    url: str | None = None        # where the data, or the source it was transcribed from, is published


class ReportConfig(Frozen):
    # Claim ids that must hold: a list, a comma-separated string, or true for all.
    strict_claims: list[str] | str | bool = Field(default_factory=list)
    # Study-specific claim kinds (ids of `harness.analyze.claims.REGISTRY`), checked beside the generic ones.
    claims: tuple[str, ...] = ()
    model_classes: ModelClasses | None = None
    # Notebook file names under notebooks/ that the page's diagnostics section points to.
    notebooks: tuple[str, ...] = ()
    # The citation block's date, source and publisher where the records do not hold them.
    citation: CitationConfig | None = None


def report_config(raw: Any, path: Path) -> ReportConfig:
    """The `report:` block of a study.yaml (None or absent: the empty block)."""
    if raw is None:
        return ReportConfig()
    if not isinstance(raw, dict):
        raise InvalidFileError(path, "report: expected a mapping")
    try:
        return ReportConfig.model_validate(raw)
    except ValidationError as e:
        raise InvalidFileError(path, "report." + describe(e)) from None
