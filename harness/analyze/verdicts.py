"""Every cell's verdict, computed once per study: the one object the answer, the tables (Markdown, CSV,
Parquet, export), the figures, the dataset card, the site, `compare studies` and `make main`'s last lines
read. None of them decides or words a verdict of its own.

A cell is one (workload kind, model, workload) measured on two legs. Its test is the significance
module's rule for the cell's design (`harness.analyze.significance`): the nested paired rule where both
legs hold paired passes (units: engine blocks, or pass pairs where the study declares an `engine_sd`
bound and the cell's blocks agree with it), Welch's t on log values over the repeats otherwise (units:
repeats, one run's figure each); a serve workload with a capacity search is judged by its capacity at the
SLO, and one that study.yaml lists under `half_pass` by its half-pass rate per server
(harness.analyze.halfpass: units are servers). Cells are then decided together, per **family**, by Benjamini–Hochberg at the study's level, the
difference tests and the equivalence tests apart (`significance.decide_family`):

- `steps`: every tested cell of every step between consecutive legs, every kind: the study's answer.
  Every view of a step reads this family's verdicts.
- `other pairs`: the cells of leg pairs that are not steps (a three-leg study's first and last leg),
  one family of their own, shown only in `compare/`.

So a cell has one verdict wherever it is shown, and each view can say which rule and family decided it
(`CellVerdict.rule_text`, `.family_text`) and why a cell that would be decided alone is not (`.text`).
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from functools import cached_property

from harness import workloads
from harness.analyze import rounding
from harness.analyze.canonical import Canonical
from harness.analyze.order import leg_pairs, order_frame
from harness.analyze.significance import (ALPHA, MARGIN_DEFAULT, METHOD, NESTED_METHOD, TABLE_RULE,
                                          decide_family, default_margin, look_alpha)
from harness.analyze.stats import Ratio, band_side, nested_ratio, ratio, ratio_label
from harness.workloads.base import Metric

STEPS = "steps"
OTHER = "other pairs"
CAPACITY_NOTE = "capacity at the SLO (req/s), not throughput"
HALF_PASS_NOTE = "half-pass rate at the SLO per server (req/s), not throughput"
# The classes a view colours or counts a cell by, in the order the answer counts them.
CLASSES = ("faster", "slower", "equivalent", "undecided", "single pass", "missing")
UNIT_WORDS = {"repeat": ("repeat per side", "repeats per side"), "server": ("server per side", "servers per side"),
              "pair": ("pass pair", "pass pairs"),
              "engine block": ("engine block", "engine blocks")}


# --- the study's declared parameters ------------------------------------------------------------------

def study_margin(canon: Canonical) -> tuple[float, str]:
    """The study's equivalence margin and where it comes from: study.yaml's `margin`, else the
    default for the device kind its canonical runs were measured on."""
    declared = canon.study.extra.get("margin")
    if declared is not None:
        return float(declared), "study.yaml"
    devices = canon.dataset.records.get("device")
    device = next((str(d) for d in devices.dropna()), None) if devices is not None else None
    kind = "cpu" if default_margin(device) == MARGIN_DEFAULT["cpu"] else "gpu"
    return default_margin(device), f"the {kind.upper()} default"


def study_looks(canon: Canonical) -> int:
    """How many looks the study's sweep planned (`looks` in study.yaml, written by `sweep --until-decided`;
    1 for a fixed design)."""
    return int(canon.study.extra.get("looks") or 1)


def study_alpha(canon: Canonical) -> float:
    """The level the study's cells are tested at: alpha / looks (significance.look_alpha)."""
    return look_alpha(study_looks(canon))


# --- one cell's own test ------------------------------------------------------------------------------

