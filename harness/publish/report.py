"""The report and the dataset card of a study folder; every number in them is computed at render time.

`index.qmd` is the report's source: a parameters cell (`study`, `strict_claims`), one import cell,
and short cells that call the functions here and print markdown (`output: asis`) or show a figure
(the figure functions of `harness.publish.figures` over the frames of `harness.investigate.diagnostics`, as the notebooks
draw them). `render(study_dir)` (from `harness.publish.render`) runs `quarto render` with the study as a
parameter where the `quarto` command exists, and otherwise executes index.qmd's cells through a
Jupyter kernel; either way it writes REPORT.md, the HTML page and the dataset card `README.md`, whose
body is REPORT.md's text.

Headline findings are `Claim`s: a check computed from the canonical runs and a sentence built from
the numbers. A claim the data stops supporting prints the data's own sentence instead; a claim whose
id is listed as strict (parameter `strict_claims`, `--strict-claim`, or study.yaml
`report: {strict_claims: [...]}`) stops the render with `ClaimFailed`.
"""

from __future__ import annotations

import fnmatch
import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import yaml

from harness.core import paths
from harness.analyze.canonical import Canonical, canonicalize
from harness.analyze.dataset import Dataset, load
from harness.core.errors import UserError
from harness.publish.render import (
    QMD,
    ClaimFailed,
    RenderError,
    RenderResult,
    _rel,
    _resolve,
    card_body,
    card_text,
    render,
    strict_ids,
)
from harness.analyze.stats import Ratio, ratio, spread
from harness.analyze.tables import MISSING, _legs, fmt_ms, fmt_tok_s, markdown_table, model_order, order_frame, ticked

# --- model classes -------------------------------------------------------------------------------

# What kind of model a name denotes, for claims such as "flat on dense models". First match wins, so
# a quantized MoE vision model is MoE. study.yaml `model_classes: {model: class}` overrides.
CLASS_PATTERNS: tuple[tuple[str, str], ...] = (
    ("MoE", r"(?i)(?:^|[-_ ])A\d+B(?:$|[-_ ])|mixtral|gpt-oss|glm-|moe|\d+x\d+b"),
    ("state-space", r"(?i)mamba|jamba"),
    ("ASR", r"(?i)whisper"),
    ("multimodal", r"(?i)-vl-|omni|llava"),
    ("dense", r"(?i)llama|mistral|qwen|gemma|phi"),
)
# The classes a new release is expected to leave alone: the report says whether it did.
PLAIN_CLASSES: tuple[str, ...] = ("dense", "ASR", "multimodal")


def model_class(model: str, overrides: dict[str, str] | None = None) -> str:
    if overrides and model in overrides:
        return str(overrides[model])
    return next((cls for cls, pat in CLASS_PATTERNS if re.search(pat, model)), "other")


def _class_overrides(canon: Canonical) -> dict[str, str]:
    v = canon.study.extra.get("model_classes") or {}
    return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else {}


# --- claims --------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Claim:
    """One headline claim. `claim` is the assertion checked; `holds` whether the data supports it;
    `sentence` what the report prints: the assertion with its numbers when it holds, what the data
    says instead when it does not. `group` places it in the findings (a leg pair, or "progress")."""

    id: str
    group: str
    claim: str
    holds: bool
    sentence: str
    evidence: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, kw_only=True)
class ClaimParams:
    band: float = 0.05          # a ratio within 1 ± band is "flat"
    jump: float = 2.0           # a ratio at or above this is a "large jump"
    win: float = 1.5            # a ratio at or above this makes a model a "winner" of the step


@dataclass(frozen=True, kw_only=True)
class Step:
    """One (model, workload) measured on both legs of a step, with the ratio of their samples."""

    model: str
    workload: str
    kind: str
    old: float
    new: float
    ratio: Ratio
    cls: str

    @property
    def r(self) -> float:
        return float(self.ratio.value)  # type: ignore[arg-type]


def _cells(canon: Canonical) -> dict[tuple[str, str, str], dict]:
    return {(c["leg"], c["model"], c["workload"]): c for c in canon.cells.to_dict("records")}


def _rows(canon: Canonical, kind: str) -> list[tuple[str, str]]:
    exp = canon.expected[canon.expected["kind"] == kind]
    rows = order_frame(canon, exp.drop_duplicates(["model", "workload"])[["model", "workload"]])
    return list(zip(rows["model"], rows["workload"]))


def steps(canon: Canonical, old: str, new: str, kind: str = "throughput") -> list[Step]:
    """Every (model, workload) of `kind` measured on both legs, in table order."""
    cells, classes = _cells(canon), _class_overrides(canon)
    out = []
    for model, workload in _rows(canon, kind):
        a, b = cells.get((old, model, workload)), cells.get((new, model, workload))
        if a is None or b is None:
            continue
        rt = ratio(a["samples"], b["samples"], higher_is_better=(kind == "throughput"))
        out.append(Step(model=model, workload=workload, kind=kind, old=float(a["value"]), new=float(b["value"]),
                        ratio=rt, cls=model_class(model, classes)))
    return out


def _x(v: float) -> str:
    return f"{v:.2f}x"


def _fmt(kind: str, v: float | None) -> str:
    return fmt_tok_s(v) if kind == "throughput" else fmt_ms(v)


def _names(items: Sequence[str], conj: str = "and") -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {conj} " + items[-1]


def _n(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def _v(n: int, one: str, many: str) -> str:
    """The verb agreeing with a count: _v(1, "runs", "run")."""
    return one if n == 1 else many


def _all(n: int) -> str:
    return {2: "both legs", 3: "all three legs"}.get(n, f"all {n} legs")


def _range(vals: Sequence[float]) -> str:
    lo, hi = min(vals), max(vals)
    return _x(lo) if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}–{hi:.2f}x"


def _flat(r: float, p: ClaimParams) -> bool:
    return 1 - p.band <= r <= 1 + p.band


def _pair_id(a: str, b: str) -> str:
    return f"{a}-{b}"


def _reference_flat(canon: Canonical, legs: list[tuple[str, str]], p: ClaimParams) -> Claim | None:
    """The first dense model's first throughput workload, across every leg."""
    cells, classes = _cells(canon), _class_overrides(canon)
    for model, workload in _rows(canon, "throughput"):
        if model_class(model, classes) != "dense":
            continue
        vals = [cells.get((leg, model, workload)) for leg, _ in legs]
        if any(v is None for v in vals):
            continue
        xs = [float(v["value"]) for v in vals]  # type: ignore[index]
        sp = max(xs) / min(xs) - 1
        shown = " / ".join(fmt_tok_s(x) for x in xs)
        holds = sp <= p.band
        if holds:
            sentence = (f"Plain dense {ticked(model)} ({workload}) lands within {sp:.1%} across {_all(len(legs))} "
                        f"({shown} tok/s).")
        else:
            lo, hi = int(np.argmin(xs)), int(np.argmax(xs))
            sentence = (f"Plain dense {ticked(model)} ({workload}) is not flat across the legs: {shown} tok/s, "
                        f"{sp:.0%} between {legs[lo][1]} and {legs[hi][1]}.")
        return Claim(id="reference-flat", group="across", holds=holds, sentence=sentence,
                     claim=f"the first dense model's throughput is flat (within {p.band:.0%}) across every leg",
                     evidence={"model": model, "workload": workload, "values": xs, "spread": sp})
    return None


