"""The harness against vLLM's own throughput benchmark, in the same venv on the same scenario.

For every throughput workload and repeat, a harness run and a vLLM-benchmark run go back to back
(repetition outermost, so drift hits both alike). Both are ordinary runs of the scenario's series:
the harness run is the default arm (so `--resume` reuses main-sweep runs and vice versa), vLLM's
is the arm `vllm-bench`, which canonical selection never takes. The summary is the ratio
harness ÷ vLLM with its bootstrap interval, the repeat spread of each, and the share of each run's
wall time that was the timed region.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.schema import crosscheck as crosscheck_file
from harness.schema import record
from harness.schema.crosscheck import CrosscheckRecord
from harness.core.errors import UserError
from harness.measure.run import WORKER, RunSpec
from harness.measure.scenario import Arm
from harness.analyze.stats import ratio
from harness.measure.sweep import PlannedRun, SweepArgs, execute_plan, plan, reusable

VLLM_BENCH = WORKER.parent / "vllm_bench.py"  # beside the harness worker, run with the leg's Python
VLLM_ARM = "vllm-bench"


HARNESS_ARM = "default"
# vLLM's random dataset builds prompts of *consecutive* token ids from a random offset, so prompts
# that draw the same offset are identical and hit the prefix cache (22.7% of prompt tokens on the
# H200 mixed workload); the harness draws independent random ids. With prefix caching on, the two
# benchmarks do different work. Off (the default here), they do the same.
NO_PREFIX_CACHE = {"enable_prefix_caching": False}


def _arm(spec: RunSpec, name: str, description: str, extra: dict) -> Arm:
    return Arm(name=name, description=description, engine_args=spec.arm.engine_args | extra,
               env=spec.arm.env, pins=spec.arm.pins)


def crosscheck(args: SweepArgs, *, prefix_caching: bool = False) -> dict:
    """Harness and vLLM's benchmark back to back. With `prefix_caching=True` the harness side is the
    scenario's default arm (reusable from a sweep); otherwise both sides run with it off, in arms of
    their own that canonical selection never takes."""
    sc, study_dir, planned = plan(args)
    extra = {} if prefix_caching else NO_PREFIX_CACHE
    suffix = "" if prefix_caching else "-no-prefix-cache"
    pairs: list[PlannedRun] = []
    for p in planned:
        if p.spec.workload.kind != "throughput" or p.spec.arm.name != "default":
            continue
        ours = p.spec if prefix_caching else dataclasses.replace(
            p.spec, arm=_arm(p.spec, "harness" + suffix, "the harness, prefix caching off", extra))
        twin = dataclasses.replace(p.spec, worker=VLLM_BENCH, arm=_arm(
            p.spec, VLLM_ARM + suffix, "vLLM's own benchmarks/throughput.py, random dataset", extra))
        for spec in (ours, twin):
            run_dir = study_dir / "runs" / spec.run_id
            pairs.append(PlannedRun(index=len(pairs) + 1, spec=spec, run_dir=run_dir,
                                    reuse=_reusable_at(run_dir, spec, args) if args.resume else None))
    if not pairs:
        raise UserError(f"{args.scenario}: no throughput workload with a default arm to cross-check")
    res = execute_plan(args, sc, study_dir, pairs)
    summary = summarize(res.records)
    if args.dry_run:
        return summary
    summary |= {"invocation_id": res.invocation_id, "scenario": str(args.scenario),
                "prefix_caching": prefix_caching}
    name = "crosscheck" if not prefix_caching else "crosscheck-prefix-caching"
    record.write_json_atomic(study_dir / f"{name}.json", summary)
    (study_dir / f"{name}.md").write_text(crosscheck_md(summary))
    return summary


def _reusable_at(run_dir: Path, spec: RunSpec, args: SweepArgs) -> record.RunRecord | None:
    return reusable(PlannedRun(index=0, spec=spec, run_dir=run_dir), args.retry_failed)


def summarize(records: list[record.RunRecord]) -> dict:
    groups: dict[tuple[str, str, str], dict[str, list[record.RunRecord]]] = {}
    for r in records:
        groups.setdefault((r.leg, r.model, r.workload), {}).setdefault(r.arm, []).append(r)
    rows = []
    for (leg, model, wl), by_arm in sorted(groups.items()):
        ours = [r for arm, rs in by_arm.items() if not arm.startswith(VLLM_ARM) for r in rs if r.status == "ok"]
        theirs = [r for arm, rs in by_arm.items() if arm.startswith(VLLM_ARM) for r in rs if r.status == "ok"]
        rt = ratio([r.metrics.total_tok_s for r in theirs], [r.metrics.total_tok_s for r in ours])
        share = [r.timing.timed_share for r in ours if r.timing.timed_share]
        rows.append({
            "leg": leg, "model": model, "workload": wl,
            "harness_tok_s": [r.metrics.total_tok_s for r in ours],
            "vllm_tok_s": [r.metrics.total_tok_s for r in theirs],
            "ratio": rt.value, "ci_low": rt.low, "ci_high": rt.high, "verdict": rt.verdict,
            "spread_harness": rt.spread_new, "spread_vllm": rt.spread_old,
            "timed_share_harness": share,
            "wall_s_harness": [r.timing.wall_s for r in ours],
            "failed": [f"{r.arm} r{r.repeat}: {r.failure.reason}" for rs in by_arm.values() for r in rs
                       if r.status != "ok" and r.failure],
        })
    return CrosscheckRecord(rows=rows).model_dump(exclude_none=False)


def _fmt(v: float | None, pattern: str = "{:,.0f}") -> str:
    return "—" if v is None else pattern.format(v)


def crosscheck_md(summary: dict) -> str:
    lines = ["| leg | model | workload | harness tok/s (median) | vLLM benchmark tok/s (median) | harness ÷ vLLM "
             "[95% CI] | spread harness / vLLM | timed share of wall |",
             "|---|---|---|---:|---:|---|---|---:|"]
    import statistics as st
    for r in summary["rows"]:
        ci = f" [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" if r["ci_low"] is not None else " (single pass)"
        med = lambda xs: st.median(xs) if xs else None  # noqa: E731
        spreads = f"{_fmt(r['spread_harness'], '{:.1%}')} / {_fmt(r['spread_vllm'], '{:.1%}')}"
        lines.append(f"| {r['leg']} | `{r['model']}` | {r['workload']} | {_fmt(med(r['harness_tok_s']))} | "
                     f"{_fmt(med(r['vllm_tok_s']))} | {_fmt(r['ratio'], '{:.3f}')}{ci} | {spreads} | "
                     f"{_fmt(med(r['timed_share_harness']), '{:.1%}')} |")
    return "\n".join(lines) + "\n"


def load(study_dir: Path, *, prefix_caching: bool = False) -> dict | None:
    path = study_dir / ("crosscheck-prefix-caching.json" if prefix_caching else "crosscheck.json")
    if not path.exists() and not prefix_caching:
        path = study_dir / "crosscheck-prefix-caching.json"  # a study measured before the split
    return crosscheck_file.read(path).model_dump() if path.exists() else None