def cell_ratio(canon: Canonical, a: dict | None, b: dict | None, metric: Metric, *,
               margin: float | None = None) -> Ratio:
    """The cell's own test, before its family decides it: the paired design's nested rule where both
    canonical cells (old, new) hold paired passes, else Welch's rule on their repeats, with the study's
    margin and level. Views never call this: they read `study_verdicts`."""
    if margin is None:
        margin, _ = study_margin(canon)
    engine_sd = canon.study.extra.get("engine_sd")
    sa, sb = (tuple(a["samples"]) if a is not None else ()), (tuple(b["samples"]) if b is not None else ())
    pa, pb = (a.get("pairs") if a is not None else None), (b.get("pairs") if b is not None else None)
    alpha = study_alpha(canon)
    if pa and pb:
        return paired_cell(pa, pb, metric=metric, margin=margin, engine_sd=engine_sd, alpha=alpha)
    return ratio(sa, sb, higher_is_better=metric.higher_is_better, margin=margin, confidence=1 - alpha)


def paired_cell(old: dict, new: dict, *, metric: Metric, margin: float, engine_sd: float | None,
                alpha: float = ALPHA) -> Ratio:
    """Two legs' paired passes, matched by (engine block, round); a pass without its partner is left
    out (the pair is incomplete). The nested rule (`stats.nested_ratio`) decides; its point value is
    the geometric mean pair ratio rather than the ratio of medians."""
    blocks: dict[int, list[tuple[float, float]]] = {}
    for key in sorted(set(old) & set(new)):
        blocks.setdefault(key[0], []).append((old[key], new[key]))
    return nested_ratio(list(blocks.values()), higher_is_better=metric.higher_is_better, margin=margin,
                        engine_sd=None if engine_sd is None else float(engine_sd), confidence=1 - alpha)