def _newly_running(canon: Canonical, old: tuple[str, str], new: tuple[str, str]) -> Claim:
    from harness.analyze.failure import attributions_by_model

    models = _models(canon)
    back = [m for m in models if _passes(canon, new[0], m) and not _passes(canon, old[0], m)]
    lost = [m for m in models if _passes(canon, old[0], m) and not _passes(canon, new[0], m)]
    att = attributions_by_model(canon.dataset, series=canon.series)
    pinned = att[(att["leg"] == old[0]) & (att["status"] == "passes only pinned")]
    pins = sorted({p for ps in pinned["pins"] for p in ps})
    parts = []
    if back:
        parts.append(f"{_n(len(back), 'model')} {_v(len(back), 'runs', 'run')} on {new[1]} that "
                     f"{_v(len(back), 'does', 'do')} not on {old[1]} "
                     f"({', '.join(map(ticked, back))})")
    if len(pinned):
        parts.append(f"{_n(len(pinned), 'model')} {_v(len(pinned), 'runs', 'run')} on {old[1]} only under a "
                     f"dependency pin "
                     f"({', '.join(f'`{p}`' for p in pins)})")
    if lost:
        parts.append(f"{_n(len(lost), 'model')} {_v(len(lost), 'runs', 'run')} on {old[1]} but not on {new[1]} "
                     f"({', '.join(map(ticked, lost))})")
    holds = bool(back or len(pinned))
    sentence = ("; ".join(parts) + ".") if parts else f"Every model runs on both {old[1]} and {new[1]}."
    sentence = sentence[0].upper() + sentence[1:]
    return Claim(id=f"runs-at-all@{_pair_id(old[1], new[1])}", group=f"{old[1]} → {new[1]}", holds=holds,
                 claim=f"on {old[1]}, some models do not run, or run only under a pin, that run on {new[1]}",
                 sentence=sentence,
                 evidence={"back": back, "lost": lost, "pinned": list(pinned["model"]), "pins": pins})


def _general(rows: list[Step], old: str, new: str, p: ClaimParams) -> Claim | None:
    if not rows:
        return None
    med = float(np.median([s.r for s in rows]))
    holds = _flat(med, p)
    head = "not a general speedup" if holds else ("a general speedup" if med > 1 else "a general slowdown")
    sentence = (f"Across the {_n(len(rows), 'throughput row')} measured on both legs it is {head}: the median "
                f"ratio is {_x(med)}.")
    return Claim(id=f"no-general-speedup@{_pair_id(old, new)}", group=f"{old} → {new}", holds=holds,
                 claim=f"{old} → {new} is not a general speedup (median throughput ratio within {p.band:.0%} of 1)",
                 sentence=sentence, evidence={"median": med, "rows": len(rows)})


def _best_per_model(rows: Iterable[Step]) -> list[Step]:
    best: dict[str, Step] = {}
    for s in rows:
        if s.model not in best or s.r > best[s.model].r:
            best[s.model] = s
    return sorted(best.values(), key=lambda s: -s.r)


def _jump(rows: list[Step], old: str, new: str, p: ClaimParams) -> Claim | None:
    if not rows:
        return None
    big = _best_per_model(s for s in rows if s.r >= p.jump)
    holds = len(big) == 1
    if holds:
        s = big[0]
        sentence = (f"The single large jump is {ticked(s.model)} {s.workload} at {_x(s.r)} "
                    f"({fmt_tok_s(s.old)} → {fmt_tok_s(s.new)} tok/s).")
    elif big:
        sentence = (f"{_n(len(big), 'model')} {_v(len(big), 'gains', 'gain')} {p.jump:.1f}x or more: "
                    + _names([f"{ticked(s.model)} {s.workload} at {_x(s.r)}" for s in big]) + ".")
    else:
        top = max(rows, key=lambda s: s.r)
        sentence = (f"No model gains {p.jump:.1f}x or more; the largest ratio is {ticked(top.model)} {top.workload} "
                    f"at {_x(top.r)}.")
    return Claim(id=f"single-jump@{_pair_id(old, new)}", group=f"{old} → {new}", holds=holds,
                 claim=f"exactly one model gains {p.jump:.1f}x or more from {old} to {new}", sentence=sentence,
                 evidence={"models": [s.model for s in big]})


def _winners(rows: list[Step], old: str, new: str, p: ClaimParams) -> Claim | None:
    if not rows:
        return None
    win = _best_per_model(s for s in rows if s.r >= p.win)
    holds = bool(win)
    if holds:
        sentence = ("The winners are " if len(win) > 1 else "The one winner is ") + _names(
            [f"{ticked(s.model)} {s.workload} at {_x(s.r)}" for s in win]) + "."
    else:
        sentence = f"No model gains {p.win:.1f}x or more from {old} to {new}."
    return Claim(id=f"winners@{_pair_id(old, new)}", group=f"{old} → {new}", holds=holds,
                 claim=f"some models gain {p.win:.1f}x or more from {old} to {new}", sentence=sentence,
                 evidence={"models": [s.model for s in win], "ratios": [s.r for s in win]})


def _flat_class(rows: list[Step], cls: str, old: str, new: str, p: ClaimParams) -> Claim | None:
    mine = [s for s in rows if s.cls == cls]
    if not mine:
        return None
    out = [s for s in mine if not _flat(s.r, p)]
    inside = [s.r for s in mine if _flat(s.r, p)]
    holds = not out
    label = cls
    ci = [s for s in mine if s.ratio.low is not None]
    within = sum(1 for s in ci if s.ratio.verdict == "no difference detected")
    ci_note = (f"; the 95% interval contains 1.00x on {within} of {len(ci)} rows" if ci else "")
    if holds:
        sentence = f"{label[0].upper() + label[1:]} models are essentially flat ({_range(inside)}{ci_note})."
    else:
        excepts = _names([f"{ticked(s.model)} {s.workload} at {_x(s.r)}" for s in out])
        rng = f" ({_range(inside)})" if inside else ""
        sentence = (f"{label[0].upper() + label[1:]} models are flat in {len(inside)} of {len(mine)} rows{rng}; "
                    f"not flat: {excepts}{ci_note}.")
    return Claim(id=f"flat-{cls.lower()}@{_pair_id(old, new)}", group=f"{old} → {new}", holds=holds,
                 claim=f"{old} → {new} is flat on {cls} models (every throughput ratio within {p.band:.0%} of 1)",
                 sentence=sentence, evidence={"class": cls, "in_band": inside, "ci_note": ci_note,
                                              "out": [(s.model, s.workload, s.r) for s in out]})


