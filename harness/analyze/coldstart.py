"""Which runs were timed on an engine that compiled its graphs from an empty cache, and whether those
runs measured slower than their cell's runs on an engine that loaded them from the cache.

A machine lease starts with empty compile caches. The first engine of a (leg, model, engine
arguments) on it compiles (torch.compile, and with it the just-in-time kernels that no warm-up
reaches); later engines load what it saved. vLLM says which happened in its own log: "Compiling a
graph for ..." / "saved AOT compiled function" against "Directly load the compiled graph(s) ..." /
"Directly load AOT compilation". Nothing is re-measured here: each run's log is read as recorded.

The unit is the cell (series, leg, model, workload, arm): its cold runs' median speed against its warm
runs' median, preferring warm runs on the same machine (a GPU's uuid; a CPU host's name and model),
since machines differ by a few percent on their own. Across cells, a sign test: under "a cold engine
measures like a warm one" each cell's cold median is as likely above its warm median as below. It
counts only the cells whose cold runs were the first workload their engine timed, one per cold
engine, so that no engine is counted twice; the later workloads of a cold engine group are shown,
not tested.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from harness import workloads
from harness.analyze.dataset import Dataset, machine_of

State = Literal["compiled", "cached", "eager"]

_COMPILED = re.compile(r"Compiling a graph for|saved AOT compiled function|Compiling model again")
_CACHED = re.compile(r"Directly load the compiled graph|Directly load AOT compilation")
_EAGER = re.compile(r"Enforce eager set|disabling torch\.compile")
CELL = ["series", "leg", "model", "workload", "arm"]
MIN_CELLS = 5   # a sign test over fewer cells cannot reach 5% two-sided (2/2^4 = 0.125)
SIGN_ALPHA = 0.05   # the sign test's level for "beyond chance"


def compile_state(text: str) -> State | None:
    """What the engine did with its graphs, from vLLM's log: None when the log does not say."""
    if _COMPILED.search(text):
        return "compiled"
    if _CACHED.search(text):
        return "cached"
    if _EAGER.search(text):
        return "eager"
    return None


def engine_state(own_log: str, group_log: str = "") -> State | None:
    """The compile state of the engine that timed a run: its own log, or, for a run of an engine
    group, its group's instance log (where the engine started)."""
    state = compile_state(own_log)
    if state is None and group_log:
        state = compile_state(group_log)
    return state


def run_state(ds: Dataset, run_dir: str) -> tuple[State | None, str | None]:
    """The compile state of the engine that timed this run, and the machine it ran on, from its record."""
    return engine_state(*ds.engine_logs(run_dir)), machine_of(ds.record(run_dir).manifest)


def coldstart_frame(runs: pd.DataFrame, ds: Dataset) -> pd.DataFrame:
    """One row per run of `runs` (rows of `ds`'s frame or of a canonical selection of it): its cell,
    repeat, value (tok/s, or ms per output token), speed direction, engine compile state, engine start
    seconds and machine."""
    rows = []
    for r in runs.to_dict("records"):
        kind = r.get("kind")
        if not (workloads.known(kind) and workloads.traits_of(kind).engine_speed):
            continue
        value = r.get(workloads.metric_of(kind).key)
        if not isinstance(value, (int, float)) or not value > 0:
            continue
        state, machine = run_state(ds, str(r["run_dir"]))
        pos = r.get("engine_position")
        rows.append({**{k: r[k] for k in CELL}, "repeat": int(r["repeat"]), "kind": kind, "value": float(value),
                     "state": state, "machine": machine, "engine_init_s": r.get("engine_init_s"),
                     "position": int(pos) if isinstance(pos, (int, float)) and pos == pos else 1,
                     "run_dir": r["run_dir"]})
    return pd.DataFrame(rows, columns=CELL + ["repeat", "kind", "value", "state", "machine", "engine_init_s",
                                              "position", "run_dir"])


@dataclass(frozen=True, kw_only=True)
class ColdCell:
    series: str
    leg: str
    model: str
    workload: str
    arm: str
    cold: tuple[float, ...]            # the cold runs' values, in repeat order
    cold_repeats: tuple[int, ...]
    warm: tuple[float, ...]            # the warm runs it is compared with
    same_machine: bool                 # warm runs from the cold runs' machine(s), or from any
    speed: float                       # cold median ÷ warm median as speed: below 1, the cold runs were slower
    first: bool                        # the cold runs were the first workload their engine timed
    cold_init_s: float | None          # median engine start, cold and warm
    warm_init_s: float | None


@dataclass(frozen=True, kw_only=True)
class ColdSummary:
    runs: int                          # runs whose log says how their engine started
    cold_runs: int
    cells: tuple[ColdCell, ...]        # cells with cold and warm runs
    first: tuple[int, int, float | None]   # cells whose cold runs were their engine's first workload:
                                           # (slower, cells, two-sided sign-test p; None under MIN_CELLS)
    later: tuple[int, int]                 # the other cells: (slower, cells), not tested

    @property
    def verdict(self) -> str:
        """The sign test's answer for the first-workload cells, in the words every view prints."""
        k, n, p = self.first
        if p is None or p >= SIGN_ALPHA:
            return "no difference established"
        return "slower on a cold engine, beyond chance" if k > n / 2 else "faster on a cold engine, beyond chance"


def _median_init(d: pd.DataFrame) -> float | None:
    s = pd.to_numeric(d["engine_init_s"], errors="coerce").dropna()
    return float(s.median()) if len(s) else None


def summarize(frame: pd.DataFrame) -> ColdSummary:
    from scipy import stats as sps

    known = frame[frame["state"].isin(["compiled", "cached"])]
    cells = []
    for key, g in known.groupby(CELL, sort=True):
        cold, warm = g[g["state"] == "compiled"], g[g["state"] == "cached"]
        if cold.empty or warm.empty:
            continue
        near = warm[warm["machine"].isin(set(cold["machine"]))]
        use = near if len(near) else warm
        cm, wm = float(cold["value"].median()), float(use["value"].median())
        speed = cm / wm if workloads.metric_of(g["kind"].iloc[0]).higher_is_better else wm / cm
        cold = cold.sort_values("repeat")
        cells.append(ColdCell(**dict(zip(CELL, key)), cold=tuple(cold["value"]), cold_repeats=tuple(cold["repeat"]),
                              warm=tuple(use["value"]), same_machine=bool(len(near)), speed=speed,
                              first=bool((cold["position"] == 1).all()),
                              cold_init_s=_median_init(cold), warm_init_s=_median_init(use)))
    first = [c for c in cells if c.first]
    k = sum(c.speed < 1 for c in first)
    p = float(sps.binomtest(k, len(first)).pvalue) if len(first) >= MIN_CELLS else None
    later = [c for c in cells if not c.first]
    return ColdSummary(runs=len(known), cold_runs=int((known["state"] == "compiled").sum()), cells=tuple(cells),
                       first=(k, len(first), p), later=(sum(c.speed < 1 for c in later), len(later)))


def study_summary(ds: Dataset) -> ColdSummary | None:
    """The study's measured, unprofiled ok runs summarised; None where no cell has cold and warm runs."""
    recs = ds.records
    ok = recs[(recs["status"] == "ok") & (recs["provenance"] == "measured") & ~recs["profiled"].fillna(False).astype(bool)]
    if not len(ok):
        return None
    sm = summarize(coldstart_frame(ok, ds))
    return sm if sm.cells else None
