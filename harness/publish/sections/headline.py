"""Headline findings: one bullet per step between consecutive legs, then version progress, built
from the checked claims; and the appendix of every claim with its check."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.analyze.tables import _legs, markdown_table, ticked
from harness.analyze import wording as w
from harness.analyze.claims import Claim
from harness.analyze.claims.base import models, pair_id
from harness.publish.sections.overview import devices, repeat_summary
from harness.publish.study import Study


@dataclass(frozen=True, kw_only=True)
class Headline:
    one_leg: str | None            # the single leg's label, for a study that compares no versions
    bullets: list[str]             # "**a → b.** ..." per step, then the progress sentences
    notes: list[str]               # the class note (a study with model classes) and the claims note


def _flat_sentence(cs: list[Claim]) -> str:
    """Classes that are flat in one sentence with their joint range; each other class its own."""
    flat = [c for c in cs if c.holds]
    out = []
    if flat:
        names = [c.evidence["class"] for c in flat]
        vals = [v for c in flat for v in c.evidence["in_band"]]
        notes = "".join(c.evidence["ci_note"] for c in flat) if len(flat) == 1 else ""
        out.append(w.cap(f"{w.names(names)} models are essentially flat ({w.span_range(vals)}{notes})."))
    out += [c.sentence for c in cs if not c.holds]
    return " ".join(out)


def class_note(st: Study) -> str | None:
    classes = st.config.model_classes
    if classes is None:
        return None
    by: dict[str, list[str]] = {}
    for m in models(st.canon):
        by.setdefault(classes.of(m), []).append(m)
    return ("_Model classes, from the model names (study.yaml `model_classes` overrides): "
            + "; ".join(f"{c}: {', '.join(map(ticked, ms))}" for c, ms in by.items())
            + f". A ratio within {st.params.band:.0%} of 1.00x counts as flat; {st.params.jump:.1f}x or more is a "
              f"large jump; {st.params.win:.1f}x or more a win._")


def claims_note(st: Study) -> str:
    held = sum(c.holds for c in st.claims)
    return (f"_Each sentence above is a claim checked against the data at render time (of the "
            f"{w.n(len(st.claims), 'claim')} checked for this study, {held} {w.v(held, 'holds', 'hold')} and "
            f"{len(st.claims) - held} {w.v(len(st.claims) - held, 'does', 'do')} not; the list is under \"Claims "
            f"checked\"; `harness.publish.report.findings`): when the data stops supporting a "
            f"claim, its sentence says what the data shows instead, or, for a claim listed as strict, the render "
            f"fails._")


def _step_counts(st: Study, step: str) -> str:
    """A step no claim speaks to (no throughput rows, say a serving study): what the answer's cells of
    the step show, so the bullet is never empty."""
    from harness.publish.sections.answer import answer

    from harness.analyze.verdicts import step_sentence

    cs = [c.v for c in answer(st).cells if c.step == step]
    if not cs:
        return "No cell is measured on both legs."
    kinds = sorted({c.kind for c in cs})
    return (f"No headline claim applies to this step's workloads ({', '.join(kinds)}); {step_sentence(cs)} "
            "(see \"The answer\").")


def headline(st: Study) -> Headline:
    canon, claims = st.canon, list(st.claims)
    legs = _legs(canon)
    if len(legs) < 2:
        return Headline(one_leg=legs[0][1] if legs else "none", bullets=[], notes=[])
    by = {c.id: c for c in claims}
    plain = st.config.model_classes.plain if st.config.model_classes is not None else ()
    lines = []
    ref = by.get("reference-flat")
    for i, ((_, a), (_, b)) in enumerate(zip(legs, legs[1:])):
        pid = pair_id(a, b)
        parts = []
        ra = by.get(f"runs-at-all@{pid}")
        if ra is not None and ra.holds:
            parts.append(ra.sentence)
        g = by.get(f"no-general-speedup@{pid}")
        if g:
            parts.append(g.sentence)
        if i == 0 and ref is not None:
            parts.append(ref.sentence)
        jump, win = by.get(f"single-jump@{pid}"), by.get(f"winners@{pid}")
        if jump is not None and jump.holds:
            parts.append(jump.sentence)
        elif win is not None:
            parts.append(win.sentence)
        parts.append(_flat_sentence([by[k] for k in (f"flat-{c.lower()}@{pid}" for c in plain) if k in by]))
        text = " ".join(p for p in parts if p)
        lines.append(f"**{a} → {b}.** " + (text or _step_counts(st, f"{a} → {b}")))
    prog = [by[k].sentence for k in ("not-monotonic", "regression-repeated", "newest-lowest") if k in by]
    if not by["not-monotonic"].holds:
        prog = [by["not-monotonic"].sentence] + ([by["newest-lowest"].sentence] if "newest-lowest" in by else [])
    lines.append(" ".join(prog))
    note = class_note(st)
    return Headline(one_leg=None, bullets=lines, notes=[*([note] if note else []), claims_note(st)])


def headline_md(st: Study) -> str:
    """The findings as bullets, one per step between consecutive legs, then version progress."""
    h = headline(st)
    if h.one_leg is not None:
        return (f"This study has one leg ({h.one_leg}), so it compares no versions: the figures below are absolute, "
                f"measured on {w.names(devices(st.canon)) or 'an unrecorded device'}. {repeat_summary(st)}\n")
    lines = [f"- {b}" for b in h.bullets]
    for note in h.notes:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def claims_table(st: Study) -> pd.DataFrame:
    """Every claim, its check and whether it holds."""
    return pd.DataFrame([{"id": f"`{c.id}`", "check": c.claim, "holds": "yes" if c.holds else "no"}
                         for c in st.claims])


def claims_md(st: Study) -> str:
    """The claims appendix."""
    if not st.claims:
        return "No claim applies to a study of one leg.\n"
    return markdown_table(claims_table(st)) + "\n"
