"""Strict claims: ids (fnmatch patterns) that must hold, or the render stops with `ClaimFailed`.

Light on purpose: `harness.publish.render` imports it at start-up, before any data is loaded.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from typing import Protocol

from harness.core.errors import UserError


class ClaimFailed(UserError):
    """A claim listed as strict is not supported by the data: the render stops."""


class _Checked(Protocol):
    id: str
    claim: str
    holds: bool
    sentence: str


def strict_ids(value: Iterable[str] | str | bool | None) -> list[str]:
    """Strict claim patterns from a parameter: True/"all", a comma-separated string, or a list."""
    if value is None or value is False:
        return []
    if value is True:
        return ["*"]
    items = value.split(",") if isinstance(value, str) else list(value)
    return ["*" if x.strip() == "all" else x.strip() for x in items if x.strip()]


def check_strict(claims: Sequence[_Checked], strict: Iterable[str] | str | bool | None) -> None:
    pats = strict_ids(strict)
    for c in claims:
        if not c.holds and any(fnmatch.fnmatchcase(c.id, p) for p in pats):
            raise ClaimFailed(f"claim {c.id} no longer holds: {c.claim}. The data says: {c.sentence}")
    unknown = [p for p in pats if p != "*" and not any(fnmatch.fnmatchcase(c.id, p) for c in claims)]
    if unknown:
        raise ClaimFailed(f"strict claim {', '.join(unknown)} is not made by this study's data "
                          f"(claims: {', '.join(c.id for c in claims) or 'none'})")