def _regressions(canon: Canonical, legs: list[tuple[str, str]], p: ClaimParams) -> list[tuple[Step, int]]:
    """(step, index of its old leg) for every throughput step slower by more than the band, worst first."""
    found = []
    for i, ((a, _), (b, _)) in enumerate(zip(legs, legs[1:])):
        found += [(s, i) for s in steps(canon, a, b) if s.r < 1 - p.band]
    return sorted(found, key=lambda t: t[0].r)


_MONOTONIC = "version progress is not monotonic (some row is slower on a newer leg by more than {band:.0%})"


def _not_monotonic(canon: Canonical, legs: list[tuple[str, str]], p: ClaimParams) -> Claim:
    regs = _regressions(canon, legs, p)
    if not regs:
        return Claim(id="not-monotonic", group="progress", holds=False,
                     claim=_MONOTONIC.format(band=p.band),
                     sentence=(f"Version progress is monotonic in this data: no throughput row is slower on a newer "
                               f"leg by more than {p.band:.0%}."), evidence={"regressions": []})
    s, i = regs[0]
    a, b = legs[i][1], legs[i + 1][1]
    sentence = (f"Version progress is not monotonic. {ticked(s.model)} is slower on {b} than on {a} "
                f"({s.workload} {fmt_tok_s(s.old)} → {fmt_tok_s(s.new)}, i.e. {_x(s.r)})")
    cells = _cells(canon)
    after = [(lb, cells.get((leg, s.model, s.workload))) for leg, lb in legs[i + 2:]]
    after = [(lb, float(c["value"])) for lb, c in after if c is not None]
    if after:
        back = next(((lb, v) for lb, v in after if v >= s.old), None)
        if back:
            sentence += f" and is back above {a} only on {back[0]} ({fmt_tok_s(back[1])})"
        else:
            lb, v = after[-1]
            sentence += f" and is still below {a} on {lb} ({fmt_tok_s(v)})"
    sentence += "."
    if len(regs) > 1:
        sentence += (f" {_n(len(regs), 'throughput row')} in all are slower on a newer leg by more than {p.band:.0%}: "
                     + _names([f"{ticked(t.model)} {t.workload} {legs[j][1]} → {legs[j + 1][1]} {_x(t.r)}"
                               for t, j in regs]) + ".")
    return Claim(id="not-monotonic", group="progress", holds=True, sentence=sentence,
                 claim=_MONOTONIC.format(band=p.band),
                 evidence={"regressions": [(t.model, t.workload, legs[j][1], legs[j + 1][1], t.r) for t, j in regs]})


def _newest_lowest(canon: Canonical, legs: list[tuple[str, str]], p: ClaimParams) -> Claim | None:
    if len(legs) < 3:
        return None
    cells = _cells(canon)
    found = []
    for model, workload in _rows(canon, "throughput"):
        cs = [cells.get((leg, model, workload)) for leg, _ in legs]
        if any(c is None for c in cs):
            continue
        xs = [float(c["value"]) for c in cs]  # type: ignore[index]
        flat = max(xs) / min(xs) - 1 <= p.band
        if flat and xs[-1] < min(xs[:-1]):
            found.append((model, workload, xs))
    if not found:
        return None
    parts = [f"{ticked(m)} {w} is flat across {_all(len(legs))} ({' / '.join(fmt_tok_s(x) for x in xs)}), "
             f"with {legs[-1][1]} marginally lowest" for m, w, xs in found]
    return Claim(id="newest-lowest", group="progress", holds=True, sentence="; ".join(parts) + ".",
                 claim="some rows are flat across every leg with the newest leg lowest",
                 evidence={"rows": [(m, w) for m, w, _ in found]})


def series_canons(ds: Dataset, *, allow_reused: bool | None = None) -> dict[str, Canonical]:
    """The canonical cells of every series of the dataset (default arm), the main series first."""
    names = [ds.study.main_series] + sorted(set(ds.records["series"]) - {ds.study.main_series})
    return {s: canonicalize(ds, series=s, allow_reused=allow_reused) for s in names if s in set(ds.records["series"])}


def _regression_repeated(canon: Canonical, legs: list[tuple[str, str]], p: ClaimParams,
                         others: dict[str, Canonical]) -> Claim | None:
    regs = _regressions(canon, legs, p)
    if not regs:
        return None
    s, i = regs[0]
    (a, alb), (b, blb) = legs[i], legs[i + 1]
    for name, c in others.items():
        sa, sb = c.samples(a, s.model, s.workload), c.samples(b, s.model, s.workload)
        if len(sa) < 2 or len(sb) < 2:
            continue
        rt = ratio(sa, sb)
        holds = rt.verdict == "slower"
        where = "in the main series" if name == canon.series else f"(series `{name}`)"
        times = f"{len(sa)} times" if len(sa) == len(sb) else f"{len(sa)} / {len(sb)} times"
        sp = f"repeat spread {rt.spread_old:.1%} on {alb} and {rt.spread_new:.1%} on {blb}"
        gap = 1 / rt.value - 1 if rt.value else float("nan")
        ci = f"{_x(rt.value)} [{rt.low:.2f}, {rt.high:.2f}]"
        if holds:
            sentence = (f"This one has been measured {times} per leg {where} and it holds: "
                        f"{s.workload} {ci}, {sp}, against a gap of {gap:.0%}.")
        else:
            sentence = (f"Measured {times} per leg {where}, it does not hold up: "
                        f"{s.workload} {ci}, {rt.verdict}.")
        if name != canon.series:
            dev = [abs(float(np.median(x)) / v - 1) for x, v in ((sa, s.old), (sb, s.new))]
            sentence += f" The repeat medians lie within {max(dev):.1%} of the main table's figures."
        return Claim(id="regression-repeated", group="progress", holds=holds, sentence=sentence,
                     claim=f"the largest regression ({s.model} {s.workload}, {alb} → {blb}) holds under repeated "
                           f"measurement (95% CI below 1)",
                     evidence={"series": name, "ratio": rt.value, "low": rt.low, "high": rt.high,
                               "spread": (rt.spread_old, rt.spread_new), "gap": gap})
    return Claim(id="regression-repeated", group="progress", holds=False,
                 claim=(f"the largest regression ({s.model} {s.workload}, {alb} → {blb}) holds under repeated "
                        f"measurement"),
                 sentence=("It has not been measured more than once per leg, so whether it holds is open: a single "
                           "pass per side carries no interval."), evidence={})


