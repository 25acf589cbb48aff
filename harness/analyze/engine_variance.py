"""How much one engine instance's own speed varies, from a paired study's records: the measurement
behind the nested rule's `engine_sd` bound (docs/statistics.md, "The paired, interleaved design").

Within a block both legs' engines are fixed; across blocks both are started afresh. A pair's log ratio
d = log(new/old) carries the two engines' offsets (their difference: variance 2·tau^2 per block) and the
passes' own noise; the host's state, shared by the two passes of a pair, cancels. So, per (model,
workload) and pooled over every cell of the study (the offsets are assumed alike in relative terms):

    E[MSB] = MSW + n0 · 2 tau^2      (one-way random effects on d, blocks as the groups)

tau^2 is estimated by the method of moments, and bounded above at 95% by the chi-square upper limit of
E[MSB] with MSW taken as known (it has many more degrees of freedom). The cells of a study share their
blocks (one engine per leg measures every workload of a block), and an engine that runs fast runs fast
on every workload: the cells' block effects are correlated, so the upper limit takes the degrees of
freedom of one cell (blocks - 1), not their sum over cells. The unit is one leg's
engine instance; the bound is what a study declares as `engine_sd` in study.yaml, with its source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.analyze.canonical import Canonical, canonicalize
from harness.analyze.dataset import Dataset
from harness.core.errors import UserError
from harness.workloads import metric_of


@dataclass(frozen=True, kw_only=True)
class EngineVariance:
    cells: int               # (model, workload) cells with at least two blocks of pairs
    blocks: int              # blocks summed over those cells
    pairs: int
    pair_sd: float | None    # pass-pair noise within blocks, log sd of d
    engine_sd: float | None  # one engine instance's sd, log scale (method of moments, >= 0)
    engine_sd_upper: float | None   # its 95% upper bound


def pair_logs(ds: Dataset, old: str, new: str, *, series: str | None = None
              ) -> dict[tuple[str, str], dict[tuple[str, int], list[float]]]:
    """{(model, workload): {(series, block): [d, ...]}} from the two legs' paired passes matched by
    (series, block, round); `series` None takes every series of the study (each sweep's blocks are
    engine instances of their own: an A/A study measured as several series pools them)."""
    rec = ds.records
    ok = rec[(rec["status"] == "ok") & rec["paired_passes"].notna() & rec["leg"].isin([old, new])]
    if series is not None:
        ok = ok[ok["series"] == series]
    by: dict[tuple[str, str, str, tuple[str, int]], dict[int, float]] = {}
    kinds: dict[tuple[str, str], str] = {}
    for r in ok.to_dict("records"):
        by[(r["leg"], r["model"], r["workload"], (str(r["series"]), int(r["paired_block"])))] = dict(r["paired_passes"])
        kinds[(r["model"], r["workload"])] = r["kind"]
    out: dict[tuple[str, str], dict[tuple[str, int], list[float]]] = {}
    for (leg, model, workload, block), passes in by.items():
        if leg != old or (new, model, workload, block) not in by:
            continue
        partner = by[(new, model, workload, block)]
        higher = metric_of(kinds[(model, workload)]).higher_is_better
        ds_ = [math.log(partner[k] / v) if higher else math.log(v / partner[k]) for k, v in sorted(passes.items())
               if k in partner]
        if ds_:
            out.setdefault((model, workload), {})[block] = ds_
    return out


def estimate(cells: dict[tuple, dict], *, confidence: float = 0.95, df_upper: int | None = None) -> EngineVariance:
    """The components from `cells` ({cell: {block: [d, ...]}}), each cell's blocks about that cell's own
    mean. `df_upper`: the degrees of freedom of the upper limit, where the caller knows them (pooled
    studies: their blocks are independent engines, so their degrees of freedom add); default, those of
    the cell with the most blocks (one study's cells share their blocks' engines)."""
    from scipy import stats as sps

    ssw = ssb = 0.0
    dfw = dfb = 0
    n0_num = n0_den = 0.0
    n_cells = n_blocks = n_pairs = 0
    df_one = 0   # blocks - 1 of the cell with the most blocks: the cells share blocks (see above)
    for blocks in cells.values():
        bl = [np.asarray(b, dtype=float) for b in blocks.values() if len(b)]
        if len(bl) < 2:
            continue
        sizes = np.array([len(b) for b in bl], dtype=float)
        allv = np.concatenate(bl)
        means = np.array([b.mean() for b in bl])
        ssw += float(sum(((b - b.mean()) ** 2).sum() for b in bl))
        ssb += float((sizes * (means - allv.mean()) ** 2).sum())
        dfw += len(allv) - len(bl)
        dfb += len(bl) - 1
        n0_num += len(allv) - float((sizes ** 2).sum()) / len(allv)
        n0_den += len(bl) - 1
        n_cells, n_blocks, n_pairs = n_cells + 1, n_blocks + len(bl), n_pairs + len(allv)
        df_one = max(df_one, len(bl) - 1)
    if dfb == 0 or dfw == 0:
        return EngineVariance(cells=n_cells, blocks=n_blocks, pairs=n_pairs, pair_sd=None, engine_sd=None,
                              engine_sd_upper=None)
    df_one = min(df_upper, dfb) if df_upper else df_one
    msw, msb, n0 = ssw / dfw, ssb / dfb, n0_num / n0_den
    tau2 = max(0.0, (msb - msw) / n0) / 2
    upper_msb = df_one * msb / float(sps.chi2.ppf(1 - confidence, df_one))
    tau2_up = max(0.0, (upper_msb - msw) / n0) / 2
    return EngineVariance(cells=n_cells, blocks=n_blocks, pairs=n_pairs, pair_sd=math.sqrt(msw),
                          engine_sd=math.sqrt(tau2), engine_sd_upper=math.sqrt(tau2_up))


def study_pair_logs(dss: list[Dataset], old: str, new: str
                    ) -> dict[tuple[str, str, str], dict[tuple[str, int], list[float]]]:
    """`pair_logs` of several studies of the same two legs, {(study folder, model, workload): blocks}:
    each `make main` is a study of its own, and its blocks are more engine instances per leg. A study's
    blocks are taken about that study's own mean, so a day-to-day shift of the ratio between studies
    is not counted as engine-instance variance."""
    out: dict[tuple[str, str, str], dict[tuple[str, int], list[float]]] = {}
    for ds in dss:
        name = Path(ds.root).name
        if any(k[0] == name for k in out):
            raise UserError(f"{ds.root}: named twice among the pooled studies")
        for (model, wl), blocks in pair_logs(ds, old, new).items():
            out[(name, model, wl)] = blocks
    return out


def _pooled(logs: dict[tuple[str, str, str], dict], cell: tuple[str, str] | None = None) -> EngineVariance:
    """`estimate` over pooled studies' cells (one (model, workload) `cell`, or all): the upper limit's
    degrees of freedom add over studies (independent engines), within a study those of its largest cell."""
    mine = {k: v for k, v in logs.items() if cell is None or k[1:] == cell}
    per_study: dict[str, int] = {}
    for (study, *_), blocks in mine.items():
        per_study[study] = max(per_study.get(study, 0), len(blocks) - 1)
    return estimate(mine, df_upper=sum(per_study.values()) or None)


def engine_variance(ds: Dataset, old: str, new: str, *, series: str | None = None,
                    pool: list[Dataset] = ()) -> EngineVariance:
    """The engine-instance sd and its 95% upper bound from two legs' paired passes in `ds` (and in the
    studies of `pool`, pooled with it)."""
    if pool:
        return _pooled(study_pair_logs([ds, *pool], old, new))
    return estimate(pair_logs(ds, old, new, series=series))


def by_workload(ds: Dataset, old: str, new: str, *, series: str | None = None,
                pool: list[Dataset] = ()) -> dict[tuple[str, str], EngineVariance]:
    """`engine_variance` for each (model, workload) cell alone: its own blocks - 1 degrees of freedom
    (summed over the studies of `pool`)."""
    if pool:
        logs = study_pair_logs([ds, *pool], old, new)
        return {cell: _pooled(logs, cell) for cell in sorted({k[1:] for k in logs})}
    return {cell: estimate({cell: blocks}) for cell, blocks in sorted(pair_logs(ds, old, new, series=series).items())}


def engine_variance_md(ev: EngineVariance) -> str:
    if ev.engine_sd is None:
        return (f"Engine-instance variance: not estimable ({ev.cells} cells with two or more blocks; it needs "
                "at least two blocks with two pairs each).\n")
    return (f"Engine-instance sd (one leg's engine, log scale): {ev.engine_sd:.4f}, 95% upper bound "
            f"{ev.engine_sd_upper:.4f}; pass-pair sd within blocks {ev.pair_sd:.4f}; from {ev.pairs} pairs in "
            f"{ev.blocks} blocks over {ev.cells} (model, workload) cells.\n")


# --- what a design costs, and the cheapest one that decides -----------------------------------------

@dataclass(frozen=True, kw_only=True)
class BlockCost:
    """Seconds of one engine block of a paired sweep, from its records: `setup_s` from the block's first
    run start to its first timed pass (both engines started, warm-ups), `round_s` one round (every
    workload, one pass per leg, with the settling between passes); medians over `blocks` blocks."""
    setup_s: float
    round_s: float
    blocks: int

    def seconds(self, blocks: int, pairs: int) -> float:
        return blocks * (self.setup_s + pairs * self.round_s)


def block_cost(ds: Dataset, *, series: str | None = None) -> BlockCost | None:
    """The measured cost of a block in `ds` (None without paired passes)."""
    rec = ds.records
    ok = rec[(rec["status"] == "ok") & rec["paired_block"].notna()]
    if series is not None:
        ok = ok[ok["series"] == series]
    setups, rounds = [], []
    for _, grp in ok.groupby(["series", "paired_block"]):
        passes = [p for rid in grp["run_dir"] for p in (ds.typed[rid].paired.passes if ds.typed[rid].paired else [])]
        starts = [ds.typed[rid].started_at for rid in grp["run_dir"] if ds.typed[rid].started_at]
        if not passes or not starts:
            continue
        first = min(p.started_at for p in passes)
        last = max(p.ended_at for p in passes)
        n_rounds = len({p.round for p in passes})
        t0 = min(_epoch(s) for s in starts)
        setups.append(first - t0)
        rounds.append((last - first) / n_rounds)
    if not setups:
        return None
    return BlockCost(setup_s=float(np.median(setups)), round_s=float(np.median(rounds)), blocks=len(setups))


def _epoch(stamp: object) -> float:
    from datetime import datetime

    return stamp.timestamp() if hasattr(stamp, "timestamp") else datetime.fromisoformat(str(stamp)).timestamp()


@dataclass(frozen=True, kw_only=True)
class Plan:
    blocks: int
    pairs: int
    seconds: float
    how: str          # "differs" (the interval clears 1.00) or "within" (inside the margin)
    pooled: bool      # pairs the units (a declared engine_sd bound), else block means


def decides(m: float, pair_var: float, block_var: float, blocks: int, pairs: int, *, margin: float | None,
            engine_sd: float | None = None, alpha: float = 0.05) -> str | None:
    """How `blocks` x `pairs` decide a cell whose log ratio is truly `m` with probability
    significance.POWER under the nested rule: "differs", "within" (the margin) or None. `pair_var`: the
    pairs' variance within a block; `block_var`: what the two engines add to a block's mean ratio
    (tau_old^2 + tau_new^2). Without `engine_sd` the block means are the units (sd per unit
    sqrt(block_var + pair_var / pairs), blocks - 1 df: significance.decided_how); with it, the pairs
    (se^2 = pair_var / (blocks pairs) + 2 engine_sd^2 / blocks, df = blocks (pairs - 1)), assuming the
    cell's blocks pass the bound's check (true tau within the bound)."""
    from scipy import stats as sps

    from harness.analyze.significance import NESTED_SIZE, POWER, decided_how

    a = NESTED_SIZE * alpha
    if blocks < 2 or blocks * pairs < 3:
        return None
    if engine_sd is None:
        return decided_how(m, math.sqrt(block_var + pair_var / pairs), margin, blocks, alpha=a)
    if pairs < 2:
        return None
    se = math.sqrt(pair_var / (blocks * pairs) + 2 * engine_sd ** 2 / blocks)
    reach = (float(sps.t.ppf(1 - a / 2, blocks * (pairs - 1))) + float(sps.norm.ppf(POWER))) * se
    if abs(m) > reach:
        return "differs"
    return "within" if margin is not None and math.log1p(margin) - abs(m) > reach else None


def cheapest_design(cells: list[tuple[float, float, float]], cost: BlockCost, *, margin: float | None,
                    engine_sd: float | None = None, need: int | None = None, alpha: float = 0.05,
                    max_blocks: int = 60, max_pairs: int = 12) -> Plan | None:
    """The cheapest (blocks, pairs) that decides at least `need` (default: all) of `cells`, each
    (m, pair_var, block_var) as in `decides`; `how` is the first decided cell's. None when no design up to
    max_blocks x max_pairs would. One design serves every cell of a sweep, so a table's time is this."""
    need = len(cells) if need is None else need
    best: Plan | None = None
    for p in range(1, max_pairs + 1):
        for b in range(2, max_blocks + 1):
            hows = [decides(m, pv, bv, b, p, margin=margin, engine_sd=engine_sd, alpha=alpha) for m, pv, bv in cells]
            if sum(h is not None for h in hows) >= need:
                plan = Plan(blocks=b, pairs=p, seconds=cost.seconds(b, p), how=next(h for h in hows if h),
                            pooled=engine_sd is not None)
                if best is None or plan.seconds < best.seconds:
                    best = plan
                break
    return best


