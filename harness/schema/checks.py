"""The one validation every reader of a run record goes through (the Dataset, crosscheck
--from-records, equivalence, engine-reuse, profile-diff, compare-studies, bisect).

`read(path)` turns a `results.json` into a `RunRecord` or one line naming the file: unreadable,
empty, not UTF-8, truncated or corrupt JSON, not an object, too new, not a valid record.
`metric_problem(rec)` says why a record's numbers cannot be a measurement: a NaN or infinite
value, a negative one, zero where the workload kind's `Metric` says the value must be positive
(`harness.workloads.base.Metric.positive`: a rate or a time), or an `ok` run without its kind's
metric. `read_measured(path)` is both: the record, or a one-line error naming the file.
A reader that keeps going (the Dataset) lists such records as problems by path; one that answers
for the records it was pointed at names them and leaves them out.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from harness import workloads
from harness.core.errors import InvalidFileError, UserError
from harness.core.yamlio import describe
from harness.schema import record
from harness.schema.record import RunRecord
from harness.workloads.base import Metric

Sign = Literal["positive", "non-negative", "any"]


def read(path: Path) -> RunRecord:
    """One results.json, migrated and validated; UserError (one line naming the file) when it cannot be used."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InvalidFileError(path, "no such file") from None
    except OSError as e:
        raise InvalidFileError(path, f"unreadable ({e.strerror})") from None
    if not raw.strip():
        raise InvalidFileError(path, "empty file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InvalidFileError(path, f"not UTF-8 (byte {e.start}): not a JSON record") from None
    except json.JSONDecodeError as e:
        # A record is written whole or not at all (atomic rename), so an unclosed one was cut short
        # by something else: a copy, a full disk, an archive.
        text = raw.rstrip()
        cut = e.pos >= len(text) - 1 or not text.endswith((b"}", b"]")) or e.msg.startswith("Unterminated")
        what = "truncated JSON" if cut else "corrupt JSON"
        raise InvalidFileError(path, f"{what} (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if not isinstance(data, dict):
        raise InvalidFileError(path, "not a JSON object")
    try:
        data = record.migrate(data, path)   # UserError, naming the path, for a too-new version
        return RunRecord.model_validate(data)
    except ValidationError as e:
        raise InvalidFileError(path, f"not a valid run record: {describe(e)}") from None
    except UserError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise InvalidFileError(path, f"cannot migrate ({type(e).__name__}: {e})") from None


def bad_number(v: float, sign: Sign = "positive") -> str | None:
    """Why `v` cannot be a measured value (None if it can): NaN and infinities never; a negative value
    unless `sign` is "any"; zero only where `sign` is "non-negative" or "any"."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return f"infinite ({v})"
    if v < 0 and sign != "any":
        return f"negative ({v:g})"
    if v == 0 and sign == "positive":
        return "zero, which no run measures"
    return None


def kind_of(rec: RunRecord) -> str | None:
    """The record's workload kind: as declared, or for records written before kinds were declared,
    the one its metric shows."""
    k = rec.workload_spec.get("kind")
    if isinstance(k, str):
        return k
    return next((name for name in workloads.KINDS if workloads.traits_of(name).undeclared
                 and getattr(rec.metrics, workloads.metric_of(name).key, None) is not None), None)


def metric_of(rec: RunRecord) -> Metric | None:
    k = kind_of(rec)
    return workloads.metric_of(k) if workloads.known(k) else None


def _numbers(prefix: str, values: object) -> list[tuple[str, float]]:
    """(key path, value) of every number in a flat model (lists of numbers expanded)."""
    out: list[tuple[str, float]] = []
    for key, v in values:  # type: ignore[attr-defined]
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            out.append((f"{prefix}.{key}", float(v)))
        elif isinstance(v, list):
            out += [(f"{prefix}.{key}[{i}]", float(x)) for i, x in enumerate(v)
                    if isinstance(x, (int, float)) and not isinstance(x, bool)]
    return out


def metric_problem(rec: RunRecord) -> str | None:
    """Why this record's numbers cannot be a measurement (None if they can). Every metric is checked
    against its kind's `Metric`: a kind measuring a rate or a time (every kind so far) records only
    positive numbers; one that declares `positive=False` only finite ones. Timings are seconds: never
    negative (zero is an engine that was already up). A serve run's load points: finite, not negative."""
    metric = metric_of(rec)
    sign: Sign = "positive" if metric is None or metric.positive else "any"
    checks = [(k, v, sign) for k, v in _numbers("metrics", rec.metrics)]
    checks += [(k, v, "non-negative") for k, v in _numbers("timing", rec.timing)]
    if rec.serve is not None:
        for i, p in enumerate(rec.serve.points):
            if p.metrics is not None:
                checks += [(k, v, "non-negative") for k, v in _numbers(f"serve.points[{i}].metrics", p.metrics)]
    paired = getattr(rec, "paired", None)
    for i, p in enumerate(paired.passes if paired is not None else ()):
        checks.append((f"paired.passes[{i}].seconds", float(p.seconds), "positive"))
        if p.value is not None:
            checks.append((f"paired.passes[{i}].value", float(p.value), sign))
    for key, v, s in checks:
        why = bad_number(v, s)  # type: ignore[arg-type]
        if why:
            return f"{key} is {why}"
    if rec.status == "ok" and metric is not None and getattr(rec.metrics, metric.key, None) is None:
        # An ok run without its kind's metric measured nothing usable: excluded as such, not passed over.
        return f"status ok but metrics.{metric.key} is missing (null)"
    return None


def excluded_why(what: str) -> str:
    return f"impossible metric: {what}; record excluded"


def read_measured(path: Path) -> RunRecord:
    """`read`, then `metric_problem`: the record, or a one-line error naming the file and the number."""
    rec = read(path)
    why = metric_problem(rec)
    if why:
        raise InvalidFileError(Path(path), excluded_why(why))
    return rec