def findings(canon: Canonical, *, strict: Iterable[str] | str | bool = (), params: ClaimParams = ClaimParams(),
             others: dict[str, Canonical] | None = None) -> list[Claim]:
    """The headline claims of a study, each checked against its canonical runs.

    `strict`: claim ids (fnmatch patterns; "all" or True for every claim) that must hold; the first
    that does not raises ClaimFailed. `others`: the canonical cells of every series (`series_canons`),
    where repeated measurements of the main series' rows are looked for.
    """
    legs = _legs(canon)
    claims: list[Claim] = []
    if len(legs) >= 2:
        ref = _reference_flat(canon, legs, params)
        if ref:
            claims.append(ref)
        for (a, alb), (b, blb) in zip(legs, legs[1:]):
            rows = steps(canon, a, b)
            claims.append(_newly_running(canon, (a, alb), (b, blb)))
            for c in (_general(rows, alb, blb, params), _jump(rows, alb, blb, params), _winners(rows, alb, blb, params),
                      *(_flat_class(rows, cls, alb, blb, params) for cls in PLAIN_CLASSES)):
                if c is not None:
                    claims.append(c)
        claims.append(_not_monotonic(canon, legs, params))
        for c in (_regression_repeated(canon, legs, params, others if others is not None else {canon.series: canon}),
                  _newest_lowest(canon, legs, params)):
            if c is not None:
                claims.append(c)
    check_strict(claims, strict)
    return claims


def check_strict(claims: Sequence[Claim], strict: Iterable[str] | str | bool | None) -> None:
    pats = strict_ids(strict)
    for c in claims:
        if not c.holds and any(fnmatch.fnmatchcase(c.id, p) for p in pats):
            raise ClaimFailed(f"claim {c.id} no longer holds: {c.claim}. The data says: {c.sentence}")
    unknown = [p for p in pats if p != "*" and not any(fnmatch.fnmatchcase(c.id, p) for c in claims)]
    if unknown:
        raise ClaimFailed(f"strict claim {', '.join(unknown)} is not made by this study's data "
                          f"(claims: {', '.join(c.id for c in claims) or 'none'})")


# --- the study, as the report's cells see it -------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Study:
    """What the report's cells share: the canonical runs, every series, and the claims."""

    root: Path
    canon: Canonical
    series: dict[str, Canonical]
    claims: tuple[Claim, ...]
    params: ClaimParams

    @property
    def ds(self) -> Dataset:
        return self.canon.dataset

    @property
    def transcribed(self) -> bool:
        return "transcribed" in self.canon.provenances or self.canon.study.provenance == "transcribed"


def load_study(study: Path | str, *, strict_claims: Iterable[str] | str | bool | None = None,
               params: ClaimParams = ClaimParams()) -> Study:
    """Load, canonicalize and check the claims. `strict_claims=None` takes study.yaml's
    `report: {strict_claims: [...]}` (none if absent)."""
    root = _resolve(study)
    ds = load(root)
    others = series_canons(ds)
    canon = others.get(ds.study.main_series) or canonicalize(ds)
    if strict_claims is None:
        rep = ds.study.extra.get("report") or {}
        strict_claims = rep.get("strict_claims", []) if isinstance(rep, dict) else []
    claims = findings(canon, strict=strict_claims, params=params, others=others)
    return Study(root=root, canon=canon, series=others, claims=tuple(claims), params=params)


# --- sections ------------------------------------------------------------------------------------

def _legs_text(canon: Canonical) -> str:
    return " / ".join(lb for _, lb in _legs(canon))


def title_md(st: Study) -> str:
    s = st.canon.study
    return f"# {s.title or s.name}\n"


def _devices(canon: Canonical) -> list[str]:
    return list(dict.fromkeys(str(d) for d in canon.cells["device"].dropna())) if len(canon.cells) else []


def _repeat_summary(st: Study) -> str:
    """How often each canonical figure was measured, and where else repeats exist."""
    cells = st.canon.cells
    if not len(cells):
        return "No run of the main series has a canonical measurement."
    single = cells[cells["n"] == 1]
    rep = cells[cells["n"] >= 2]
    if not len(single):
        text = (f"Every canonical figure is the median of {_span(cells['n'])} repeats, with a bootstrap 95% "
                f"interval on every ratio.")
    elif not len(rep):
        models = list(dict.fromkeys(cells["model"]))
        text = (f"Every canonical figure is a single timed pass ({len(cells)} figures, {_n(len(models), 'model')}): "
                f"no ratio in the tables has an interval.")
    else:
        text = (f"{len(rep)} of the {len(cells)} canonical figures are medians of {_span(rep['n'])} repeats; "
                f"{len(single)} {_v(len(single), 'is', 'are')} a single timed pass ("
                + ", ".join(f"{ticked(m)} {w} on {lb}" for m, w, lb in
                            list(zip(single["model"], single["workload"], single["leg_label"]))[:6])
                + (" …" if len(single) > 6 else "") + ").")
    extra = _other_repeats(st)
    if extra:
        text += f" Further repeated measurements: {extra}."
    if len(single):
        text += " See \"Known limitations\"."
    return text


def _other_repeats(st: Study) -> str:
    """Repeated measurements in series other than the main one, by series and model."""
    parts = []
    for name, c in st.series.items():
        if name == st.canon.series or not len(c.cells):
            continue
        r = c.cells[c.cells["n"] >= 2]
        if len(r):
            parts.append(f"series `{name}` ({', '.join(map(ticked, dict.fromkeys(r['model'])))}, n={_span(r['n'])})")
    return "; ".join(parts)


def _span(ns: pd.Series) -> str:
    lo, hi = int(ns.min()), int(ns.max())
    return str(lo) if lo == hi else f"{lo}–{hi}"


