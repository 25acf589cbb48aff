"""The crosscheck's one-engine design: both tools timed on the same engine, their passes alternating.

The per-run crosscheck (crosscheck.py) starts an engine for every run, so the two runs of a pair stand
on two engine instances a minute or more apart, and an instance's own speed and the host's drift land
inside every pair ratio (measured: pair ratios spread 5-20% on the 2-core host, ±5% on one H200).
Here, for each leg, model and engine block, ONE engine is started (measure/paired.py with `sides`), and
each round runs, for every workload, the harness's timed pass and one call of vLLM's own benchmark
main() on that engine (worker/vllm_bench.LentSide: main() unchanged but for its engine construction,
which returns the resident engine; the engine arguments it asked for are checked against the ones
the engine was started with, and a difference fails the run). Their order swaps every round and every
block. What differs between the two sides is then only what each tool does around the engine: how it
builds and hands over its prompts (vLLM's chat front end, its data-URL decoding), its own clock.

Unit of replication: the engine block. A block's ratio is the geometric mean of its rounds' pass
ratios (harness ÷ vLLM, each round's two passes back to back); the interval is the paired rule's
one-sample t over the blocks' log ratios (three blocks or more), as for the per-run pairs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from harness.core.errors import UserError
from harness.measure.paired import Design
from harness.measure.run import RunSpec
from harness.measure.sweep import SweepArgs
from harness.schema import record

ONE_ENGINE = "one-engine"
DESIGN_LABEL = "one engine"          # the rows' `design`; per-run rows say "per run"
BLOCKS, PAIRS = 3, 4                 # defaults: 3 blocks (the paired rule's least) x 4 rounds


def wanted(args: SweepArgs) -> bool:
    """Asked for with `--design paired` (the scenario's own design is for its sweeps, not this)."""
    return args.design == "paired"


def design(args: SweepArgs) -> Design:
    for what, bad in (("--prime", args.prime), ("--repeats", args.repeats is not None),
                      ("--until-decided", bool(args.until_decided)), ("--executor ray", args.executor != "local"),
                      ("--engine", args.engine is not None), ("--profile", args.profile is not None)):
        if bad:
            raise UserError(f"{what} does not combine with the crosscheck's one-engine design (--design paired): "
                            "it sets engine blocks (--blocks) and rounds (--pairs), and warms each workload up "
                            "once per engine")
    blocks, pairs = args.blocks or BLOCKS, args.pairs or PAIRS
    if blocks < 1 or pairs < 1:
        raise UserError(f"--blocks {blocks} --pairs {pairs}: at least one block of one round")
    return Design(blocks=blocks, pairs=pairs, sides=True)


def arm_name(side: str, suffix: str) -> str:
    """`harness-one-engine…` / `vllm-bench-one-engine…`: runs of their own, never a per-run crosscheck's."""
    return f"{side}-{ONE_ENGINE}{suffix}"


def is_one_engine(arm: str) -> bool:
    return f"-{ONE_ENGINE}" in arm


def design_of(arm: str) -> str:
    return DESIGN_LABEL if is_one_engine(arm) else "per run"


def block_key(spec: RunSpec) -> tuple:
    """One engine per (block, model, leg), both sides and every workload on it."""
    return spec.repeat, spec.model.name, spec.leg_env.leg.name


def _block_passes(ours: Sequence[record.RunRecord],
                  theirs: Sequence[record.RunRecord]) -> list[list[tuple[float, float]]]:
    """Per block that has both sides, in block order: its rounds' (harness, vLLM) pass values, in round
    order, over the rounds where both ran. Only the two sides of one engine pair (the same block of one
    invocation)."""
    by_block = {r.repeat: r for r in theirs if r.paired is not None}
    out = []
    for r in sorted(ours, key=lambda r: r.repeat):
        v = by_block.get(r.repeat)
        if r.paired is None or v is None or v.invocation_id != r.invocation_id:
            continue
        mine = {p.round: p.value for p in r.paired.passes if p.value}
        other = {p.round: p.value for p in v.paired.passes if p.value}
        out.append([(mine[k], other[k]) for k in sorted(set(mine) & set(other))])
    return out


def pair_values(ours: Sequence[record.RunRecord], theirs: Sequence[record.RunRecord]) -> list[tuple[float, float]]:
    """(harness, vLLM) per block: the geometric means of the two sides' passes over its rounds, so
    their ratio is the geometric mean of the rounds' pass ratios."""
    def gmean(xs: list[float]) -> float:
        return math.exp(sum(map(math.log, xs)) / len(xs))
    return [(gmean([h for h, _ in b]), gmean([v for _, v in b])) for b in _block_passes(ours, theirs) if b]


def round_ratios(ours: Sequence[record.RunRecord], theirs: Sequence[record.RunRecord]) -> list[list[float]]:
    """Each block's rounds' pass ratios harness ÷ vLLM, in round order (the spread within an engine)."""
    return [[h / v for h, v in b] for b in _block_passes(ours, theirs)]


def rounds_md(rows: Sequence[dict]) -> list[str]:
    """The one-engine rows' rounds: their pass ratios' spread within the engines, and the unit said."""
    one = [r for r in rows if r.get("design") == DESIGN_LABEL and r.get("round_ratios")]
    if not one:
        return []
    parts = []
    for r in one:
        flat = [x for block in r["round_ratios"] for x in block]
        parts.append(f"{r['leg']} `{r['model']}` {r['workload']}: {len(r['round_ratios'])} block(s) of "
                     f"{', '.join(str(len(b)) for b in r['round_ratios'])} round(s), pass ratios "
                     f"{min(flat):.3f}–{max(flat):.3f}")
    return ["", "One engine (`--design paired`): both tools timed on the same engine, their passes alternating "
            "(each round's two back to back, the order swapped every round); the unit of replication is the engine "
            "block, whose ratio is the geometric mean of its rounds' pass ratios. " + "; ".join(parts) + "."]


SPLIT = ("call_s", "handover_s", "add_s", "tail_s")


def handover(ours: Sequence[record.RunRecord], theirs: Sequence[record.RunRecord]) -> dict[str, dict]:
    """Per side, over its passes that were split (record version 10): each part's median and range,
    in seconds. {} where no pass was split."""
    out: dict[str, dict] = {}
    for side, recs in (("harness", ours), ("vllm", theirs)):
        splits = [p.handover for r in recs if r.paired for p in r.paired.passes if p.handover]
        if not splits:
            continue
        out[side] = {"passes": len(splits), "requests": splits[0].requests}
        for key in SPLIT:
            xs = sorted(getattr(h, key) for h in splits)
            out[side][key] = {"median": statistics.median(xs), "min": xs[0], "max": xs[-1]}
    return out


def handover_md(rows: Sequence[dict]) -> list[str]:
    """Where each one-engine row's passes spent their region, per side: up to the last request
    handed to the engine (host-side work on every request) and after it (the engine finishing)."""
    def part(h: dict, key: str) -> str:
        x = h[key]
        return f"{x['median']:.2f} s ({x['min']:.2f}–{x['max']:.2f})"

    parts = []
    for r in rows:
        h = r.get("handover") or {}
        sides = [(name, h[key]) for name, key in (("harness", "harness"), ("vLLM", "vllm")) if key in h]
        if not sides:
            continue
        said = "; ".join(f"{name} ({s['passes']} passes of {s['requests']} requests): region {part(s, 'call_s')} = "
                         f"handover {part(s, 'handover_s')}, of it in add_request {part(s, 'add_s')}, "
                         f"+ after the last request {part(s, 'tail_s')}" for name, s in sides)
        parts.append(f"{r['leg']} `{r['model']}` {r['workload']}: {said}")
    if not parts:
        return []
    return ["", "Where the one-engine passes' regions went, median (range) per side (measured in the front end, "
            "harness/measure/worker/handover.py): *handover* runs from the call's start to the last request handed "
            "to the engine: each request rendered by the front end (vLLM's chat parsing, template and data-URL "
            "decoding; on both sides the multimodal processor) and, *in add_request*, the engine's input checks and "
            "the send to the engine core, which works on the requests it has meanwhile; *after* is the engine "
            "finishing what it holds. A gap between the tools in the handover is their host-side work; how much of "
            "it reaches the region depends on how much of it the engine hides. " + "; ".join(parts) + "."]
