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
import json
from pathlib import Path

from harness import record
from harness.errors import UserError
from harness.run import RunSpec
from harness.scenario import Arm
from harness.stats import ratio
from harness.sweep import PlannedRun, SweepArgs, execute_plan, plan, reusable

VLLM_BENCH = Path(__file__).resolve().parent / "worker" / "vllm_bench.py"
VLLM_ARM = "vllm-bench"


def _twin(spec: RunSpec) -> RunSpec:
    arm = Arm(name=VLLM_ARM, description="vLLM's own benchmarks/throughput.py, random dataset",
              engine_args=spec.arm.engine_args, env=spec.arm.env, pins=spec.arm.pins)
    return dataclasses.replace(spec, arm=arm, worker=VLLM_BENCH)


def crosscheck(args: SweepArgs) -> dict:
    sc, study_dir, planned = plan(args)
    pairs: list[PlannedRun] = []
    for p in planned:
        if p.spec.workload.kind != "throughput" or p.spec.arm.name != "default":
            continue
        twin = _twin(p.spec)
        run_dir = study_dir / "runs" / twin.run_id
        pairs.append(PlannedRun(index=len(pairs) + 1, spec=p.spec, run_dir=p.run_dir, reuse=p.reuse))
        pairs.append(PlannedRun(index=len(pairs) + 1, spec=twin, run_dir=run_dir,
                                reuse=_reusable_at(run_dir, twin, args) if args.resume else None))
    if not pairs:
        raise UserError(f"{args.scenario}: no throughput workload with a default arm to cross-check")
    res = execute_plan(args, sc, study_dir, pairs)
    summary = summarize(res.records)
    summary |= {"invocation_id": res.invocation_id, "scenario": str(args.scenario)}
    record.write_json_atomic(study_dir / "crosscheck.json", summary)
    (study_dir / "crosscheck.md").write_text(crosscheck_md(summary))
    return summary


def _reusable_at(run_dir: Path, spec: RunSpec, args: SweepArgs) -> record.RunRecord | None:
    return reusable(PlannedRun(index=0, spec=spec, run_dir=run_dir), args.retry_failed)


def summarize(records: list[record.RunRecord]) -> dict:
    groups: dict[tuple[str, str, str], dict[str, list[record.RunRecord]]] = {}
    for r in records:
        groups.setdefault((r.leg, r.model, r.workload), {}).setdefault(r.arm, []).append(r)
    rows = []
    for (leg, model, wl), by_arm in sorted(groups.items()):
        ours = [r for r in by_arm.get("default", []) if r.status == "ok"]
        theirs = [r for r in by_arm.get(VLLM_ARM, []) if r.status == "ok"]
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
    return {"schema_version": 1, "rows": rows}


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


def load(study_dir: Path) -> dict | None:
    path = study_dir / "crosscheck.json"
    return json.loads(path.read_text()) if path.exists() else None