# --- the verdict object ---------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class CellVerdict:
    """One cell's verdict, as every view prints it. `ratio` above 1 means the newer leg (`new`) is
    faster (throughput new/old, latency old/new, capacity new/old)."""

    kind: str
    model: str
    workload: str
    old: str
    new: str
    old_label: str
    new_label: str
    family: str                      # STEPS or OTHER
    family_size: int                 # tested cells in the family
    verdict: str                     # the family's verdict: one of significance.Verdict
    alone: str                       # the cell's own test's verdict, before the family decided it
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    interval: str | None = None      # "95% t" (the rule's), "rounding" (transcribed single passes), None
    level: float = 1 - ALPHA         # the interval's confidence
    rule: str = METHOD               # the significance module's method name
    unit: str = "repeat"             # what `units` counts: "repeat" (per side), "pair", "engine block"
    units: int = 0
    n_old: int = 0                   # repeats per side (Welch), pass pairs on both sides (nested)
    n_new: int = 0
    blocks: int | None = None        # nested rule: engine blocks behind the pairs
    p: float | None = None           # the entering p-value (difference or equivalence, on alpha's scale)
    p_adj: float | None = None       # its Benjamini–Hochberg adjusted p-value in the family
    decided_by: str | None = None    # "difference" | "equivalence" | None
    margin: float | None = None
    alpha: float = ALPHA
    needs: int | None = None         # units that would likely decide an undecided / too-few cell
    capacity: bool = False           # judged by capacity at the SLO: a capacity search, or half-pass rates
    half_pass: bool = False          # ... the half-pass rate per server of a steady grid (harness.analyze.halfpass)
    resolution: float = 0.0          # the values' relative resolution (a capacity search's last bracket)
    printed: float | None = None     # transcribed: the ratio the source printed (the ratio shown)
    recomputed: float | None = None  # transcribed: the ratio of the rounded figures, where printed is shown
    printed_disagrees: bool = False
    test: Ratio | None = field(default=None, compare=False, repr=False)

    @property
    def step(self) -> str:
        return f"{self.old_label} → {self.new_label}"

    @property
    def cls(self) -> str:
        """The class a view colours or counts the cell by: one of CLASSES. Only a test decides faster,
        slower or equivalent; a single pass per side is its own class whatever its ratio."""
        if self.verdict == "missing":
            return "missing"
        if self.verdict in ("faster", "slower", "equivalent", "single pass"):
            return self.verdict
        return "undecided"

    def moved(self, band: float) -> bool:
        """Whether the cell moved: decided faster or slower, missing, or a single pass per side whose
        ratio lies outside 1 ± `band` (no test: only the flat band reads it)."""
        if self.cls in ("faster", "slower", "missing"):
            return True
        return self.cls == "single pass" and self.ratio is not None and band_side(self.ratio, band) != "within"

    @property
    def ratio_text(self) -> str:
        """"1.07x [1.03, 1.11]": the ratio and the interval beside it ("—" without a ratio)."""
        return ratio_label(self.ratio, self.low, self.high)

    @property
    def table_ratio(self) -> float | None:
        """The ratio of the two figures a table prints (for transcribed figures, of the rounded ones; the
        answer shows the source's printed ratio, `ratio`, and names this one beside it)."""
        return self.recomputed if self.recomputed is not None else self.ratio

    @property
    def confidence(self) -> bool:
        """Whether the interval is the rule's confidence interval (not a rounding range)."""
        return self.low is not None and self.interval not in (None, "rounding")

    @property
    def interval_text(self) -> str:
        return f"[{self.low:.2f}, {self.high:.2f}]" if self.low is not None and self.high is not None else ""

    @property
    def units_text(self) -> str:
        """The units the rule counted: "4 engine blocks (12 pass pairs)", "3/3 repeats", "1/1 pass"."""
        if self.rule == NESTED_METHOD:
            pairs = f"{self.n_old} pass pair" + ("" if self.n_old == 1 else "s")
            if self.unit == "pair":
                return f"{pairs} in {self.blocks} engine blocks"
            b = self.blocks or 0
            return f"{b} engine block{'' if b == 1 else 's'} ({pairs})"
        return f"{self.n_old}/{self.n_new} {'servers' if self.half_pass else 'repeats'}"

    @property
    def rule_text(self) -> str:
        """Which rule decided the cell, over which units, with which interval: words a reader can check."""
        what = ("half-pass rates at the SLO (one per server, from its fitted log p99 against log load), "
                if self.half_pass else "capacities at the SLO, " if self.capacity else "")
        if self.resolution > 0:
            what += f"the resolution of the searches ({self.resolution:.1%}) added to the interval, "
        if self.interval == "rounding":
            return "single printed figure per side; the interval is the range the printed rounding allows"
        if self.rule == NESTED_METHOD:
            units = ("pass pairs as units (the study's engine_sd bound added)" if self.unit == "pair"
                     else "engine-block means as units")
            return f"{NESTED_METHOD}: {self.units_text}, {units}; {self.level:.1%} interval".replace(".0%", "%")
        return f"{METHOD} over {what}{self.units_text}; {self.level:.1%} interval".replace(".0%", "%")

    @property
    def family_text(self) -> str:
        where = "the study's steps" if self.family == STEPS else "the study's other leg pairs"
        return (f"{TABLE_RULE} at α = {self.alpha:.4g} over {self.family_size} tested cells of {where} "
                "(difference and equivalence tests apart)")

    @property
    def within_resolution(self) -> bool:
        """A gap no wider than the values' resolution: no number of repeats decides it, a finer search would."""
        return self.resolution > 0 and self.ratio is not None and abs(math.log(self.ratio)) <= math.log1p(self.resolution)

    @property
    def text(self) -> str:
        """The verdict in words: the one every view prints."""
        v = self.verdict
        if v == "missing":
            return "missing"
        if v == "equivalent":
            return f"equivalent within ±{self.margin:.0%}" if self.margin is not None else "equivalent"
        if v == "too few repeats":
            unit = UNIT_WORDS.get(self.unit, (self.unit, self.unit))[1]
            if self.rule == NESTED_METHOD and self.blocks is not None and self.blocks < 2:
                unit = "engine blocks"
            if self.within_resolution:
                return (f"too few repeats, and the gap is within the resolution of the searches ({self.resolution:.1%}): "
                        "a finer rel_tol would decide it")
            return f"too few repeats (needs ≥ {self.needs} {unit})" if self.needs else "too few repeats"
        if v == "undecided":
            if self.alone in ("faster", "slower", "equivalent"):
                alone = self.alone + (f" within ±{self.margin:.0%}" if self.alone == "equivalent" and self.margin
                                      else "")
                p = f", p = {self.p:.3g}, adjusted {self.p_adj:.3g} > α" if self.p is not None and self.p_adj else ""
                return f"undecided across the {self.family_size} cells of its family ({alone} alone{p})"
            if self.needs:
                return f"undecided (~{self.needs} {UNIT_WORDS.get(self.unit, (self.unit, self.unit))[1]} would likely decide)"
            if self.within_resolution:
                return (f"undecided (the searches resolve {self.resolution:.1%}: no number of repeats decides "
                        "a gap that small; a finer rel_tol would)")
            return "undecided"
        return v


