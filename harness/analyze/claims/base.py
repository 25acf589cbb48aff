"""What every claim kind is built from: the `Claim` itself, the parameters, the rows of a step between
two legs, and the context a kind reads (the canonical runs, the legs, the study's model classes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.analyze import stats
from harness.analyze.canonical import Canonical
from harness.analyze.stats import Ratio
from harness.analyze.tables import model_order, order_frame
from harness.analyze.verdicts import study_verdicts
from harness.schema.report_config import ModelClasses


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
    band: float = 0.05          # a ratio within 1 ± band is "flat" (decided by harness.analyze.stats.band_side)
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
    v: Any = None            # the study's verdict object for the cell (harness.analyze.verdicts.CellVerdict)

    @property
    def r(self) -> float:
        return float(self.ratio.value)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class Context:
    """What a claim kind reads."""

    canon: Canonical
    legs: list[tuple[str, str]]
    params: ClaimParams
    others: dict[str, Canonical]          # the canonical cells of every series, the main one included
    classes: ModelClasses | None = None   # the study's model classes (study.yaml `report.model_classes`)


@dataclass(frozen=True, kw_only=True)
class Pair:
    """A step between consecutive legs, with its throughput rows."""

    old: tuple[str, str]   # (leg, label)
    new: tuple[str, str]
    rows: list[Step]


def flat(r: float, p: ClaimParams) -> bool:
    return stats.band_side(r, p.band) == "within"


def below(r: float, p: ClaimParams) -> bool:
    return stats.band_side(r, p.band) == "below"


def pair_id(a: str, b: str) -> str:
    return f"{a}-{b}"


def cells_by_key(canon: Canonical) -> dict[tuple[str, str, str], dict]:
    return {(c["leg"], c["model"], c["workload"]): c for c in canon.cells.to_dict("records")}


def table_rows(canon: Canonical, kind: str) -> list[tuple[str, str]]:
    exp = canon.expected[canon.expected["kind"] == kind]
    rows = order_frame(canon, exp.drop_duplicates(["model", "workload"])[["model", "workload"]])
    return list(zip(rows["model"], rows["workload"]))


def model_class(model: str, classes: ModelClasses | None) -> str:
    return classes.of(model) if classes is not None else "other"


def steps(canon: Canonical, old: str, new: str, kind: str = "throughput", *,
          classes: ModelClasses | None = None) -> list[Step]:
    """Every (model, workload) of `kind` measured on both legs, in table order."""
    cells = cells_by_key(canon)
    out = []
    for model, workload in table_rows(canon, kind):
        a, b = cells.get((old, model, workload)), cells.get((new, model, workload))
        if a is None or b is None:
            continue
        # The cell's test as the study's verdict object holds it (computed once, harness.analyze.verdicts).
        v = study_verdicts(canon).get(kind, model, workload, old, new)
        rt = v.test if v is not None else None
        if rt is None or rt.value is None:
            continue
        out.append(Step(model=model, workload=workload, kind=kind, old=float(a["value"]), new=float(b["value"]),
                        ratio=rt, cls=model_class(model, classes), v=v))
    return out


def models(canon: Canonical) -> list[str]:
    order = {m: i for i, m in enumerate(model_order(canon.dataset))}
    return sorted(set(canon.expected["model"]), key=lambda m: (order.get(m, len(order)), m))


def passes(canon: Canonical, leg: str, model: str) -> bool:
    wanted = set(canon.expected.loc[canon.expected["model"] == model, "workload"])
    c = canon.cells
    have = set(c.loc[(c["leg"] == leg) & (c["model"] == model), "workload"])
    return bool(wanted) and wanted <= have
