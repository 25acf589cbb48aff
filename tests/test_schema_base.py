"""The shared frozen bases of harness.schema.base, and that the modules use them rather than a
private copy of their config."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.schema.base import Frozen, FrozenLenient

ROOT = Path(__file__).resolve().parents[1] / "harness"


class _Strict(Frozen):
    a: int


class _Lenient(FrozenLenient):
    a: int


def test_frozen_refuses_unknown_keys_and_assignment():
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        _Strict.model_validate({"a": 1, "b": 2})
    x = _Strict(a=1)
    with pytest.raises(ValidationError, match="frozen"):
        x.a = 2  # type: ignore[misc]
    assert x.model_copy(update={"a": 2}).a == 2 and x.a == 1


def test_frozen_lenient_drops_unknown_keys_and_stays_frozen():
    x = _Lenient.model_validate({"a": 1, "b": 2})
    assert x.model_dump() == {"a": 1}
    with pytest.raises(ValidationError, match="frozen"):
        x.a = 2  # type: ignore[misc]


# bisect.py keeps its own copy until it is next edited on its own.
_NOT_YET: set[str] = set()


def test_no_module_writes_out_its_own_frozen_config():
    pattern = re.compile(r"ConfigDict\(\s*frozen=True,\s*extra=")
    copies = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
              if p.name != "base.py" and pattern.search(p.read_text(encoding="utf-8"))]
    assert sorted(set(copies) - _NOT_YET) == []