@dataclass(frozen=True, kw_only=True)
class StudyVerdicts:
    """The verdicts of one canonical selection (a study's series and arm), computed once."""

    canon: Canonical
    cells: tuple[CellVerdict, ...]          # the steps family (and every missing step cell), table order
    margin: float
    margin_source: str
    alpha: float
    # (model, workload) -> leg -> the capacities its searches measured, and each cell's search resolution:
    # the samples the capacity cells were decided on, which the capacity table prints (never recomputed).
    capacities: dict[tuple[str, str], dict[str, list[float]]] = field(default_factory=dict, compare=False)
    resolutions: dict[tuple[str, str], float] = field(default_factory=dict, compare=False)
    # The (model, workload) cells judged by half-pass rates; their samples are in `capacities` too.
    half_pass: frozenset[tuple[str, str]] = frozenset()

    def get(self, kind: str, model: str, workload: str, old: str, new: str) -> CellVerdict | None:
        """The cell of (kind, model, workload) between legs old and new, from the family it belongs to."""
        return self._index.get((kind, model, workload, old, new)) or self._other.get((kind, model, workload, old, new))

    def step(self, old: str, new: str) -> list[CellVerdict]:
        return [c for c in self.cells if (c.old, c.new) == (old, new)]

    @cached_property
    def _index(self) -> dict[tuple[str, str, str, str, str], CellVerdict]:
        return {(c.kind, c.model, c.workload, c.old, c.new): c for c in self.cells}

    @cached_property
    def _other(self) -> dict[tuple[str, str, str, str, str], CellVerdict]:
        legs = [n for n, _ in leg_pairs(self.canon)]
        steps = set(zip(legs, legs[1:]))
        pairs = [(a, b) for i, a in enumerate(legs) for b in legs[i + 1:] if (a, b) not in steps]
        cells = _family(self.canon, pairs, OTHER, self.margin, self.alpha, self.capacities, self.resolutions,
                        self.half_pass)
        return {(c.kind, c.model, c.workload, c.old, c.new): c for c in cells}


def _rows(canon: Canonical, kind: str) -> list[tuple[str, str]]:
    exp = canon.expected[canon.expected["kind"] == kind]
    rows = order_frame(canon, exp.drop_duplicates(["model", "workload"])[["model", "workload"]])
    return list(zip(rows["model"], rows["workload"]))


