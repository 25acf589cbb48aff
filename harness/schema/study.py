"""`study.yaml`: a study folder's own description — name, title, provenance, leg order and labels,
row orders, and blocks other steps own (the report's under `report:`).

Format history (schema_version):
  0 - unversioned (every study.yaml written before versions): the same keys.
  1 - `schema_version` written by the sweep. Later additions within 1, optional and ignored by a
      harness that predates them: `crosscheck_band` (the band harness ÷ vLLM is judged against);
      `margin` (the practical margin δ of "equivalent within ±δ"; absent: the device kind's default)
      and `engine_sd` (a measured bound on one engine instance's own speed, log sd, for the paired
      design's rule), each with its source in `margin_source` / `engine_sd_source`; `price`
      ({per_hour, unit, source}: the serving cost's price and where it comes from; kept as an extra key
      and checked by harness.analyze.serve.price_of, `source` optional).
  2 - `aa`: the groups of legs the sweep resolved to one and the same stack (an A/A: identical locks,
      additions and settings under different leg names; harness.measure.aa), each {legs, lock_sha256,
      stack_sha256}. A difference between two legs of one group is a false call by construction.
      Version 0 and 1 files read as recording no group (`aa` None): nothing else changed, so the
      migration is the version number alone. A later addition within 2, optional:
      `allow_mixed_machines` (true: repeats of a cell measured on different machines are merged; a
      harness that predates it merged them without a word, so an older file reads as before only under
      it); `half_pass` (serve workloads whose cells are judged by their half-pass rate per server,
      harness.analyze.halfpass; a harness that predates it judged them by their throughput, as a file
      without it still is).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

SCHEMA_VERSION = 2


class LegEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    label: str | None = None


class AAGroup(BaseModel):
    """Legs one sweep resolved to one stack (harness.measure.aa.aa_groups)."""
    model_config = ConfigDict(extra="forbid")
    legs: list[str] = Field(min_length=2)
    lock_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    stack_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class StudyFile(BaseModel):
    # Other keys (allow_reused, description, notes, ...) are the business of the steps that read
    # them; they are kept, not refused.
    model_config = ConfigDict(extra="allow")
    schema_version: int = SCHEMA_VERSION
    name: str | None = None
    title: str = ""
    provenance: str = "measured"
    main_series: str = "main"
    legs: list[LegEntry] = Field(default_factory=list)
    model_order: list[str] = Field(default_factory=list)
    workload_order: list[str] = Field(default_factory=list)
    report: dict[str, Any] | None = None   # validated by harness.publish
    # The tables' declared choices (harness.analyze.canonical): true or false and nothing else, since a
    # quoted "no" (or 0, or "false") taken as a truth value would publish a comparison the study refused.
    allow_reused: StrictBool | None = None
    allow_different_work: StrictBool | None = None
    # Repeats of one cell measured on different machines (GPUs' uuids) merged anyway: leases that each
    # got another machine. The page names how many machines each figure spans.
    allow_mixed_machines: StrictBool | None = None
    # The crosscheck's target: harness ÷ vLLM within 1 ± this, judged by the whole interval. A study
    # sets it for its hardware (the H200 study 0.01, the shared CPU 0.03); without it no band is judged.
    crosscheck_band: float | None = Field(None, gt=0, lt=1)
    # "Equivalent within ±margin": a study's practical margin; None takes the device kind's default
    # (significance.MARGIN_DEFAULT). Printed under every table that uses it.
    margin: float | None = Field(None, gt=0, lt=1)
    # The paired design's engine-instance bound (significance.nested_paired), and where it was measured.
    engine_sd: float | None = Field(None, ge=0, lt=1)
    engine_sd_source: str | None = None
    # Version 2: legs that are one stack under different names (an A/A), as the sweep resolved them.
    aa: list[AAGroup] | None = None
    # Serve workloads (by name) that probe fixed rates in steady state and are judged by the rate a probe
    # passes the SLO half the time, one per server (harness.analyze.halfpass), not by their throughput.
    half_pass: list[str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _versioned(cls, raw: Any) -> Any:
        # An unversioned file is version 0; a newer one is refused rather than guessed at.
        if isinstance(raw, dict):
            raw = {"schema_version": 0} | raw
            v = raw["schema_version"]
            if not isinstance(v, int) or isinstance(v, bool) or v > SCHEMA_VERSION:
                raise ValueError(f"schema_version: {v!r} is not one this harness reads (newest: {SCHEMA_VERSION})")
            if v < 2:
                raw = _migrate_to_2(raw)
        return raw

    @field_validator("legs", mode="before")
    @classmethod
    def _names_alone(cls, v: Any) -> Any:
        # A leg may be given by name alone.
        return [{"name": x} if isinstance(x, str) else x for x in v] if isinstance(v, list) else v

    @field_validator("allow_reused", "allow_different_work", "allow_mixed_machines", mode="before")
    @classmethod
    def _true_or_false(cls, v: Any) -> Any:
        if v is not None and not isinstance(v, bool):
            raise ValueError(f"expected true or false (unquoted), got {v!r}; a quoted or numeric value is not "
                             f"read as a truth value")
        return v

    @field_validator("title", "provenance", "main_series", mode="before")
    @classmethod
    def _text(cls, v: Any) -> Any:
        return "" if v is None else str(v) if isinstance(v, (int, float)) else v


def _migrate_to_2(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 0/1 → 2: the same keys; such a file records no A/A group (its `aa`, absent, reads None)."""
    return raw | {"schema_version": 2}


def aa_legs(study: StudyFile, a: str, b: str) -> AAGroup | None:
    """The A/A group holding both legs `a` and `b`, or None: a comparison between them is an A/A."""
    return next((g for g in study.aa or [] if a in g.legs and b in g.legs), None)


def parse(raw: dict[str, Any]) -> StudyFile:
    """Raises pydantic's ValidationError (a ValueError) on a bad or too-new file."""
    return StudyFile.model_validate(raw)