# --- what would decide a study's cells, from its own records and measured instance variance ---------

@dataclass(frozen=True, kw_only=True)
class CellTime:
    model: str
    workload: str
    ratio: float          # the study's geometric mean pair ratio (new over old, > 1 faster)
    pair_var: float
    block_var: float      # tau_old^2 + tau_new^2, from the instance studies where they measured both legs
    from_instances: bool  # False: the cell's own blocks' estimate (few degrees of freedom)
    plan: Plan | None


def instance_taus(instances: list[Dataset]) -> dict[tuple[str, tuple[str, str]], float]:
    """{(leg, (model, workload)): tau^2}: each instance study's A/A groups (study.yaml `aa`), every leg
    of a group getting the group's per-workload engine-instance variance (`by_workload`, point value)."""
    out: dict[tuple[str, tuple[str, str]], float] = {}
    for ds in instances:
        for g in ds.study.extra.get("aa") or []:
            legs = list(g["legs"])
            for cell, ev in by_workload(ds, legs[0], legs[1]).items():
                if ev.engine_sd is not None:
                    for leg in legs:
                        out.setdefault((leg, cell), ev.engine_sd ** 2)
    return out


def time_to_decide(ds: Dataset, *, instances: list[Dataset] = (), pool: list[Dataset] = (),
                   margin: float | None = None) -> tuple[list[CellTime], BlockCost | None]:
    """For each (model, workload) cell of a two-leg paired study: the cheapest design that would decide
    it (80% power at the study's own ratio and pass noise, the rule the study declares). With `pool`
    (more studies of the same two legs, e.g. earlier `make main` runs), the ratio, pass noise and
    block variance are those of every study's blocks together (each study about its own mean), which
    one run's four blocks estimate poorly; `instances`, where they measured both legs, still give the
    block variance."""
    from harness.analyze.significance import nested_paired

    legs = list(ds.study.leg_names)
    if len(legs) != 2:
        raise UserError(f"{ds.root}: time to decide needs a study of two legs, it has {len(legs)}")
    old, new = legs
    cost = block_cost(ds, series=ds.study.main_series)
    taus = instance_taus(list(instances))
    extra = ds.study.extra
    # The margin the study's verdicts were decided at (`margin`: the caller already has it).
    margin = _margin(canonicalize(ds)) if margin is None else margin
    engine_sd = extra.get("engine_sd")
    logs = study_pair_logs([ds, *pool], old, new) if pool else {}
    out = []
    for cell, blocks in sorted(pair_logs(ds, old, new, series=ds.study.main_series).items()):
        res = nested_paired(list(blocks.values()), margin=margin)
        if res.pair_sd is None or cost is None:
            continue
        if pool:
            ev = _pooled(logs, cell)
            ds_ = [d for k, bl in logs.items() if k[1:] == cell for b in bl.values() for d in b]
            m, pv, own_bv = float(np.mean(ds_)), (ev.pair_sd or 0.0) ** 2, 2 * (ev.engine_sd or 0.0) ** 2
        else:
            m = float(np.mean(np.concatenate([np.asarray(b) for b in blocks.values()])))
            pv, own_bv = res.pair_sd ** 2, (res.block_sd or 0.0) ** 2
        known = (old, cell) in taus and (new, cell) in taus
        bv = taus[(old, cell)] + taus[(new, cell)] if known else own_bv
        plan = cheapest_design([(m, pv, bv)], cost, margin=margin, engine_sd=engine_sd)
        out.append(CellTime(model=cell[0], workload=cell[1], ratio=math.exp(m), pair_var=pv,
                            block_var=bv, from_instances=known, plan=plan))
    return out, cost