def intro_md(st: Study) -> str:
    """Where the numbers come from, said first: transcribed or measured, and how often."""
    canon, ds = st.canon, st.ds
    recs = ds.records
    lines = []
    if st.transcribed:
        tr = recs[recs["provenance"] == "transcribed"]
        docs = sorted({str(d) for d in tr["source_document"].dropna()}) or ["a published document"]
        lines.append(f"**Transcribed, not measured.** Every figure in this report is transcribed from {_names(docs)}: "
                     f"{len(tr)} run records, one per printed figure or printed failure, each with "
                     f"`provenance: transcribed` and the table it was read from. None was measured by this harness. "
                     f"The tables below are rebuilt from those records and every ratio is recomputed from them. Only "
                     f"what the source's tables hold is reproduced; its prose (interpretations, and figures it "
                     f"quotes from other studies) is not: every sentence here is built from the records.")
        if (recs["provenance"] == "measured").any():
            n_meas = int((recs["provenance"] == "measured").sum())
            lines[-1] += f" {n_meas} further records are measured; the tables say which."
    else:
        invs = sorted(set(recs["invocation_id"].dropna()))
        used = canon.runs
        # Runs a later invocation resumed over: its index names another invocation than the record's.
        later = used["reused_by"].notna() & (used["reused_by"] != used["invocation_id"])
        reused = used[later | used["reused"].map(lambda v: v is True or v == True)]  # noqa: E712
        dev = _names(_devices(canon)) or "an unrecorded device"
        lines.append(f"**Every number in this report was measured by this harness** on {dev}: {len(recs)} run "
                     f"records (`provenance: measured`) from {_n(len(invs), 'sweep invocation')}.")
        if len(reused):
            by = sorted(set(reused["invocation_id"]))
            lines[-1] += (f" {len(reused)} of the {len(used)} runs behind the tables were measured by an earlier "
                          f"invocation ({', '.join(f'`{b}`' for b in by)}) and reused by `--resume` in a later one; "
                          f"each was measured once, by the invocation its record names and this study's sweep "
                          f"index lists, so these too are measured numbers.")
        elif len(used):
            lines[-1] += f" None of the {len(used)} runs behind the tables was reused by `--resume`."
    lines.append("")
    lines.append(_repeat_summary(st))
    return "\n".join(lines) + "\n"


def about_md(st: Study) -> str:
    """"About this dataset": what the report folder holds, with counts from the data."""
    canon, root = st.canon, st.root
    n_pairs = len(_legs(canon)) * (len(_legs(canon)) - 1) // 2
    runs = root / "runs"
    count = {name: sum(1 for _ in runs.rglob(name)) if runs.is_dir() else 0
             for name in ("results.json", "run.jsonl", "run.log")}
    sweeps = len(list((root / "sweeps").glob("*.json"))) if (root / "sweeps").is_dir() else 0
    excluded = (f"{_n(len(canon.exclusions), 'run')} excluded, with reasons" if len(canon.exclusions)
                else "no run excluded")
    rows = [
        ("`README.md`", "this dataset card: a Hugging Face YAML header, then the text of `REPORT.md`, unchanged"),
        ("`REPORT.md`", "the analysis below, as a file"),
        ("`index.html`", "the same report as a web page"),
        ("`CANONICAL.md`", f"the rule, and which run is canonical for each of the {len(canon.cells)} "
                           f"(leg, model, workload) cells; {excluded}"),
        ("`MANIFEST.md`", "runtime stack per leg as the runs recorded it, devices, pins"),
        ("`tables/`", "coverage, throughput, latency and failure attribution as markdown, CSV and Parquet"),
        *([("`compare/`", f"pairwise comparison tables for every pair of legs ({n_pairs}), from the same canonical "
                          f"runs")] if n_pairs else []),
        ("`export/`", f"`canonical.parquet` and `canonical.csv`: the {len(canon.cells)} canonical cells, one row each "
                      f"(this card's default configuration), with `DATA_DICTIONARY.md`"),
        ("figures", "the report's figures, as PNG files beside the report"),
        (f"`{_rel(root)}/runs/`", "the run records: " + ", ".join(
            f"{count[k]} `{k}`{what}" for k, what in (("results.json", ""), ("run.jsonl", " event streams"),
                                                     ("run.log", " (all output)")) if count[k])),
    ]
    if sweeps:
        rows.append((f"`{_rel(root)}/sweeps/`", f"{_n(sweeps, 'sweep index', 'sweep indexes')}: which invocation "
                                                f"measured or reused each run"))
    df = pd.DataFrame(rows, columns=["path", "what it is"])
    desc = str(canon.study.extra.get("description") or "").strip()
    return "\n".join([
        *([f"> {desc}", ">", "> — the study's own description (`study.yaml`)", ""] if desc else []),
        "This page is the report. `README.md`, `REPORT.md` and `index.html` are one render of `index.qmd` over "
        "the study folder, so the three always say the same.",
        "",
        markdown_table(df),
        "",
        f"Every number below is computed from the run records under `{_rel(root)}/` when the report is rendered; "
        "none is typed. If the tables, `compare/` and the records ever disagree, that is a bug.",
    ]) + "\n"


def coverage_md(st: Study) -> str:
    from harness.analyze import tables
    from harness.analyze.failure import attributions_by_model

    canon = st.canon
    t = tables.coverage(canon)
    disp = t.display.copy()
    disp["leg"] = [canon.study.label(x) for x in disp["leg"]]
    lines = [markdown_table(disp), ""]
    legs = _legs(canon)
    data = t.data
    full = [m for m in _models(canon) if all(_passes(canon, leg, m) for leg, _ in legs)]
    if len(legs) >= 2:
        way = {2: "two", 3: "three", 4: "four"}.get(len(legs), str(len(legs)))
        lines.append(f"{len(full)} of {_n(len(_models(canon)), 'model')} {_v(len(full), 'supports', 'support')} a "
                     f"{way}-way comparison.")
    att = attributions_by_model(canon.dataset, series=canon.series)
    for leg, label in legs:
        a = att[att["leg"] == leg]
        missing = a[a["status"] == "missing"]
        pinned = a[a["status"] == "passes only pinned"]
        bits = []
        if len(pinned):
            pins = sorted({p for ps in pinned["pins"] for p in ps})
            bits.append(f"{_n(len(pinned), 'model')} {_v(len(pinned), 'passes', 'pass')} only under a dependency pin "
                        f"({', '.join(f'`{p}`' for p in pins)})")
        if len(missing):
            sigs = missing["signature"].nunique()
            bits.append(f"{_n(len(missing), 'model')} {_v(len(missing), 'fails', 'fail')} "
                        f"({_n(sigs, 'failure signature')})")
        if bits:
            lines.append(f"On {label}, " + " and ".join(bits) + "; see \"Failure attribution\".")
    lines += [""] + [f"_{n}_" for n in t.notes]
    del data
    return "\n".join(lines) + "\n"


def _models(canon: Canonical) -> list[str]:
    order = {m: i for i, m in enumerate(model_order(canon.dataset))}
    return sorted(set(canon.expected["model"]), key=lambda m: (order.get(m, len(order)), m))


def _passes(canon: Canonical, leg: str, model: str) -> bool:
    wanted = set(canon.expected.loc[canon.expected["model"] == model, "workload"])
    c = canon.cells
    have = set(c.loc[(c["leg"] == leg) & (c["model"] == model), "workload"])
    return bool(wanted) and wanted <= have


