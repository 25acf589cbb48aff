"""Loading YAML into pydantic models with one-line errors that name the file and the key path."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from harness.core.errors import InvalidFileError

M = TypeVar("M", bound=BaseModel)


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def describe(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = tuple(p for p in first["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
    elif first["type"] == "value_error":
        # A model validator that knows the key it refuses says so as "key: why".
        msg = msg.removeprefix("Value error, ")
        m = re.match(r"^([A-Za-z_][\w.]*): (.*)$", msg)
        if m:
            loc, msg = (*loc, *m.group(1).split(".")), m.group(2)
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{_loc(loc)}: {msg}{more}"


def read_yaml(path: Path) -> object:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidFileError(path, "no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidFileError(path, f"cannot read: {e}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise InvalidFileError(path, f"{where}not valid YAML ({getattr(e, 'problem', e)})") from None


def load_model(model: type[M], path: Path, **context: object) -> M:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise InvalidFileError(path, "expected a mapping at the top level")
    try:
        return model.model_validate(data, context=context or None)
    except ValidationError as e:
        raise InvalidFileError(path, describe(e)) from None