def time_to_decide_lines(study: str, instances: list[str] = (), pool: list[str] = ()) -> list[str]:
    """What `make main` prints at its end: per cell, and for 3 and all 4 cells of its table, the engine
    blocks x pairs and minutes of measuring that would decide them (see `time_to_decide`): first at this
    run's own ratios and pass noise (with `instances`' engine-instance variance), then, with `pool`, at
    the ratios, pass noise and block variance of this run and the pooled studies together. One run's
    four blocks size a design poorly (three idle-host runs of one commit put "3 of 4" at 14, 38 and 70
    minutes); the pooled figure is the steadier one."""
    from harness.analyze.dataset import load

    ds = load(study)
    canon = canonicalize(ds)
    decided = _decided_cells(canon)
    margin = _margin(canon)
    engine_sd = ds.study.extra.get("engine_sd")
    cells, cost = time_to_decide(ds, instances=[load(p) for p in instances], margin=margin)
    if cost is None or not cells:
        return [f"time to decide: {study} has no paired blocks to size a design from"]
    src = ", ".join(instances) if instances and all(c.from_instances for c in cells) else "this run's own blocks"
    lines = [f"time to decide (80% power at this run's ratios and pass noise; engine-instance variance from {src}; "
             f"a block costs {cost.setup_s:.0f} s + {cost.round_s:.0f} s a round here; measuring time only):"]
    lines += _plan_lines(cells, cost, decided, margin=margin, engine_sd=engine_sd)
    lines.append(f"  decided in this run: {sum(1 for c in cells if (c.model, c.workload) in decided)} of {len(cells)} cells")
    # The run itself may be one of the pooled studies (make main into a shipped folder's name): once.
    pool = [p for p in pool if Path(p).resolve() != Path(study).resolve()]
    if pool:
        pooled, _ = time_to_decide(ds, pool=[load(p) for p in pool], margin=margin)
        lines.append(f"the same at the ratios, pass noise and engine-block variance of this run and {', '.join(pool)} "
                     f"together ({len(pool) + 1} studies' blocks, each study about its own mean):")
        lines += _plan_lines(pooled, cost, decided, margin=margin, engine_sd=engine_sd)
    return lines