def _family(canon: Canonical, pairs: list[tuple[str, str]], family: str, margin: float, alpha: float,
            capacities: dict[tuple[str, str], dict[str, list[float]]],
            resolution: dict[tuple[str, str], float],
            half_pass: frozenset[tuple[str, str]] = frozenset()) -> list[CellVerdict]:
    labels = dict(leg_pairs(canon))
    cells = {(c["leg"], c["model"], c["workload"]): c for c in canon.cells.to_dict("records")}
    transcribed_study = canon.study.provenance == "transcribed"
    pending: list[dict] = []
    for kind in workloads.KINDS:
        metric = workloads.metric_of(kind)
        rows = _rows(canon, kind)
        if not rows:
            continue
        printed = (rounding.printed_ratios(canon.dataset.root, kind, [labels[n] for n in labels])
                   if transcribed_study or "transcribed" in set(canon.runs.get("provenance", ())) else {})
        for model, workload in rows:
            for old, new in pairs:
                a, b = cells.get((old, model, workload)), cells.get((new, model, workload))
                base = dict(kind=kind, model=model, workload=workload, old=old, new=new, old_label=labels.get(old, old),
                            new_label=labels.get(new, new), family=family, margin=margin, alpha=alpha)
                if a is None or b is None:
                    pending.append(dict(base, verdict="missing", alone="missing"))
                    continue
                caps = capacities.get((model, workload))
                if caps is not None:
                    # A capacity search answers with the load held at the SLO; the serve kind's own metric
                    # (peak throughput over the probes, failing ones included) is not the answer.
                    rt = ratio(caps.get(old, []), caps.get(new, []), higher_is_better=True, margin=margin,
                               confidence=1 - alpha, resolution=resolution.get((model, workload), 0.0))
                else:
                    rt = cell_ratio(canon, a, b, metric, margin=margin)
                row = dict(base, verdict=rt.verdict, alone=rt.verdict, ratio=rt.value, low=rt.low, high=rt.high,
                           interval=f"{1 - alpha:.1%} t".replace(".0%", "%") if rt.low is not None else None,
                           level=1 - alpha, rule=rt.method, n_old=rt.n_old, n_new=rt.n_new,
                           unit="server" if (model, workload) in half_pass else rt.unit,
                           needs=rt.needs, capacity=caps is not None, test=rt,
                           half_pass=(model, workload) in half_pass,
                           resolution=resolution.get((model, workload), 0.0) if caps is not None else 0.0)
                row["units"] = rt.test.n if rt.test is not None else min(rt.n_old, rt.n_new)
                if rt.method == NESTED_METHOD:
                    row["blocks"] = len({k[0] for k in set(a["pairs"]) & set(b["pairs"])})
                transcribed = "transcribed" in (a.get("provenance"), b.get("provenance"))
                if transcribed and rt.value is not None and rt.n_old == 1 and rt.n_new == 1:
                    row["low"], row["high"] = rounding.ratio_bounds(float(a["value"]), float(b["value"]), metric)
                    row["interval"] = "rounding"
                    pv = printed.get((model, workload, labels.get(old, old), labels.get(new, new)))
                    if pv is not None:
                        # The source's ratio from its unrounded figures is the one shown; the ratio of the
                        # rounded figures stands beside it, never in its place.
                        row["printed_disagrees"] = rounding.Printed(value=pv, low=row["low"], high=row["high"]).disagrees
                        row["printed"], row["recomputed"], row["ratio"] = pv, rt.value, pv
                pending.append(row)
    decided = decide_family([r.get("test").test if r.get("test") is not None else None for r in pending], alpha=alpha)
    size = sum(d.p_adj is not None for d in decided)
    out = []
    for r, d in zip(pending, decided):
        if d.verdict is not None and r["verdict"] != "missing":
            r = dict(r, verdict=d.verdict, p=d.p, p_adj=d.p_adj, decided_by=d.by)
        out.append(CellVerdict(**r, family_size=size))
    return out


# One computation per canonical selection: the report's cells, the tables and the figures of one
# invocation all ask for the same object (a Canonical holds frames and is not hashable: keyed by id,
# the object kept alive beside its verdicts so that the id cannot be reused).
_CACHE: dict[int, tuple[Canonical, StudyVerdicts]] = {}
_CACHE_MAX = 16


def study_verdicts(canon: Canonical) -> StudyVerdicts:
    """Every step cell of the study decided together (the `steps` family); other leg pairs on demand."""
    hit = _CACHE.get(id(canon))
    if hit is not None and hit[0] is canon:
        return hit[1]
    margin, source = study_margin(canon)
    alpha = study_alpha(canon)
    legs = [n for n, _ in leg_pairs(canon)]
    from harness.analyze import capacity as acap

    found = acap.searches(canon)
    capacities, resolutions = acap.by_leg(found), acap.resolutions(found)
    half = half_pass_rates(canon)
    capacities |= {k: v for k, v in half.items() if k not in capacities}   # a search's capacity comes first
    hp_cells = frozenset(k for k in half if k not in resolutions)
    cells = _family(canon, list(zip(legs, legs[1:])), STEPS, margin, alpha, capacities, resolutions, hp_cells)
    sv = StudyVerdicts(canon=canon, cells=tuple(cells), margin=margin, margin_source=source, alpha=alpha,
                       capacities=capacities, resolutions=resolutions, half_pass=hp_cells)
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[id(canon)] = (canon, sv)
    return sv


