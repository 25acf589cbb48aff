"""Where a study's sweep time went: for each invocation its sweep index records (started, finished),
the share of its wall time that was timed work, and the share spent starting engines.

The wall time is the index's own (first run started to last run finished, environment checks and
locks included), not the sum of its runs', so that what happens between runs is counted too. Timed
and engine-start seconds come from the records the invocation measured (a record's `invocation_id`);
runs it reused cost it nothing and are not counted. An invocation with no `finished_at` was cut off
(a lease ended under it): its wall time is unknown. One whose records were since measured over
(moved to superseded/) no longer has the timed seconds of all its runs. Neither enters a share; both
are counted as left out.

Invocations are summed by what they measured: series, arms and engine mode, so that a series of
per-group sweeps and the crosscheck's one-engine-per-run invocations read apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import pandas as pd

from harness.schema import sweep_index


@dataclass(frozen=True, kw_only=True)
class Invocation:
    invocation_id: str
    scenario: str | None
    series: str
    arms: str                       # the arms it measured, comma-separated
    engine: str                     # per-run or per-group, as its records say (a crosscheck runs per-run
                                    # whatever its scenario's mode); the index's where no record is left
    measured: int                   # runs the index lists as measured by it
    found: int                      # of those, records still under runs/
    wall_s: float | None            # None: cut off, no finished_at
    timed_s: float
    engine_init_s: float

    @property
    def share(self) -> float | None:
        return self.timed_s / self.wall_s if self.wall_s else None

    @property
    def partial(self) -> bool:
        return self.found < self.measured

    @property
    def counted(self) -> bool:
        return self.wall_s is not None and self.wall_s > 0 and not self.partial


@dataclass(frozen=True, kw_only=True)
class Kind:
    """The invocations that measured the same series, arms and engine mode, summed."""

    series: str
    arms: str
    engine: str
    invocations: int
    left_out: int                   # cut off, or partial: in no sum
    runs: int
    wall_s: float
    timed_s: float
    engine_init_s: float
    best: float | None              # the highest share of one counted invocation

    @property
    def share(self) -> float | None:
        return self.timed_s / self.wall_s if self.wall_s else None

    @property
    def init_share(self) -> float | None:
        return self.engine_init_s / self.wall_s if self.wall_s else None


@dataclass(frozen=True, kw_only=True)
class SweepTime:
    invocations: tuple[Invocation, ...]
    kinds: tuple[Kind, ...]
    wall_s: float                   # over the invocations that are neither cut off nor partial
    timed_s: float
    left_out: int

    @property
    def share(self) -> float | None:
        return self.timed_s / self.wall_s if self.wall_s else None


def _seconds(a: str | None, b: str | None) -> float | None:
    if not a or not b:
        return None
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def invocations(indexes: Sequence[sweep_index.SweepIndex], records: pd.DataFrame) -> list[Invocation]:
    """One entry per sweep index (the dataset's, in time order) that measured at least one run.
    `records` is the dataset's record frame (measured records; others are ignored)."""
    recs = records[records["provenance"] == "measured"]
    out = []
    for idx in indexes:
        measured = [r.run_id for r in idx.runs if not r.reused]
        if not measured:
            continue
        mine = recs[(recs["invocation_id"] == idx.invocation_id) & recs["run_id"].isin(measured)]
        series = sorted({rid.split("/", 1)[0] for rid in measured})
        arms = sorted({rid.split("/")[4] for rid in measured if rid.count("/") >= 5})
        out.append(Invocation(
            invocation_id=idx.invocation_id, scenario=idx.scenario, series=", ".join(series), arms=", ".join(arms),
            engine=", ".join(sorted(set(mine["engine_mode"].dropna()))) or str(getattr(idx, "engine", None) or "per-run"),
            measured=len(measured), found=len(mine),
            wall_s=_seconds(idx.started_at, idx.finished_at),
            timed_s=float(mine["timed_s"].fillna(0).sum()),
            engine_init_s=float(mine["engine_init_s"].fillna(0).sum())))
    return out


def summarize(invs: list[Invocation]) -> SweepTime:
    kinds = []
    groups: dict[tuple[str, str, str], list[Invocation]] = {}
    for inv in invs:
        groups.setdefault((inv.series, inv.arms, inv.engine), []).append(inv)
    for (series, arms, engine), members in groups.items():
        done = [m for m in members if m.counted]
        shares = [s for m in done if (s := m.share) is not None]
        kinds.append(Kind(
            series=series, arms=arms, engine=engine, invocations=len(members), left_out=len(members) - len(done),
            runs=sum(m.found for m in done), wall_s=sum(m.wall_s or 0.0 for m in done),
            timed_s=sum(m.timed_s for m in done), engine_init_s=sum(m.engine_init_s for m in done),
            best=max(shares) if shares else None))
    done = [i for i in invs if i.counted]
    return SweepTime(invocations=tuple(invs), kinds=tuple(kinds), wall_s=sum(i.wall_s or 0.0 for i in done),
                     timed_s=sum(i.timed_s for i in done), left_out=len(invs) - len(done))
