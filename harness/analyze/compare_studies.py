"""Two studies side by side: the same (model, workload, step) in each, and whether the step's effect
transfers from one to the other (e.g. a B200 finding to H200).

A step is a pair of consecutive legs, matched by label ("0.18 → 0.26") over the labels both studies
have. Each side is that study's own verdict for the cell (`harness.analyze.verdicts`: its ratio, interval
and verdict, exactly as its page prints them), or, where the study holds only a ratio its source
printed, its `printed.yaml` (labelled "printed"). A side reads as its verdict: faster, slower, flat
(equivalent), undecided; a single pass per side (or a printed ratio) can only be read against the flat band
(default ±5%), and is labelled so. The verdict: "undecided in A/B" where a side's own verdict is undecided
(there is no effect to transfer), "transfers" when both sides read the same,
"does not transfer" when they differ, "direction only" when both move the same way but one effect
is under half the other's (in log terms), "cannot run in B" / "only in A" where a side has no ratio.
`compare_studies` returns plain data; `harness.publish.compare_studies` prints it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from harness import workloads
from harness.analyze.canonical import Canonical, canonicalize
from harness.analyze.dataset import Problem, load
from harness.analyze.stats import band_side
from harness.analyze.tables import row_key
from harness.analyze.verdicts import study_verdicts
from harness.core.errors import UserError
from harness.core.locate import resolve
from harness.schema.printed import Printed, read_printed

BAND = 0.05
# Same direction, but one effect (|log ratio|) under this share of the other's: only the direction transfers.
SIZE = 0.5


@dataclass(frozen=True, kw_only=True)
class Side:
    ratio: float | None
    low: float | None = None
    high: float | None = None
    interval: str | None = None      # the study's interval kind ("95% t", "rounding") or None
    printed: bool = False            # the source printed the ratio only
    outcome: str | None = None       # what the source says instead of a ratio ("cannot run ...")
    cls: str | None = None           # the study's verdict class for the cell (CellVerdict.cls), None: no test
    verdict: str = ""                # the study's verdict in words (CellVerdict.text)

    def reads(self, band: float) -> str | None:
        if self.ratio is None:
            return None
        if self.cls in ("faster", "slower", "undecided"):
            return self.cls
        if self.cls == "equivalent":
            return "flat"
        # A single pass per side or a printed ratio: no test, only the flat band.
        return {"above": "faster", "below": "slower", "within": "flat"}[band_side(self.ratio, band)]

    def text(self) -> str:
        if self.ratio is None:
            return self.outcome or "—"
        s = f"{self.ratio:.2f}x"
        if self.low is not None and self.high is not None:
            s += f" [{self.low:.2f}, {self.high:.2f}]"
        if self.verdict:
            s += f", {self.verdict}"
        return s + (" (printed ratio)" if self.printed else "")


@dataclass(frozen=True, kw_only=True)
class Row:
    model: str
    workload: str
    kind: str
    step: str
    a: Side
    b: Side
    verdict: str


@dataclass(frozen=True, kw_only=True)
class Comparison:
    a: str                  # study names
    b: str
    band: float
    rows: list[Row]
    # Files of either study that could not be used (harness.analyze.dataset.Problem), named by the verb.
    problems: tuple[Problem, ...] = ()

    @property
    def both(self) -> list[Row]:
        """The rows with a ratio in both studies."""
        return [r for r in self.rows if r.a.ratio is not None and r.b.ratio is not None]

    @property
    def transferring(self) -> list[Row]:
        """The rows of `both` that read the same in both studies."""
        return [r for r in self.both if r.verdict.startswith("transfers")]

    @property
    def two_sided(self) -> list[Row]:
        """The rows each study has (a ratio, or an outcome its source printed instead)."""
        return [r for r in self.rows if (r.a.ratio is not None or r.a.outcome) and (r.b.ratio is not None or r.b.outcome)]


def _canon(root: Path) -> Canonical:
    ds = load(root)
    return canonicalize(ds, series=ds.study.main_series)


def _side(canon: Canonical, printed: Printed | None, kind: str, model: str, workload: str,
          old: tuple[str, str], new: tuple[str, str]) -> Side:
    v = study_verdicts(canon).get(kind, model, workload, old[0], new[0])
    if v is not None and v.ratio is not None:
        return Side(ratio=v.ratio, low=v.low, high=v.high, interval=v.interval, cls=v.cls, verdict=v.text)
    p = printed.get(model, workload, old[1], new[1]) if printed else None
    if p is not None:
        return Side(ratio=p.ratio, printed=p.ratio is not None, outcome=p.outcome)
    return Side(ratio=None)


def _verdict(a: Side, b: Side, band: float) -> str:
    ra, rb = a.reads(band), b.reads(band)
    if ra is None and rb is None:
        return "neither has a ratio"
    if rb is None:
        return "cannot run in B" if b.outcome else "only in A"
    if ra is None:
        return "cannot run in A" if a.outcome else "only in B"
    if "undecided" in (ra, rb):
        where = "both" if ra == rb else ("A" if ra == "undecided" else "B")
        return f"undecided in {where} (no decided effect to transfer)"
    if ra != rb:
        return f"does not transfer ({ra} in A, {rb} in B)"
    if ra != "flat" and a.ratio and b.ratio:
        la, lb = abs(math.log(a.ratio)), abs(math.log(b.ratio))
        if min(la, lb) < SIZE * max(la, lb):
            return f"direction only ({ra} in both; the effect in one is under {SIZE:.0%} of the other's, in log terms)"
    return f"transfers ({ra})"


def compare_studies(study_a: Path | str, study_b: Path | str, *, band: float = BAND) -> Comparison:
    ra, rb = resolve(study_a), resolve(study_b)
    for r in (ra, rb):
        if not (r / "study.yaml").is_file():
            raise UserError(f"{r}: not a study folder (no study.yaml)")
    if ra.resolve() == rb.resolve():
        raise UserError(f"{ra}: compare studies names the same study twice ({study_a} and {study_b}); a study "
                        f"compared with itself says nothing")
    ca, cb = _canon(ra), _canon(rb)
    pa, pb = read_printed(ra), read_printed(rb)
    la = [(lg.name, lg.label) for lg in ca.study.legs]
    lb_ = {lg.label: lg.name for lg in cb.study.legs}
    common = [(n, lab) for n, lab in la if lab in lb_]
    if len(common) < 2:
        raise UserError(f"compare studies: {ca.study.name} and {cb.study.name} share fewer than two leg labels "
                        f"({', '.join(lab for _, lab in la)} vs {', '.join(lb_)}): no step to compare")
    rows: list[Row] = []
    keys: list[tuple[str, str, str]] = []
    cells: list[set[tuple[str, str]]] = []   # each study's (model, workload): canonical cells and printed ratios
    for canon in (ca, cb):
        exp = canon.expected
        keys += [(str(k), str(m), str(w)) for k, m, w in zip(exp["kind"], exp["model"], exp["workload"])]
        cells.append({(str(m), str(w)) for m, w in zip(exp["model"], exp["workload"])})
    for p, mine in zip((pa, pb), cells):
        for e in (p.ratios if p else ()):
            kind = next((k for k, m, w in keys if (m, w) == (e.model, e.workload)), "throughput")
            keys.append((kind, e.model, e.workload))
            mine.add((e.model, e.workload))
    if not cells[0] & cells[1]:
        raise UserError(f"{rb}: shares no (model, workload) with {ra} ({len(cells[1])} and {len(cells[0])} "
                        f"cells, none in both); nothing to compare")
    key = row_key(ca.dataset)
    uniq = sorted(dict.fromkeys(keys), key=lambda t: (list(workloads.KINDS).index(t[0]) if t[0] in workloads.KINDS
                                                      else 99, key(t[1], t[2])))
    for kind, model, workload in uniq:
        for (oa, ol), (na, nl) in zip(common, common[1:]):
            a = _side(ca, pa, kind, model, workload, (oa, ol), (na, nl))
            b = _side(cb, pb, kind, model, workload, (lb_[ol], ol), (lb_[nl], nl))
            if a.ratio is None and b.ratio is None and not (a.outcome or b.outcome):
                continue
            rows.append(Row(model=model, workload=workload, kind=kind, step=f"{ol} → {nl}", a=a, b=b,
                            verdict=_verdict(a, b, band)))
    return Comparison(a=ca.study.name, b=cb.study.name, band=band, rows=rows,
                      problems=ca.dataset.problems + cb.dataset.problems)


def find(c: Comparison, model: str, workload: str, step: str) -> Row | None:
    step = step.replace("->", " → ")
    return next((r for r in c.rows if (r.model, r.workload) == (model, workload)
                 and r.step.replace(" ", "") == step.replace(" ", "")), None)