def half_pass_rates(canon: Canonical) -> dict[tuple[str, str], dict[str, list[float]]]:
    """(model, workload) -> leg -> its servers' measured half-pass rates, for the serve workloads
    study.yaml lists under `half_pass` (none listed: empty)."""
    names = set(canon.study.extra.get("half_pass") or [])
    if not names:
        return {}
    from harness.analyze import halfpass, serve

    pts = serve.points(canon)
    if pts.empty:
        return {}
    cells = {(m, w) for m, w in zip(pts["model"], pts["workload"]) if w in names}
    return halfpass.by_leg(halfpass.per_server(pts, cells))


def counts(cells: list[CellVerdict] | tuple[CellVerdict, ...]) -> dict[str, int]:
    """Cells per class (CLASSES order)."""
    return {k: sum(c.cls == k for c in cells) for k in CLASSES}


def step_sentence(cells: list[CellVerdict]) -> str:
    """"faster on 2, slower on 0, equivalent on 1, undecided on 1 of 4 (model, workload) cells": the
    counts every summary of a step prints (faster and slower always named)."""
    n = counts(cells)
    parts = [f"{k} on {v}" for k, v in n.items() if v or k in ("faster", "slower")]
    total = len(cells)
    return ", ".join(parts) + f" of {total} (model, workload) cell" + ("" if total == 1 else "s")


def lines(sv: StudyVerdicts) -> list[str]:
    """One line per step cell and one per step, as `make main` prints them last."""
    out = []
    for old, new in dict.fromkeys((c.old, c.new) for c in sv.cells):
        cs = sv.step(old, new)
        out.append(f"{cs[0].step}: {step_sentence(cs)}.")
        for c in cs:
            out.append(f"  {c.model} · {c.workload} ({c.kind}): {c.ratio_text} — {c.text}"
                       + (f" [{c.rule_text}]" if c.ratio is not None else ""))
        if cs and cs[0].family_size:
            out.append(f"  family: {cs[0].family_text}")
    return out


# The export's verdicts table: one row per step cell, each column one field of the object.
FRAME_COLUMNS: dict[str, str] = {
    "kind": "workload kind", "model": "model", "workload": "workload", "old": "older leg", "new": "newer leg",
    "step": "the step, by leg labels", "ratio": "above 1: the newer leg is faster (throughput new/old, latency old/new)",
    "low": "the interval's lower end", "high": "its upper end",
    "interval": "\"95% t\": the rule's interval; \"rounding\": the range the printed rounding allows",
    "verdict": "the family's verdict: faster, slower, equivalent, undecided, too few repeats, single pass, missing",
    "verdict_text": "the verdict as every view prints it", "alone": "the cell's own test's verdict, before its family",
    "rule": "the rule, its units and interval, in words", "unit": "what units counts", "units": "units behind the test",
    "blocks": "engine blocks (paired cells)", "p": "the entering p-value (on α's scale)",
    "p_adjusted": "its Benjamini–Hochberg adjusted p-value in the family",
    "decided_by": "difference or equivalence", "family": "the family of cells decided together",
    "needs": "units that would likely decide an undecided cell",
}


def frame(sv: StudyVerdicts):  # -> pd.DataFrame (pandas imported lazily: the CLI start should not pay for it)
    import pandas as pd

    return pd.DataFrame([{"kind": c.kind, "model": c.model, "workload": c.workload, "old": c.old, "new": c.new,
                          "step": c.step, "ratio": c.ratio, "low": c.low, "high": c.high, "interval": c.interval,
                          "verdict": c.verdict, "verdict_text": c.text, "alone": c.alone, "rule": c.rule_text,
                          "unit": c.unit, "units": c.units, "blocks": c.blocks, "p": c.p, "p_adjusted": c.p_adj,
                          "decided_by": c.decided_by, "family": c.family_text if c.family_size else None,
                          "needs": c.needs} for c in sv.cells], columns=list(FRAME_COLUMNS))
