"""Stop when decided: the rule a paired sweep asks after each engine block (`sweep --until-decided`).

It lives here, above both the measuring and the analysis packages, because it is both: the sweep
(harness.measure) hands it the records measured so far, and it decides them with the tables' own rule
(harness.analyze: the nested paired rule per cell, Benjamini–Hochberg over the cells), at the level
each look is planned to test at, alpha / looks (significance.look_alpha). The tables test the finished
study at the same level (study.yaml's `looks`), so the verdict read at the stop is the one printed.
"""

from __future__ import annotations

from typing import Any

from harness import workloads
from harness.analyze.significance import decide_table, default_margin, look_alpha
from harness.analyze.stats import nested_ratio
from harness.measure.paired import Design
from harness.schema.record import RunRecord

DECIDED = ("faster", "slower", "equivalent")


def cell_blocks(records: list[RunRecord], old: str, new: str) -> dict[tuple[str, str, str], list[list[tuple[float, float]]]]:
    """Per (model, workload, arm): each engine block's (old, new) pass values, matched by round."""
    passes: dict[tuple[str, str, str], dict[str, dict[tuple[int, int], float]]] = {}
    for r in records:
        if r.paired is None or r.leg not in (old, new):
            continue
        key = (r.model, r.workload, r.arm)
        side = passes.setdefault(key, {}).setdefault(r.leg, {})
        for p in r.paired.passes:
            if p.value is not None and p.value > 0:
                side[(r.repeat, p.round)] = float(p.value)
    out = {}
    for key, sides in passes.items():
        a, b = sides.get(old, {}), sides.get(new, {})
        blocks: dict[int, list[tuple[float, float]]] = {}
        for k in sorted(set(a) & set(b)):
            blocks.setdefault(k[0], []).append((a[k], b[k]))
        out[key] = list(blocks.values())
    return out


def until_decided(records: list[RunRecord], done_block: int, design: Design, sc: Any) -> str | None:
    """None to measure the next block, or why to stop: every cell decided at this look."""
    if done_block < design.min_blocks:
        return None
    legs = next((r.paired.legs for r in records if r.paired is not None), [])
    if len(legs) != 2:
        return None
    old, new = legs
    alpha = look_alpha(design.looks)
    device = next((r.manifest.get("device") for r in records if r.manifest.get("device")), None)
    margin = sc.margin if sc.margin is not None else default_margin(device)
    kinds = {(r.model, r.workload, r.arm): str(r.workload_spec.get("kind")) for r in records}
    tests = []
    for key, blocks in sorted(cell_blocks(records, old, new).items()):
        metric = workloads.metric_of(kinds[key])
        rt = nested_ratio(blocks, higher_is_better=metric.higher_is_better, confidence=1 - alpha, margin=margin,
                          engine_sd=sc.engine_sd)
        tests.append(rt.test)
    verdicts = decide_table(tests, alpha=alpha)
    if verdicts and all(v in DECIDED for v in verdicts):
        look = done_block - design.min_blocks + 1
        return f"every cell decided at look {look} of {design.looks} (each tested at α/{design.looks})"
    return None