def headline_md(st: Study) -> str:
    """The findings as bullets, one per step between consecutive legs, then version progress."""
    canon, claims = st.canon, list(st.claims)
    legs = _legs(canon)
    if len(legs) < 2:
        lb = legs[0][1] if legs else "none"
        return (f"This study has one leg ({lb}), so it compares no versions: the figures below are absolute, "
                f"measured on {_names(_devices(canon)) or 'an unrecorded device'}. {_repeat_summary(st)}\n")
    by = {c.id: c for c in claims}
    lines = []
    ref = by.get("reference-flat")
    for i, ((_, a), (_, b)) in enumerate(zip(legs, legs[1:])):
        pid = _pair_id(a, b)
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
        parts.append(_flat_sentence([by[k] for k in (f"flat-{c.lower()}@{pid}" for c in PLAIN_CLASSES) if k in by]))
        lines.append(f"- **{a} → {b}.** " + " ".join(p for p in parts if p))
    prog = [by[k].sentence for k in ("not-monotonic", "regression-repeated", "newest-lowest") if k in by]
    if not by["not-monotonic"].holds:
        prog = [by["not-monotonic"].sentence] + ([by["newest-lowest"].sentence] if "newest-lowest" in by else [])
    lines.append("- " + " ".join(prog))
    lines += ["", _class_note(st), "", _claims_note(st)]
    return "\n".join(lines) + "\n"


def _flat_sentence(cs: list[Claim]) -> str:
    """Classes that are flat in one sentence with their joint range; each other class its own."""
    flat = [c for c in cs if c.holds]
    out = []
    if flat:
        names = [c.evidence["class"] for c in flat]
        vals = [v for c in flat for v in c.evidence["in_band"]]
        notes = "".join(c.evidence["ci_note"] for c in flat) if len(flat) == 1 else ""
        out.append(f"{_names(names)} models are essentially flat ({_range(vals)}{notes}).")
        out[0] = out[0][0].upper() + out[0][1:]
    out += [c.sentence for c in cs if not c.holds]
    return " ".join(out)


def _class_note(st: Study) -> str:
    classes = _class_overrides(st.canon)
    by: dict[str, list[str]] = {}
    for m in _models(st.canon):
        by.setdefault(model_class(m, classes), []).append(m)
    return ("_Model classes, from the model names (study.yaml `model_classes` overrides): "
            + "; ".join(f"{c}: {', '.join(map(ticked, ms))}" for c, ms in by.items())
            + f". A ratio within {st.params.band:.0%} of 1.00x counts as flat; {st.params.jump:.1f}x or more is a "
              f"large jump; {st.params.win:.1f}x or more a win._")


def _claims_note(st: Study) -> str:
    held = sum(c.holds for c in st.claims)
    return (f"_Each sentence above is a claim checked against the data at render time ({held} of "
            f"{len(st.claims)} checks hold; `harness.publish.report.findings`): when the data stops supporting a claim, its "
            f"sentence says what the data shows instead, or, for a claim listed as strict, the render fails._")


def claims_md(st: Study) -> str:
    """Every claim, its check and whether it holds (an appendix)."""
    if not st.claims:
        return "No claim applies to a study of one leg.\n"
    df = pd.DataFrame([{"id": f"`{c.id}`", "check": c.claim, "holds": "yes" if c.holds else "no"} for c in st.claims])
    return markdown_table(df) + "\n"


def throughput_md(st: Study) -> str:
    from harness.analyze import tables

    return tables.throughput(st.canon).markdown(heading=False)


def latency_md(st: Study) -> str:
    from harness.analyze import tables

    return tables.latency(st.canon).markdown(heading=False)


def failures_md(st: Study) -> str:
    from harness.analyze.failure import attributions_by_model, failure_table

    ds, canon = st.ds, st.canon
    ft = failure_table(ds, series=canon.series)
    if not len(ft):
        return "No run of the main series failed, and no model needed a pin to pass.\n"
    att = attributions_by_model(ds, series=canon.series)
    lead = []
    for leg, label in _legs(canon):
        g = ft[ft["leg"] == label]
        if len(g):
            n = len(att[att["leg"] == leg])
            lead.append(f"on {label}, the {_n(n, 'model')} that {_v(n, 'fails', 'fail')} or {_v(n, 'passes', 'pass')} "
                        f"only under a pin {_v(n, 'has', 'have')} {_n(len(g), 'root cause')}")
    text = "; ".join(lead)
    lines = [text[0].upper() + text[1:] + ".", ""] if lead else []
    show = ft[["leg", "root cause", "models", "model names", "error", "fixable?", "evidence"]]
    lines += [markdown_table(show), "",
              "_Built from the records: per leg, the models with no passing run in the main series, or passing only "
              "under a pin, grouped by failure signature (`harness.analyze.failure`). \"pin only\" means the records hold "
              "the passing run under the pin but no failed run without it._"]
    return "\n".join(lines) + "\n"



def _series_kind(r: pd.DataFrame) -> Literal["exit-status", "repeats", "arms"]:
    """What a supporting series is, from its records: exit status only, repeats of one arm, or arms."""
    if not (r["throughput_tok_s"].notna().any() or r["ms_per_token"].notna().any()):
        return "exit-status"
    return "repeats" if set(r["arm"]) == {"default"} else "arms"


def _supporting(st: Study) -> list[tuple[str, str, Any]]:
    """(series, kind, the diagnostic or the UserError that says why there is none) per supporting series."""
    from harness.investigate import diagnostics as dx

    recs = st.ds.records
    out: list[tuple[str, str, Any]] = []
    for name in sorted(set(recs["series"]) - {st.canon.series}):
        r = recs[recs["series"] == name]
        kind = _series_kind(r)
        try:
            if kind == "exit-status":
                base = "baseline" if "baseline" in set(r["arm"]) else str(r["arm"].iloc[0])
                out.append((name, kind, dx.falsification_matrix(st.ds, series=name, baseline=base)))
            elif kind == "repeats":
                out.append((name, kind, dx.repeat_study(st.ds, series=name)))
            else:
                out.append((name, kind, dx.arm_table(st.ds, series=name)))
        except UserError as e:
            out.append((name, kind, e))
    return out


