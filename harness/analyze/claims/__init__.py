"""The claims engine: headline findings as checks computed from the canonical runs.

A claim kind is registered by id in `REGISTRY`, one line each. Generic kinds are checked for every
study of two legs or more; a study-specific kind only when the study lists it in study.yaml
`report.claims` (the B200 study's "single large jump", "winners", flat model classes). Kinds of a
step run for each pair of consecutive legs, in registry order within the pair; a run of
consecutive study kinds runs once, where it stands in the registry.

A claim the data stops supporting prints the data's own sentence instead; a claim whose id is
listed as strict stops the render with `ClaimFailed`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from harness.analyze.canonical import Canonical
from harness.analyze.tables import _legs
from harness.analyze.claims import kinds
from harness.analyze.claims.base import Claim, ClaimParams, Context, Pair, Step, model_class, steps
from harness.schema.report_config import ModelClasses
from harness.analyze.strict import ClaimFailed, check_strict, strict_ids


@dataclass(frozen=True)
class Kind:
    id: str
    scope: Literal["study", "step"]
    check: Callable[..., list[Claim]]
    generic: bool = True           # False: only for a study that lists it in `report.claims`
    needs_classes: bool = False    # reads the study's `report.model_classes`


REGISTRY: dict[str, Kind] = {k.id: k for k in (
    Kind("reference-flat", "study", kinds.reference_flat, generic=False, needs_classes=True),
    Kind("runs-at-all", "step", kinds.newly_running),
    Kind("no-general-speedup", "step", kinds.general),
    Kind("single-jump", "step", kinds.single_jump, generic=False),
    Kind("winners", "step", kinds.winners, generic=False),
    Kind("flat-class", "step", kinds.flat_classes, generic=False, needs_classes=True),
    Kind("not-monotonic", "study", kinds.not_monotonic),
    Kind("regression-repeated", "study", kinds.regression_repeated),
    Kind("newest-lowest", "study", kinds.newest_lowest),
)}


def enabled(study_kinds: Iterable[str] = ()) -> list[Kind]:
    """The generic kinds and the study's own, in registry order."""
    own = set(study_kinds)
    return [k for k in REGISTRY.values() if k.generic or k.id in own]


def findings(canon: Canonical, *, strict: Iterable[str] | str | bool = (), params: ClaimParams = ClaimParams(),
             others: dict[str, Canonical] | None = None, study_kinds: Iterable[str] = (),
             classes: ModelClasses | None = None) -> list[Claim]:
    """The headline claims of a study, each checked against its canonical runs.

    `strict`: claim ids (fnmatch patterns; "all" or True for every claim) that must hold; the first
    that does not raises ClaimFailed. `others`: the canonical cells of every series
    (`harness.publish.study.series_canons`), where repeated measurements of the main series' rows are
    looked for. `study_kinds`, `classes`: the study's `report.claims` and `report.model_classes`.
    """
    legs = _legs(canon)
    claims: list[Claim] = []
    if len(legs) >= 2:
        ctx = Context(canon=canon, legs=legs, params=params, classes=classes,
                      others=others if others is not None else {canon.series: canon})
        pairs: list[Pair] | None = None
        for scope, group in itertools.groupby(enabled(study_kinds), key=lambda k: k.scope):
            ks = list(group)
            if scope == "study":
                claims += [c for k in ks for c in k.check(ctx)]
                continue
            if pairs is None:
                pairs = [Pair(old=a, new=b, rows=steps(canon, a[0], b[0], classes=classes))
                         for a, b in zip(legs, legs[1:])]
            claims += [c for pair in pairs for k in ks for c in k.check(ctx, pair)]
    check_strict(claims, strict)
    return claims


__all__ = [
    "REGISTRY", "Claim", "ClaimFailed", "ClaimParams", "Context", "Kind", "Pair", "Step", "check_strict", "enabled",
    "findings", "model_class", "steps", "strict_ids",
]