def _plan_lines(cells: list[CellTime], cost: BlockCost, decided: dict[tuple[str, str], str], *,
                margin: float, engine_sd: float | None) -> list[str]:
    def say(p: Plan | None) -> str:
        return ("no design up to 60 blocks x 12 pairs" if p is None else
                f"{p.blocks} blocks x {p.pairs} pairs, about {p.seconds / 60:.0f} min")
    out = []
    # A cell this run already decided says so (the study's one verdict), not a design it no longer needs.
    for c in cells:
        v = decided.get((c.model, c.workload))
        out.append(f"  {c.model} · {c.workload} ({c.ratio:.2f}x): "
                   + (f"decided in this run ({v}); to decide it again: {say(c.plan)}" if v else say(c.plan)))
    params = [(math.log(c.ratio), c.pair_var, c.block_var) for c in cells]
    for need in sorted({min(3, len(cells)), len(cells)}):
        p = cheapest_design(params, cost, margin=margin, engine_sd=engine_sd, need=need)
        out.append(f"  {need} of {len(cells)} cells in one sweep: {say(p)}")
    return out


def _decided_cells(canon: Canonical) -> dict[tuple[str, str], str]:
    """{(model, workload): verdict text} of the study's cells its one verdict object decided."""
    from harness.analyze.verdicts import study_verdicts

    return {(c.model, c.workload): c.text for c in study_verdicts(canon).cells
            if c.verdict in ("faster", "slower", "equivalent")}