def supporting_md(st: Study) -> str:
    """Every series besides the main one, through the diagnostic of its shape (`harness.investigate.diagnostics`,
    the functions the notebooks call): a single-variable control for exit-status series, a repeat
    study for repeats of one arm, an arm table for forced arms."""
    from harness.investigate import diagnostics as dx

    out = []
    for name, kind, d in _supporting(st):
        r = st.ds.records[st.ds.records["series"] == name]
        src = sorted({str(x) for x in r["source_table"].dropna()})
        out += [f"### Series `{name}`", ""]
        if src:
            out += [f"_Transcribed from: {'; '.join(src)}._", ""]
        if isinstance(d, UserError):
            out += [f"_No {kind} diagnostic for this series: {d}. Its runs are in `CANONICAL.md`'s sources and "
                    f"the run records._", ""]
            continue
        if kind == "exit-status":
            tab = d.outcomes.reset_index().rename(columns={"index": "arm"})
            tab["arm"] = [f"`{a}`" + ("" if row.same_leg else f" ({st.canon.study.label(row.leg)})")
                          for a, row in zip(tab["arm"], d.rows.itertuples())]
            out += [markdown_table(tab.fillna(MISSING)), "", dx.single_variable_conclusion(d).text, ""]
        elif kind == "repeats":
            out += [markdown_table(d.display), ""] + [f"- {x}" for x in dx.repeat_conclusion(d)] + [""]
            out += [f"_{n}_" for n in d.notes] + [""]
        else:
            out += [markdown_table(d.display), ""] + [f"- {x}" for x in dx.arm_conclusion(d)] + [""]
            out += [f"_{n}_" for n in d.notes] + [""]
    return "\n".join(out) + "\n" if out else "The study holds no series besides the main one.\n"


def stack_md(st: Study) -> str:
    from harness.analyze.manifest import NOT_RECORDED, devices_table, stack_table, versions

    canon = st.canon
    lines = ["A \"version comparison\" is a comparison of whole runtime stacks, so this table travels with the "
             "numbers. Counted over the canonical runs, as each run recorded its stack from inside its leg.", "",
             markdown_table(stack_table(canon)), "", markdown_table(devices_table(canon)), ""]
    v = versions(canon)
    order = {m: i for i, m in enumerate(model_order(canon.dataset))}
    for leg, label in _legs(canon):
        g = v[(v["leg"] == leg) & (v["version"] != NOT_RECORDED)]
        for pkg, h in g.groupby("package", sort=False):
            if len(h) < 2:
                continue
            parts = []
            for x in h.sort_values(["pinned", "models"], ascending=[True, False]).itertuples():
                names = sorted(x.model_names, key=lambda m: (order.get(m, len(order)), m))
                who = ticked(names[0]) if len(names) == 1 else _n(len(names), "model")
                parts.append(f"{x.version} for {who}{' (pinned)' if x.pinned else ''}")
            lines.append(f"- Leg {label} was measured under {len(h)} versions of {pkg}: {_names(parts)}. Do not "
                         f"report a single {pkg} version for this leg.")
    return "\n".join(lines) + "\n"


def diagnostics_intro_md(st: Study) -> str:
    nbs = sorted(paths.NOTEBOOKS.glob("*.ipynb")) if paths.NOTEBOOKS.is_dir() else []
    text = ("The figures here are drawn from the same canonical runs as the tables: the ratio of each step with its "
            "95% interval, the coverage of every (model, leg), and the dispersion of every repeated measurement.")
    if nbs:
        text += (" The diagnostic notebooks (" + ", ".join(f"`notebooks/{p.name}`" for p in nbs)
                 + ") take the study as a parameter and go further.")
    return text + "\n"


def crosscheck_section_md(st: Study) -> str:
    from harness.investigate.crosscheck import crosscheck_md
    from harness.investigate.crosscheck import load as load_crosscheck

    summary = load_crosscheck(st.root)
    if not summary or not summary.get("rows"):
        return ""
    rows = summary["rows"]
    lead = []
    for r in rows:
        if r["ratio"] is None:
            continue
        ci = f" [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" if r["ci_low"] is not None else " (single pass)"
        lead.append(f"{ticked(r['model'])} {r['workload']} on {st.canon.study.label(r['leg'])}: harness ÷ vLLM = "
                    f"{r['ratio']:.3f}{ci}, "
                    f"{r['verdict']}")
    return ("### Cross-check against vLLM's own throughput benchmark\n\n"
            "Each harness run had a run of vLLM's own throughput benchmark beside it, in the same leg env, on the "
            "same workload, repetition outermost. " + "; ".join(lead) + ".\n\n" + crosscheck_md(summary))


def side_records_md(st: Study) -> str:
    """Bisect and dependency-window records whose legs belong to this study."""
    from harness.investigate import bisect, window

    legs = {n for n, _ in _legs(st.canon)}
    out = []
    root = st.root.parent
    try:
        bis = bisect.read_records(root / "bisect") if (root / "bisect").is_dir() else []
        win = window.read_records(root / "window") if (root / "window").is_dir() else []
    except UserError as e:
        return f"_A bisect or window record could not be read: {e}_\n"
    for rec in bis:
        if {rec.inputs.good, rec.inputs.bad} <= legs:
            out.append(bisect.bisect_section_md(rec))
    for rec in win:
        if rec.leg in legs:
            out.append(window.window_section_md(rec))
    return "\n".join(out)


