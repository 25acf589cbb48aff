"""Seeded simulations of the verdicts' error rates beyond the serial rule's (which lives beside it in
`significance`): the paired, interleaved design with engine instances as a level of their own and a
drifting host; equivalence at and beyond the margin; and a whole table's false discovery rate.

Every function draws log values from a stated model and applies the very rule the tables apply
(`significance.nested_paired`, `welch_log`, `decide_table`), vectorised where the rule allows it and
checked against the scalar rule in the tests. `python -m harness.analyze.simulation` prints the tables
docs/statistics.md shows.

The model of a paired block (one engine per leg, K rounds, legs alternating A B / B A):

    log value of a pass = host(t) + engine(leg, block) + effect·[new leg] + noise

host(t) is a random walk over the block's passes (`drift` per pass) with, with probability `step_p`
per block, one step of `step` at a random pass (a neighbour starting a job); engine(leg, block) is
each engine instance's own speed, normal with sd `tau`; noise is normal with sd `sigma` per pass.
Sizes default to what this project measured: the CPU probe's per-pass log sd about 0.04 per side
(0.057 per pair), the H200's 0.3-1%; tau is swept from 0 to twice sigma.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.analyze.significance import (ALPHA, NESTED_MIN_BLOCKS, NESTED_SIZE, PAIRED_MIN, POOL_LEVEL, Test,
                                          _decide, decide_table, look_alpha, nested_paired, welch_log)


@dataclass(frozen=True, kw_only=True)
class Host:
    sigma: float = 0.04     # per-pass noise, log sd, each side
    tau: float = 0.0        # engine-instance sd, each leg's engine in each block
    drift: float = 0.005    # host random walk, log sd per pass
    step: float = 0.05      # a step change of the host's speed...
    step_p: float = 0.3     # ...in this share of blocks, at a random pass


def paired_blocks(rng: np.random.Generator, reps: int, blocks: int, pairs: int, host: Host,
                  effect: float = 0.0) -> np.ndarray:
    """(reps, blocks, pairs) log pair ratios new/old from the block model above (balanced order)."""
    n_pass = 2 * pairs
    steps = rng.normal(0.0, host.drift, (reps, blocks, n_pass))
    h = np.cumsum(steps, axis=2)
    jump = rng.random((reps, blocks)) < host.step_p
    at = rng.integers(0, n_pass, (reps, blocks))
    h += np.where(jump[..., None] & (np.arange(n_pass)[None, None, :] >= at[..., None]), host.step, 0.0)
    k = np.arange(pairs)
    first = 2 * k          # time slot of the round's first pass
    new_first = (k % 2) == 1   # A B in odd rounds (1-based), B A in even
    t_new = np.where(new_first, first, first + 1)
    t_old = np.where(new_first, first + 1, first)
    eng = rng.normal(0.0, host.tau, (reps, blocks, 2))
    noise = rng.normal(0.0, host.sigma, (reps, blocks, pairs, 2))
    new = h[:, :, t_new] + eng[..., 1:2] + math.log1p(effect) + noise[..., 1]
    old = h[:, :, t_old] + eng[..., 0:1] + noise[..., 0]
    return new - old


def nested_verdicts(d: np.ndarray, *, alpha: float = ALPHA, margin: float | None = None,
                    engine_sd: float | None = None) -> np.ndarray:
    """The nested rule over rows of a (reps, blocks, pairs) array, vectorised: one verdict code per
    row (1 faster, -1 slower, 2 equivalent, 0 undecided). Balanced blocks only."""
    from scipy import stats as sps

    reps, b, k = d.shape
    n = b * k
    means = d.mean(axis=2)
    grand = means.mean(axis=1)
    ssw = ((d - means[..., None]) ** 2).sum(axis=(1, 2))
    ssb = k * ((means - grand[:, None]) ** 2).sum(axis=1)
    dfb, dfw = b - 1, n - b
    a = NESTED_SIZE * alpha
    se_blk = means.std(axis=1, ddof=1) / math.sqrt(b)
    if dfw > 0 and engine_sd is not None:
        msw, msb = ssw / dfw, ssb / dfb
        with np.errstate(divide="ignore", invalid="ignore"):
            f_p = sps.f.sf(msb / (msw + k * 2 * engine_sd ** 2), dfb, dfw)
        pooled = f_p >= POOL_LEVEL
        se = np.where(pooled, np.sqrt(msw / n + 2 * engine_sd ** 2 / b), se_blk)
        df = np.where(pooled, dfw, dfb).astype(float)
    else:
        se, df = se_blk, np.full(reps, float(dfb))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * sps.t.sf(np.abs(grand / se), df)
        code = np.where(p < a, np.sign(grand), 0).astype(int)
        if margin is not None:
            lim = math.log1p(margin)
            p_eq = 2 * np.maximum(sps.t.sf((grand + lim) / se, df), sps.t.cdf((grand - lim) / se, df))
            code = np.where((code == 0) & (p_eq < a), 2, code)
    return code


def paired_rates(blocks: int, pairs: int, host: Host, *, effect: float = 0.0, margin: float | None = None,
                 engine_sd: float | None = None, reps: int = 20000, seed: int = 0) -> dict[str, float]:
    """Shares of `reps` simulated paired comparisons called faster, slower, equivalent, by the rule
    given the engine bound `engine_sd` (the host's true tau may be below or above it)."""
    rng = np.random.default_rng(seed)
    code = nested_verdicts(paired_blocks(rng, reps, blocks, pairs, host, effect), margin=margin, engine_sd=engine_sd)
    return {"faster": float(np.mean(code == 1)), "slower": float(np.mean(code == -1)),
            "equivalent": float(np.mean(code == 2)), "difference": float(np.mean(np.abs(code) == 1))}


def welch_equivalent_rate(n: int, *, log_sd: float, effect: float, margin: float, reps: int = 20000,
                          seed: int = 0, alpha: float = ALPHA) -> float:
    """Share of simulated serial comparisons (n repeats per side, log-normal) called "equivalent"."""
    from scipy import stats as sps

    rng = np.random.default_rng(seed)
    a = rng.normal(math.log1p(effect), log_sd, (reps, n))
    b = rng.normal(0.0, log_sd, (reps, n))
    m = a.mean(axis=1) - b.mean(axis=1)
    se = np.sqrt(a.var(axis=1, ddof=1) / n + b.var(axis=1, ddof=1) / n)
    va, vb = a.var(axis=1, ddof=1) / n, b.var(axis=1, ddof=1) / n
    df = (va + vb) ** 2 / (va ** 2 / (n - 1) + vb ** 2 / (n - 1))
    lim = math.log1p(margin)
    p_eq = 2 * np.maximum(sps.t.sf((m + lim) / se, df), sps.t.cdf((m - lim) / se, df))
    p = 2 * sps.t.sf(np.abs(m / se), df)
    return float(np.mean((p >= alpha) & (p_eq < alpha)))


# --- a table's false discovery rate ----------------------------------------------------------------

def table_fdr(cells: int, *, null_share: float, effect: float, margin: float, sigma: float, blocks: int,
              pairs: int, tau: float = 0.0, engine_sd: float | None = None, reps: int = 400, seed: int = 0,
              controlled: bool = True) -> dict[str, float]:
    """Tables of `cells` paired comparisons, a `null_share` of them with no true difference (so
    "equivalent" is right there and "faster"/"slower" wrong) and the rest truly `effect` apart, more
    than the margin (so "equivalent" is wrong there). Returns the mean false discovery proportion over
    `reps` tables, with `decide_table` (controlled) or each cell's own verdict."""
    rng = np.random.default_rng(seed)
    host = Host(sigma=sigma, tau=tau)
    fdp, decided = [], []
    n_null = int(round(cells * null_share))
    for _ in range(reps):
        tests: list[Test] = []
        truth: list[float] = []
        for c in range(cells):
            # Non-null cells truly `effect` apart, either way round (1 + effect, or its inverse).
            e = 0.0 if c < n_null else (effect if rng.random() < 0.5 else 1 / (1 + effect) - 1)
            d = paired_blocks(rng, 1, blocks, pairs, host, e)[0]
            tests.append(nested_paired(list(d), margin=margin, engine_sd=engine_sd).test)
            truth.append(e)
        verdicts = decide_table(tests) if controlled else [t.verdict for t in tests]
        wrong = sum(1 for v, e in zip(verdicts, truth) if (v in ("faster", "slower") and e == 0.0)
                    or (v == "equivalent" and abs(math.log1p(e)) >= math.log1p(margin) - 1e-12)
                    or (v == "faster" and e < 0) or (v == "slower" and e > 0))
        made = sum(1 for v in verdicts if v in ("faster", "slower", "equivalent"))
        fdp.append(wrong / max(made, 1))
        decided.append(made / cells)
    return {"fdr": float(np.mean(fdp)), "decided": float(np.mean(decided))}


def sequential_rates(min_blocks: int, max_blocks: int, pairs: int, host: Host, *, effect: float = 0.0,
                     margin: float | None = None, engine_sd: float | None = None, adjusted: bool = True,
                     reps: int = 20000, seed: int = 0) -> dict[str, float]:
    """One cell measured until decided: a look after every block from `min_blocks` to `max_blocks`, each
    testing at `look_alpha(looks)` (or, `adjusted=False`, at alpha every time: the naive rule), stopping
    at the first look that decides. Shares of `reps` cells whose verdict at the stop is faster, slower,
    equivalent; `difference` (either way) and the mean number of blocks measured."""
    rng = np.random.default_rng(seed)
    d = paired_blocks(rng, reps, max_blocks, pairs, host, effect)
    looks = max_blocks - min_blocks + 1
    a = look_alpha(looks) if adjusted else ALPHA
    final = np.zeros(reps, dtype=int)
    used = np.full(reps, max_blocks)
    open_ = np.ones(reps, dtype=bool)
    for b in range(min_blocks, max_blocks + 1):
        code = nested_verdicts(d[:, :b, :], alpha=a, margin=margin, engine_sd=engine_sd)
        now = open_ & (code != 0)
        final[now], used[now] = code[now], b
        open_ &= ~now
    return {"faster": float(np.mean(final == 1)), "slower": float(np.mean(final == -1)),
            "equivalent": float(np.mean(final == 2)), "difference": float(np.mean(np.abs(final) == 1)),
            "blocks": float(np.mean(used))}


def sequential_table_fdr(cells: int, *, null_share: float, effect: float, margin: float, sigma: float,
                         min_blocks: int, max_blocks: int, pairs: int, tau: float = 0.0, reps: int = 200,
                         seed: int = 0) -> dict[str, float]:
    """`table_fdr` for a sweep that stops once every cell of the table is decided: at each look the
    cells are tested at `look_alpha(looks)` and decided together (`decide_table` at that level); the
    false discovery proportion is counted at the look where the sweep stopped (or the last)."""
    rng = np.random.default_rng(seed)
    host = Host(sigma=sigma, tau=tau)
    looks = max_blocks - min_blocks + 1
    a = look_alpha(looks)
    n_null = int(round(cells * null_share))
    fdp, used = [], []
    for _ in range(reps):
        truth = [0.0 if c < n_null else (effect if rng.random() < 0.5 else 1 / (1 + effect) - 1)
                 for c in range(cells)]
        data = [paired_blocks(rng, 1, max_blocks, pairs, host, e)[0] for e in truth]
        for b in range(min_blocks, max_blocks + 1):
            tests = [nested_paired(list(d[:b]), alpha=a, margin=margin).test for d in data]
            verdicts = decide_table(tests, alpha=a)
            if all(v in ("faster", "slower", "equivalent") for v in verdicts):
                break
        wrong = sum(1 for v, e in zip(verdicts, truth) if (v in ("faster", "slower") and e == 0.0)
                    or (v == "equivalent" and abs(math.log1p(e)) >= math.log1p(margin) - 1e-12)
                    or (v == "faster" and e < 0) or (v == "slower" and e > 0))
        made = sum(1 for v in verdicts if v in ("faster", "slower", "equivalent"))
        fdp.append(wrong / max(made, 1))
        used.append(b)
    return {"fdr": float(np.mean(fdp)), "blocks": float(np.mean(used))}


def scalar_check(d: np.ndarray, margin: float | None) -> int:
    """The scalar rule's verdict code for one (blocks, pairs) array: the tests compare it with the
    vectorised rule."""
    t = nested_paired(list(d), margin=margin).test
    return {"faster": 1, "slower": -1, "equivalent": 2}.get(t.verdict, 0)


# --- the printed tables -------------------------------------------------------------------------------

BLOCKS = (2, 3, 4, 6)
PAIRS = (2, 3, 4, 6, 8, 12)
TAU_X = (0.0, 0.5, 1.0, 1.5, 2.0)   # the host's true engine-instance sd as a multiple of the rule's bound
EFFECTS = (0.01, 0.02, 0.05, 0.10)


def fpr_grid(sigma: float = 0.04, bound: float = 0.01, *, reps: int = 20000, seed: int = 0,
             blocks: Sequence[int] = BLOCKS, pairs: Sequence[int] = PAIRS,
             tau_x: Sequence[float] = TAU_X) -> list[dict[str, float]]:
    """False "faster"/"slower" rate at every (blocks, pairs) the design allows, for engines that differ
    by up to twice the bound the rule was given (within it the rate must stay at or below alpha)."""
    rows = []
    for b in blocks:
        for k in pairs:
            if b * k < PAIRED_MIN or b < NESTED_MIN_BLOCKS:
                continue
            for i, tx in enumerate(tau_x):
                r = paired_rates(b, k, Host(sigma=sigma, tau=tx * bound), engine_sd=bound, reps=reps,
                                 seed=seed + 7919 * b + 101 * k + i)
                rows.append({"blocks": b, "pairs": k, "tau/bound": tx, "fpr": r["difference"]})
    return rows


def power_grid(sigma: float = 0.04, bound: float = 0.01, *, reps: int = 20000, seed: int = 1,
               blocks: Sequence[int] = (2, 3), pairs: Sequence[int] = (4, 8, 12), margin: float = 0.05) -> list[dict[str, float]]:
    """Power at EFFECTS and the rate of "equivalent" at no difference, engines differing by half the bound."""
    rows = []
    host = Host(sigma=sigma, tau=bound / 2)
    for b in blocks:
        for k in pairs:
            row: dict[str, float] = {"blocks": b, "pairs": k}
            for e in EFFECTS:
                row[f"power {e:.0%}"] = paired_rates(b, k, host, effect=e, engine_sd=bound, reps=reps,
                                                     seed=seed + b * 31 + k)["difference"]
            row[f"equivalent at 0 (±{margin:.0%})"] = paired_rates(b, k, host, margin=margin, engine_sd=bound,
                                                                  reps=reps, seed=seed + b * 37 + k)["equivalent"]
            rows.append(row)
    return rows


def _md(rows: list[dict[str, float]]) -> str:
    cols = list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for r in rows:
        out.append("| " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m harness.analyze.simulation",
                                description="Error rates of the paired design, equivalence and a table's FDR.")
    p.add_argument("--reps", type=int, default=20000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sigma", type=float, default=0.04, help="per-pass log sd, each side")
    p.add_argument("--bound", type=float, default=0.01, help="the rule's engine_sd bound")
    p.add_argument("--study", help="take sigma (pair sd / sqrt 2) and the bound (the engine sd's 95%% upper bound) "
                                   "from this paired study's records, old leg then new: --study DIR OLD NEW",
                   nargs=3, metavar=("DIR", "OLD", "NEW"))
    p.add_argument("--aa", nargs=2, metavar=("OLD_AA", "NEW_AA"),
                   help="instead: a table of the legs' cells at the variance components the two A/A studies "
                        "measured (the old leg's stack, the new leg's): A/A false-call rate and power per design")
    p.add_argument("--design", action="append", type=_design, default=None,
                   help="with --aa: BLOCKSxPAIRS[@ENGINE_SD], repeatable (default: make main's 4x3)")
    a = p.parse_args(argv)
    if a.aa:
        from harness.core.errors import UserError

        try:
            cells = measured_components(*a.aa)
        except (UserError, ValueError) as e:
            p.exit(2, f"error: {e}\n")
        if not cells:
            p.exit(2, f"error: {a.aa[0]}, {a.aa[1]}: no (model, workload) cell with two blocks in both\n")
        # One family, as the study's verdicts are decided (harness.analyze.verdicts: every step cell, all
        # kinds together): the table of verdicts here is the study's.
        fams = [list(range(len(cells)))]
        print(f"## A study of {len(cells)} cells at the components of {a.aa[0]} (old) and {a.aa[1]} (new); "
              f"one family (BH over every cell of the step, as harness.analyze.verdicts decides them); "
              f"seed {a.seed}, {a.reps} studies per row\n")
        print(aa_report(cells, a.design or [(4, 3, None)], reps=a.reps, seed=a.seed, families=fams))
        return
    if a.study:
        from harness.analyze.dataset import load
        from harness.analyze.engine_variance import engine_variance, engine_variance_md

        ev = engine_variance(load(a.study[0]), a.study[1], a.study[2])
        if ev.pair_sd is None or ev.engine_sd_upper is None:
            p.error(f"{a.study[0]}: no engine variance to take ({ev.cells} cells with two blocks)")
        a.sigma, a.bound = ev.pair_sd / math.sqrt(2), max(ev.engine_sd_upper, 1e-4)
        print(f"sizes from {a.study[0]}: " + engine_variance_md(ev))
    rows = fpr_grid(a.sigma, a.bound, reps=a.reps, seed=a.seed)
    print(f"## False difference rate, paired design (sigma {a.sigma}, bound {a.bound})\n")
    print(_md(rows))
    within = [r["fpr"] for r in rows if r["tau/bound"] <= 1]
    print(f"largest within the bound: {max(within):.4f}; beyond it: "
          + ", ".join(f"{tx}x {max(r['fpr'] for r in rows if r['tau/bound'] == tx):.4f}" for tx in TAU_X if tx > 1) + "\n")
    print("## Power and equivalence at no difference\n")
    print(_md(power_grid(a.sigma, a.bound, reps=a.reps, seed=a.seed + 1)))
    print("## Equivalence claimed when the true difference is the margin (5%) or more\n")
    eq = []
    for b in (2, 3, 4):
        for k in (3, 6, 12):
            for e in (0.05, 0.0625):
                eq.append({"blocks": b, "pairs": k, "true effect": e,
                           "equivalent": paired_rates(b, k, Host(sigma=a.sigma / 4, tau=0.0), effect=e, margin=0.05,
                                                      engine_sd=a.bound / 4, reps=a.reps,
                                                      seed=a.seed + 17 * b + k)["equivalent"]})
    print(_md(eq))
    print("## A table's false discovery rate (Benjamini–Hochberg vs each cell alone)\n")
    fd = []
    for cells in (20, 70):
        for ns in (0.8, 0.95):
            for ctl in (True, False):
                r = table_fdr(cells, null_share=ns, effect=0.10, margin=0.05, sigma=a.sigma, blocks=2, pairs=8,
                              tau=0.005, engine_sd=0.01, reps=200, seed=a.seed, controlled=ctl)
                fd.append({"cells": cells, "null share": ns, "rule": "BH" if ctl else "per cell", **r})
    print(_md(fd))



# --- a whole table at measured variance components: the A/A false-call rate and power --------------

def nested_p(d: np.ndarray, *, margin: float | None = None, engine_sd: float | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The nested rule's difference p, equivalence p (doubled TOST, 1 without a margin) and the sign of
    the mean log ratio for each row of a (reps, blocks, pairs) array: what `decide_table` reads of a
    cell's Test (significance.nested_paired; NESTED_SIZE is 1, so no rescaling). Balanced blocks only."""
    from scipy import stats as sps

    reps, b, k = d.shape
    n = b * k
    means = d.mean(axis=2)
    grand = means.mean(axis=1)
    se = means.std(axis=1, ddof=1) / math.sqrt(b)
    df = np.full(reps, float(b - 1))
    if engine_sd is not None and n - b > 0:
        ssw = ((d - means[..., None]) ** 2).sum(axis=(1, 2))
        ssb = k * ((means - grand[:, None]) ** 2).sum(axis=1)
        msw, msb = ssw / (n - b), ssb / (b - 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            pooled = sps.f.sf(msb / (msw + k * 2 * engine_sd ** 2), b - 1, n - b) >= POOL_LEVEL
        se = np.where(pooled, np.sqrt(msw / n + 2 * engine_sd ** 2 / b), se)
        df = np.where(pooled, float(n - b), df)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * sps.t.sf(np.abs(grand / se), df)
        if margin is None:
            p_eq = np.ones(reps)
        else:
            lim = math.log1p(margin)
            p_eq = np.minimum(1.0, 2 * np.maximum(sps.t.sf((grand + lim) / se, df), sps.t.cdf((grand - lim) / se, df)))
    return p, p_eq, np.sign(grand)


def _bh_rejected(q: np.ndarray, *, alpha: float) -> np.ndarray:
    """Benjamini–Hochberg's rejections over the columns of each row of a (reps, m) array of p-values."""
    reps, m = q.shape
    order = np.argsort(q, axis=1, kind="stable")
    qs = np.take_along_axis(q, order, axis=1)
    ok = qs <= (np.arange(1, m + 1) / m * alpha)[None, :]
    k = np.where(ok.any(axis=1), m - np.argmax(ok[:, ::-1], axis=1), 0)   # the largest j with q_(j) <= j/m alpha
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(m)[None, :].repeat(reps, axis=0), axis=1)
    return rank < k[:, None]


def bh_codes(p: np.ndarray, p_eq: np.ndarray, sign: np.ndarray, *, alpha: float = ALPHA) -> np.ndarray:
    """`decide_table` over the cells of each row of (reps, cells) arrays, vectorised: codes 1 faster,
    -1 slower, 2 equivalent, 0 undecided. Benjamini–Hochberg over the difference p's, and apart over
    the equivalence p's; a cell rejected in the first is faster or slower."""
    diff = _bh_rejected(p, alpha=alpha)
    equiv = _bh_rejected(p_eq, alpha=alpha)
    return np.where(diff, sign, np.where(equiv, 2, 0)).astype(int)


@dataclass(frozen=True, kw_only=True)
class Component:
    """One cell's measured variance components: the pass pairs' log sd within a block, and each leg's
    engine-instance sd (tau), both on the log scale."""
    name: str
    pair_sd: float
    tau_old: float
    tau_new: float
    kind: str = ""      # the workload kind: the tables decide each kind's cells as one family


def table_codes(cells: Sequence[Component], blocks: int, pairs: int, *, effect: float = 0.0,
                margin: float | None = 0.05, engine_sd: float | None = None, reps: int = 20000,
                seed: int = 0, families: Sequence[Sequence[int]] | None = None) -> np.ndarray:
    """(reps, cells) verdict codes of simulated tables measured with `blocks` x `pairs`: each cell's pair
    ratios d = effect + (u_new - u_old) + e, u ~ N(0, tau) per leg and block, e ~ N(0, pair_sd) per pair
    (the components as measured, host drift within a pair included in pair_sd), decided by the nested
    rule and Benjamini–Hochberg over each family of cells (`families`: lists of cell indices, default one
    family of all; the tables today decide each kind's table, throughput and latency, apart)."""
    rng = np.random.default_rng(seed)
    ps, peqs, signs = [], [], []
    for c in cells:
        u = (rng.normal(0.0, c.tau_new, (reps, blocks, 1)) - rng.normal(0.0, c.tau_old, (reps, blocks, 1)))
        d = math.log1p(effect) + u + rng.normal(0.0, c.pair_sd, (reps, blocks, pairs))
        p, p_eq, s = nested_p(d, margin=margin, engine_sd=engine_sd)
        ps.append(p), peqs.append(p_eq), signs.append(s)
    p, p_eq, sign = np.stack(ps, axis=1), np.stack(peqs, axis=1), np.stack(signs, axis=1)
    out = np.zeros(p.shape, dtype=int)
    for fam in families or [list(range(len(cells)))]:
        out[:, fam] = bh_codes(p[:, fam], p_eq[:, fam], sign[:, fam])
    return out


def table_rates(cells: Sequence[Component], blocks: int, pairs: int, *, effect: float = 0.0,
                margin: float | None = 0.05, engine_sd: float | None = None, reps: int = 20000,
                seed: int = 0, families: Sequence[Sequence[int]] | None = None) -> dict[str, float]:
    """At `effect` 0 (an A/A): `false_call` the share of studies with any cell called faster or slower,
    `false_call_family` the same per family (each family a table of its own; their mean), and the mean
    counts of equivalent and undecided cells per study. At an effect: `power` the share of cells called
    faster (the true direction), and the share of studies with at least 3 cells decided."""
    code = table_codes(cells, blocks, pairs, effect=effect, margin=margin, engine_sd=engine_sd, reps=reps,
                       seed=seed, families=families)
    decided = (code != 0).sum(axis=1)
    wrong = np.abs(code) == 1
    fams = families or [list(range(len(cells)))]
    return {"false_call": float(np.mean(wrong.any(axis=1))) if effect == 0 else float("nan"),
            "false_call_family": (float(np.mean([np.mean(wrong[:, f].any(axis=1)) for f in fams]))
                                  if effect == 0 else float("nan")),
            "equivalent": float(np.mean((code == 2).sum(axis=1))),
            "undecided": float(np.mean((code == 0).sum(axis=1))),
            "power": float(np.mean(code == 1)) if effect > 0 else float("nan"),
            "wrong_way": float(np.mean(code == -1)) if effect > 0 else float("nan"),
            "three_decided": float(np.mean(decided >= 3))}


def measured_components(old_study: str, new_study: str | None = None) -> list[Component]:
    """Per (model, workload): pair sd and each leg's tau from A/A studies (study.yaml `aa`): `old_study`
    measures the old leg's stack, `new_study` the new leg's (the same study when None). The pair sd is
    the larger of the two studies' (the noisier pass pairs)."""
    from harness.analyze.dataset import load
    from harness.analyze.engine_variance import by_workload

    kinds: dict[tuple[str, str], str] = {}

    def per_cell(path: str) -> dict[tuple[str, str], tuple[float, float]]:
        ds = load(path)
        kinds.update({(r["model"], r["workload"]): str(r["kind"]) for r in ds.records.to_dict("records")})
        groups = ds.study.extra.get("aa") or []
        if not groups:
            raise ValueError(f"{path}: not an A/A study (study.yaml has no `aa`)")
        legs = list(groups[0]["legs"])
        return {cell: (ev.pair_sd, ev.engine_sd) for cell, ev in by_workload(ds, legs[0], legs[1]).items()
                if ev.pair_sd is not None and ev.engine_sd is not None}
    a = per_cell(old_study)
    b = per_cell(new_study) if new_study else a
    return [Component(name=f"{m} · {w}", pair_sd=max(a[(m, w)][0], b[(m, w)][0]), tau_old=a[(m, w)][1],
                      tau_new=b[(m, w)][1], kind=kinds.get((m, w), "")) for (m, w) in sorted(set(a) & set(b))]


def _design(text: str) -> tuple[int, int, float | None]:
    """BLOCKSxPAIRS or BLOCKSxPAIRS@ENGINE_SD, e.g. 4x3 (make main's, block means) or 4x6@0.012."""
    import re

    m = re.fullmatch(r"(\d+)x(\d+)(?:@([0-9.]+))?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: expected BLOCKSxPAIRS or BLOCKSxPAIRS@ENGINE_SD")
    return int(m.group(1)), int(m.group(2)), float(m.group(3)) if m.group(3) else None


def aa_report(cells: Sequence[Component], designs: Sequence[tuple[int, int, float | None]], *,
              effects: Sequence[float] = (0.03, 0.05, 0.08), margin: float = 0.05, reps: int = 20000,
              seed: int = 0, families: Sequence[Sequence[int]] | None = None) -> str:
    """The markdown the cpu-aa README shows: per design (blocks, pairs, engine_sd or None), the A/A
    false-call rate per table (family) and per study, equivalent and undecided cells per study, and the
    power at `effects`."""
    rows = []
    for i, (b, k, bound) in enumerate(designs):
        aa = table_rates(cells, b, k, margin=margin, engine_sd=bound, reps=reps, seed=seed + 97 * i, families=families)
        row: dict[str, object] = {"blocks": b, "pairs": k, "engine_sd": "-" if bound is None else f"{bound:.4f}",
                                  "A/A false call (table)": aa["false_call_family"],
                                  "A/A false call (study)": aa["false_call"],
                                  f"A/A equivalent (of {len(cells)})": aa["equivalent"],
                                  f"A/A undecided (of {len(cells)})": aa["undecided"]}
        for j, e in enumerate(effects):
            r = table_rates(cells, b, k, effect=e, margin=margin, engine_sd=bound, reps=reps,
                            seed=seed + 97 * i + j + 1, families=families)
            row[f"power {e:.0%}"] = r["power"]
            row[f">=3 decided at {e:.0%}"] = r["three_decided"]
        rows.append(row)
    comp = "\n".join(f"- {c.name}: pair sd {c.pair_sd:.4f}, tau old {c.tau_old:.4f}, tau new {c.tau_new:.4f}"
                     for c in cells)
    return comp + "\n\n" + _md(rows)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
