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

import numpy as np

from harness.analyze.dataset import Dataset
from harness.workloads import metric_of


@dataclass(frozen=True, kw_only=True)
class EngineVariance:
    cells: int               # (model, workload) cells with at least two blocks of pairs
    blocks: int              # blocks summed over those cells
    pairs: int
    pair_sd: float | None    # pass-pair noise within blocks, log sd of d
    engine_sd: float | None  # one engine instance's sd, log scale (method of moments, >= 0)
    engine_sd_upper: float | None   # its 95% upper bound


def pair_logs(ds: Dataset, old: str, new: str) -> dict[tuple[str, str], dict[int, list[float]]]:
    """{(model, workload): {block: [d, ...]}} from the two legs' paired passes matched by (block, round)."""
    rec = ds.records
    ok = rec[(rec["status"] == "ok") & rec["paired_passes"].notna() & rec["leg"].isin([old, new])]
    by: dict[tuple[str, str, str, int], dict[int, float]] = {}
    kinds: dict[tuple[str, str], str] = {}
    for r in ok.to_dict("records"):
        by[(r["leg"], r["model"], r["workload"], int(r["paired_block"]))] = dict(r["paired_passes"])
        kinds[(r["model"], r["workload"])] = r["kind"]
    out: dict[tuple[str, str], dict[int, list[float]]] = {}
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


def estimate(cells: dict[tuple[str, str], dict[int, list[float]]], *, confidence: float = 0.95) -> EngineVariance:
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
    msw, msb, n0 = ssw / dfw, ssb / dfb, n0_num / n0_den
    tau2 = max(0.0, (msb - msw) / n0) / 2
    upper_msb = df_one * msb / float(sps.chi2.ppf(1 - confidence, df_one))
    tau2_up = max(0.0, (upper_msb - msw) / n0) / 2
    return EngineVariance(cells=n_cells, blocks=n_blocks, pairs=n_pairs, pair_sd=math.sqrt(msw),
                          engine_sd=math.sqrt(tau2), engine_sd_upper=math.sqrt(tau2_up))


def engine_variance(ds: Dataset, old: str, new: str) -> EngineVariance:
    """The engine-instance sd and its 95% upper bound from two legs' paired passes in `ds`."""
    return estimate(pair_logs(ds, old, new))


def engine_variance_md(ev: EngineVariance) -> str:
    if ev.engine_sd is None:
        return (f"Engine-instance variance: not estimable ({ev.cells} cells with two or more blocks; it needs "
                "at least two blocks with two pairs each).\n")
    return (f"Engine-instance sd (one leg's engine, log scale): {ev.engine_sd:.4f}, 95% upper bound "
            f"{ev.engine_sd_upper:.4f}; pass-pair sd within blocks {ev.pair_sd:.4f}; from {ev.pairs} pairs in "
            f"{ev.blocks} blocks over {ev.cells} (model, workload) cells.\n")