def limitations_md(st: Study) -> str:
    from harness.analyze.manifest import stack_table

    canon, ds = st.canon, st.ds
    items = []
    cells = canon.cells
    if len(cells):
        single = cells[cells["n"] == 1]
        if len(single):
            models = list(dict.fromkeys(cells["model"]))
            unrepeated = [m for m in models if (cells.loc[cells["model"] == m, "n"] == 1).all()]
            txt = (f"**Little dispersion data.** {len(single)} of the {len(cells)} canonical figures "
                   f"{_v(len(single), 'is', 'are')} one timed pass; {len(unrepeated)} of {_n(len(models), 'model')} "
                   f"{_v(len(unrepeated), 'has', 'have')} no repeat in the main series.")
            extra = _other_repeats(st)
            if extra:
                txt += f" Repeats outside it: {extra}."
            txt += (f" A single-pass ratio has no interval, so every conclusion within {st.params.band:.0%} of 1.00x "
                    f"reads \"no difference detected\", not \"no difference\".")
            items.append(txt)
        else:
            worst = max(((spread(s) or 0.0, m, w, lg) for s, m, w, lg in
                         zip(cells["samples"], cells["model"], cells["workload"], cells["leg_label"])), default=None)
            if worst:
                sp, m, w, lg = worst
                items.append(f"**Dispersion.** Every canonical figure is the median of {_span(cells['n'])} "
                             f"repeats; the largest repeat spread is {sp:.1%} ({ticked(m)} {w} on {lg}). "
                             f"A ratio whose interval contains 1.00x reads \"no difference detected\", not \"no "
                             f"difference\".")
    devs = _devices(canon)
    if devs:
        items.append(f"**{_names(devs)} only.** Absolute numbers are specific to this device and runtime; do not put "
                     f"them in the same table as results from other hardware.")
    st_t = stack_table(canon)
    mixed = st_t[st_t["homogeneous"] != "yes"]
    if len(mixed):
        items.append("**Legs that are not internally homogeneous.** " + "; ".join(
            f"{r.leg}: {r.homogeneous.removeprefix('no: ')}" for r in mixed.itertuples())
            + " (see \"Runtime stack per leg\"). The difference must be disclosed with the numbers.")
    legs = _legs(canon)
    partial = []
    for m in _models(canon):
        on = [lb for leg, lb in legs if _passes(canon, leg, m)]
        if 0 < len(on) < len(legs):
            partial.append(f"{ticked(m)} ({', '.join(on)})")
    if partial:
        items.append(f"**Partial comparisons.** {_n(len(partial), 'model')} have data on fewer than {_all(len(legs))}: "
                     + ", ".join(partial) + "; they carry no comparison across every leg.")
    if len(canon.exclusions):
        reasons = canon.exclusions["reason"].str.split(":").str[0].value_counts()
        items.append(f"**Excluded runs.** {_n(len(canon.exclusions), 'run')} of the main series "
                     f"{_v(len(canon.exclusions), 'is', 'are')} not canonical ("
                     + ", ".join(f"{r}: {n}" for r, n in reasons.items()) + "); `CANONICAL.md` lists each.")
    if st.transcribed:
        items.append("**Rounded inputs.** The transcribed figures are rounded as printed, so a ratio recomputed from "
                     "them can differ from the source's own in the last digit.")
    if ds.problems:
        items.append(f"**Unreadable files.** {_n(len(ds.problems), 'file')} could not be used and are left out: "
                     + "; ".join(f"`{_rel(Path(str(p.path)))}` ({p.what})" for p in ds.problems[:5])
                     + (" …" if len(ds.problems) > 5 else "") + ".")
    return "\n".join(f"- {x}" for x in items) + "\n"


def sources_md(st: Study) -> str:
    from harness import __version__

    rel = _rel(st.root)
    return "\n".join([
        f"The tables are generated from `{rel}/` by `harness.analyze.tables` from the canonical runs; which run is canonical "
        f"for each cell, and why, is in `CANONICAL.md`. Runs of the other series are supporting evidence and are not "
        f"folded into the tables. Rendered by vllm-harness {__version__}:",
        "",
        "```sh",
        f"python -m harness report {rel}",
        "```",
    ]) + "\n"


# --- figures -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Png:
    """A rendered figure; Jupyter shows it as image/png (so do Quarto and the kernel render)."""

    data: bytes

    def _repr_png_(self) -> bytes:
        return self.data


@dataclass(frozen=True)
class Note:
    """Markdown in place of a figure that has nothing to show."""

    text: str

    def _repr_markdown_(self) -> str:
        return self.text


def _png(fig: Any) -> Png:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return Png(buf.getvalue())


def show(fig: Any) -> Png | Note:
    """A matplotlib figure (from `harness.publish.figures` or here) as the cell's one output."""
    if fig is None:
        return Note("_Nothing to show._")
    if isinstance(fig, (list, tuple)):
        raise TypeError("show() takes one figure; show_all() several")
    return fig if isinstance(fig, (Png, Note)) else _png(fig)


def show_all(figs: Sequence[Any]) -> None:
    """Several figures as one cell's outputs (Quarto makes them sub-figures)."""
    from IPython.display import display

    for f in figs:
        display(show(f))


def ratio_figure(st: Study) -> Png | Note:
    """Per step between consecutive legs, each (model, workload)'s ratio with its 95% interval."""
    from harness.investigate import diagnostics as dx
    from harness.publish import figures

    if len(_legs(st.canon)) < 2:
        return Note("_One leg only: there is no ratio to plot._")
    return show(figures.ratio_dots(dx.ratio_frame(st.canon)))


def coverage_figure(st: Study) -> Png | Note:
    from harness.investigate import diagnostics as dx
    from harness.publish import figures

    return show(figures.coverage_heatmap(dx.coverage_frame(st.ds, series=st.canon.series),
                                         provenance=st.canon.cells["provenance"]))


def dispersion_figure(st: Study) -> Png | Note:
    """Every repeat of every series, as its deviation from its cell's median."""
    from harness.investigate import diagnostics as dx
    from harness.publish import figures

    return show(figures.dispersion_strip(dx.samples_frame(list(st.series.values()))))


def series_figures(st: Study) -> list[Png | Note]:
    """One figure per supporting series, the one its notebook draws."""
    from harness.publish import figures

    out: list[Png | Note] = []
    for name, kind, d in _supporting(st):
        if isinstance(d, UserError):
            continue
        if kind == "exit-status":
            out.append(show(figures.falsification_heatmap(d.passed, d.outcomes, title=f"Series {name}",
                                                          provenance=d.provenance)))
        elif kind == "repeats":
            out.append(show(figures.repeat_strip(d.samples, title=f"Series {name}: {d.model}")))
        else:
            out.append(show(figures.arm_bars(d.table, title=f"Series {name}: {d.model} {d.workload}")))
    return out


# --- the dataset card ----------------------------------------------------------------------------

CARD_CONFIGS: tuple[tuple[str, str], ...] = (
    ("canonical", "export/canonical.parquet"),
    ("throughput", "tables/throughput.parquet"),
    ("latency", "tables/latency.parquet"),
    ("coverage", "tables/coverage.parquet"),
    ("failures", "tables/failures.parquet"),
)


def card_header(canon: Canonical, out_dir: Path | None = None) -> str:
    """The Hugging Face dataset-card YAML header; `configs` names the Parquet files that exist."""
    s = canon.study
    transcribed = "transcribed" in canon.provenances or s.provenance == "transcribed"
    rows = len(canon.cells)
    size = "n<1K" if rows < 1000 else "1K<n<10K" if rows < 10_000 else "10K<n<100K"
    configs = []
    for name, path in CARD_CONFIGS:
        if out_dir is not None and not (out_dir / path).exists():
            continue
        c: dict[str, Any] = {"config_name": name, "data_files": [{"split": "train", "path": path}]}
        if name == "canonical":
            c["default"] = True
        configs.append(c)
    meta = {
        "license": str(s.extra.get("license", "apache-2.0")),
        "pretty_name": s.title or s.name,
        "tags": ["benchmark", "vllm", "llm-inference", "throughput", "latency",
                 "transcribed" if transcribed else "measured"],
        "size_categories": [size],
        "configs": configs,
    }
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000) + "---\n"


__all__ = [
    "Claim", "ClaimFailed", "ClaimParams", "QMD", "RenderError", "RenderResult", "Study", "card_body", "card_header",
    "card_text", "findings", "load_study", "render", "steps",
]