def _margin(canon: Canonical) -> float:
    """The equivalence margin the study's verdicts use (study.yaml's, else the device kind's default)."""
    from harness.analyze.verdicts import study_margin

    return study_margin(canon)[0]


# --- the tables' verdicts of every series of a study (an A/A measured as several runs) ---------------

def series_verdicts(ds: Dataset) -> list[dict[str, object]]:
    """Every series of a two-leg study as the tables decide it (harness.analyze.tables.kind_table on the
    series' canonical cells, each kind's table decided together): one row per (series, model, workload)
    with the ratio, its interval and the verdict. Nothing is re-decided here."""
    from harness.analyze import tables
    from harness.analyze.canonical import canonicalize

    rows: list[dict[str, object]] = []
    for series in sorted(set(ds.records["series"])):
        canon = canonicalize(ds, series=series)
        for kind in dict.fromkeys(canon.expected["kind"]):
            t = tables.kind_table(canon, kind)
            lab = next((c[: -len(" verdict")] for c in t.data.columns if str(c).endswith(" verdict")), None)
            if lab is None:
                continue
            for r in t.data.to_dict("records"):
                rows.append({"series": series, "model": r["model"], "workload": r["workload"], "kind": kind,
                             "ratio": r[lab], "low": r[f"{lab} low"], "high": r[f"{lab} high"],
                             "verdict": r[f"{lab} verdict"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    from harness.analyze.dataset import load

    p = argparse.ArgumentParser(prog="python -m harness.analyze.engine_variance",
                                description="Engine-instance variance of a paired study, and what would decide one.")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("components", help="per-workload instance sd and its 95%% upper bound of two legs")
    c.add_argument("study")
    c.add_argument("legs", nargs="*", help="old new (default: the study's A/A group, else its two legs)")
    c.add_argument("--pool", nargs="*", default=[], metavar="STUDY",
                   help="more studies of the same two legs whose blocks are pooled with the first's")
    v = sub.add_parser("verdicts", help="every series' verdicts as the tables give them, and their counts")
    v.add_argument("study")
    t = sub.add_parser("time-to-decide", help="per cell, the cheapest design that would decide it")
    t.add_argument("study")
    t.add_argument("--instances", nargs="*", default=[], help="A/A studies measuring the legs' instance variance")
    t.add_argument("--pool", nargs="*", default=[], metavar="STUDY",
                   help="more studies of the same two legs whose blocks give the ratios, pass noise and block variance")
    a = p.parse_args(argv)
    try:
        if a.cmd == "time-to-decide":
            print("\n".join(time_to_decide_lines(a.study, a.instances, a.pool)))
            return 0
        ds = load(a.study)
        if a.cmd == "verdicts":
            rows = series_verdicts(ds)
            for series in dict.fromkeys(r["series"] for r in rows):
                mine = [r for r in rows if r["series"] == series]
                counts = {w: sum(r["verdict"] == w for r in mine) for w in ("faster", "slower", "equivalent", "undecided")}
                print(f"{series}: " + ", ".join(f"{w} {n}" for w, n in counts.items()) + f" of {len(mine)}")
                for r in mine:
                    print(f"  {r['model']} · {r['workload']}: {r['ratio']:.3f}x [{r['low']:.3f}, {r['high']:.3f}] "
                          f"{r['verdict']}")
            return 0
        groups = ds.study.extra.get("aa") or []
        legs = a.legs or (list(groups[0]["legs"][:2]) if groups else list(ds.study.leg_names))
        if len(legs) != 2:
            raise UserError(f"{a.study}: name two legs (old new); the study has {len(legs)}")
        pool = [load(x) for x in a.pool]
        print(f"{a.study}: {legs[0]} vs {legs[1]}" + (" (an A/A: one stack)" if groups else "")
              + (f"; pooled with {', '.join(a.pool)}" if pool else ""))
        print(engine_variance_md(engine_variance(ds, *legs, pool=pool)), end="")
        for (model, wl), ev in by_workload(ds, *legs, pool=pool).items():
            print(f"  {model} · {wl}: " + engine_variance_md(ev), end="")
        return 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
