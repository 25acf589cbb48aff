"""What a paired two-leg study resolves per unit of device time: for each (model, workload) cell, the
block means of the log pair ratios, their spread, the 95% interval they give, the device seconds one
engine block of that model cost, and from these the smallest difference the design would detect in
10 minutes of device time.

Why block means: in the paired design the engine instance varies more than the pass on the H200
(results/h200-modes), so the unit that carries the information is the block (a fresh engine per leg),
as in the nested rule (docs/statistics.md). One block measures every workload of its model, so a
block's device seconds are those of its model's whole block: the span from its first record's start
to its last record's end (the records of a block share the engines, and nothing else ran then).

Per 10 minutes: b10 = 600 / (mean block seconds) blocks fit, and the smallest difference detected
with 80% power at a two-sided 5% level is about 2.80 * sd_block / sqrt(b10) (normal approximation,
as results/h200-modes states its figure, so the two can be compared). The measured interval is the
t-interval over the blocks actually run. `python -m harness.analyze.resolution STUDY OLD NEW`.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from harness.analyze.dataset import Dataset
from harness.analyze.engine_variance import pair_logs

Z_POWER = 2.80   # z(0.975) + z(0.80): two-sided 5% level, 80% power


@dataclass(frozen=True, kw_only=True)
class CellResolution:
    model: str
    workload: str
    block_means: list[float]        # per block, mean of its log pair ratios (new over old, speed)
    ratio: float                    # exp of their mean
    low: float | None               # 95% t-interval over the blocks (None below two blocks)
    high: float | None
    block_sd: float | None          # sd of the block means, log scale
    block_s: list[float]            # device seconds of each of this model's blocks
    detectable_10min: float | None  # 2.80 * block_sd / sqrt(600 / mean block seconds), as a fraction


def block_seconds(ds: Dataset, legs: tuple[str, str]) -> dict[tuple[str, int], float]:
    """(model, block) -> seconds from the block's first record start to its last record end."""
    rec = ds.records
    rec = rec[(rec["status"] == "ok") & rec["paired_block"].notna() & rec["leg"].isin(legs)]
    spans: dict[tuple[str, int], list[datetime]] = {}
    for r in rec.to_dict("records"):
        start = datetime.fromisoformat(str(r["started_at"]))
        end = start + timedelta(seconds=float(r["wall_s"]))
        spans.setdefault((r["model"], int(r["paired_block"])), []).extend([start, end])
    return {k: (max(v) - min(v)).total_seconds() for k, v in spans.items()}


def resolve(cells: dict[tuple[str, str], dict[int, list[float]]],
            seconds: dict[tuple[str, int], float]) -> list[CellResolution]:
    from scipy import stats as sps

    out = []
    for (model, workload), blocks in sorted(cells.items()):
        means = [float(np.mean(blocks[b])) for b in sorted(blocks) if blocks[b]]
        n = len(means)
        mean = float(np.mean(means))
        sd = float(np.std(means, ddof=1)) if n > 1 else None
        low = high = None
        if sd is not None:
            half = float(sps.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
            low, high = math.exp(mean - half), math.exp(mean + half)
        secs = [seconds[(model, b)] for b in sorted(blocks) if (model, b) in seconds]
        det = None
        if sd is not None and secs:
            det = Z_POWER * sd / math.sqrt(600.0 / float(np.mean(secs)))
        out.append(CellResolution(model=model, workload=workload, block_means=means, ratio=math.exp(mean),
                                  low=low, high=high, block_sd=sd, block_s=secs, detectable_10min=det))
    return out


def resolution(ds: Dataset, old: str, new: str) -> list[CellResolution]:
    return resolve(pair_logs(ds, old, new), block_seconds(ds, (old, new)))


def _f(x: float | None, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def resolution_md(rows: list[CellResolution], old: str, new: str) -> str:
    lines = [f"Speed ratio {new} over {old} from the paired passes (above 1: {new} faster), block by block.\n",
             "| model | workload | blocks | block ratios | ratio [95% CI over blocks] | interval width | "
             "block sd (log) | device s per block | detectable in 10 min |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ci = f"[{_f(r.low, '.4f')}, {_f(r.high, '.4f')}]"
        width = None if r.low is None or r.high is None else r.high - r.low
        secs = ", ".join(f"{s:.0f}" for s in r.block_s)
        lines.append(f"| {r.model} | {r.workload} | {len(r.block_means)} | "
                     f"{', '.join(f'{math.exp(m):.4f}' for m in r.block_means)} | {r.ratio:.4f} {ci} | "
                     f"{_f(None if width is None else 100 * width, '.2f')}% | {_f(r.block_sd, '.4f')} | {secs} | "
                     f"{_f(None if r.detectable_10min is None else 100 * r.detectable_10min, '.2f')}% |")
    lines.append("\n_Detectable in 10 min: 2.80 × block sd / √(600 s / mean device s per block), the smallest "
                 "difference found with 80% power at a two-sided 5% level (normal approximation). Device s "
                 "per block: the model's whole block (all its workloads), the first block's engines compiling "
                 "from an empty cache._\n")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.analyze.resolution",
                                description="What a paired two-leg study resolves per 10 minutes of device time.")
    p.add_argument("study", help="the study folder (results/NAME)")
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--out", help="also write the table to this new file (an existing file is never overwritten)")
    a = p.parse_args(argv)
    from harness.analyze.dataset import load
    from harness.core.errors import UserError

    try:
        rows = resolution(load(a.study), a.old, a.new)
    except (UserError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: {a.study}: no paired passes of both {a.old} and {a.new}", file=sys.stderr)
        return 2
    md = resolution_md(rows, a.old, a.new)
    print(md)
    if a.out:
        # "x": the file must be new; a file the user already has (or an earlier table) is not overwritten.
        try:
            with open(a.out, "x", encoding="utf-8") as f:
                f.write(md)
        except FileExistsError:
            print(f"error: {a.out}: exists; --out writes a new file only (name another, or move it away)",
                  file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
