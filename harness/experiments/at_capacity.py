"""`harness check serve SCENARIO --at-capacity STUDY`: a capacity search's workload cross-checked at the
capacities a study measured, instead of refused.

vLLM's `bench serve` measures given load points, and a search chooses its probes as it goes; so the
crosscheck measures the loads the search answered with. Per (model, workload), the load points are the
capacities STUDY measured for that same model and workload: per leg of STUDY with a measured capacity
(a search that stopped `found` or `max_probes`), the median over its searches, the figure STUDY's
capacity table prints (harness.analyze.capacity); sorted, one point per distinct value. Each point
is held at what the search held fixed: on the request_rate axis, at most the search's concurrency in
flight (or num_prompts, as harness.measure.serve.run_search has it) and the workload's arrivals and
burstiness; on the concurrency axis, no pacing. Each point sends the request count of the search's
probe at the highest of the rates (capacity.probe_requests): one num_prompts for the whole work, so
a lower rate sends that many too and its arrivals span longer than the search's probe_s. A point's
goodput is judged by the search's own TTFT and TPOT bounds, as its probes were.

The derived work has no `capacity` key: the record's settings show the loads measured, and its notes
name STUDY and the capacity of each leg that gave a point.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.analyze import capacity as acap
from harness.analyze.canonical import canonicalize
from harness.analyze.dataset import load
from harness.core.errors import UserError
from harness.measure.executors import PlannedRun
from harness.measure.scenario import Workload
from harness.workloads import capacity as capacity_spec


def study_folder(study: str | Path, results: Path) -> Path:
    """STUDY as given: a study folder's path, else a study's name under the results root."""
    given = Path(study)
    if given.is_dir() or given.is_absolute() or len(given.parts) > 1:
        return given
    under = Path(results) / given
    if under.is_dir():
        return under
    raise UserError(f"--at-capacity {study}: no such study folder (neither {given} nor {under})")


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def label(study_dir: Path, results: Path) -> str:
    """How a note names STUDY: its path under the results root where it lies there (on a lent machine the
    root is a scratch folder whose absolute path means nothing once the records are copied back), else
    the path as given."""
    try:
        return str(Path(study_dir).resolve().relative_to(Path(results).resolve()))
    except ValueError:
        return str(study_dir)


def derive(study_dir: Path, model: str, workload: str, work: dict[str, Any], *,
           name: str | None = None) -> tuple[dict[str, Any], str]:
    """(the work measured at STUDY's capacities, the record's note saying where its points came from)
    for `work`, a capacity search's workload of `model`; the note names STUDY as `name` (default: its
    path). A UserError, naming STUDY, where STUDY is no study or measured no capacity for this model and
    workload."""
    cap = capacity_spec.parse(work["capacity"])
    canon = canonicalize(load(study_dir))
    found = acap.searches(canon)
    mine = found[(found["model"] == model) & (found["workload"] == workload)] if not found.empty else found
    if mine.empty:
        searched = sorted({f"{m} / {w}" for m, w in zip(found["model"], found["workload"])}) if not found.empty else []
        raise UserError(f"{study_dir}: no capacity search of model {model!r}, workload {workload!r} "
                        f"(its searches: {', '.join(searched) or 'none'})")
    caps = acap.by_leg(mine).get((model, workload), {})
    legs = [leg.name for leg in canon.study.legs]
    legs += sorted(set(caps) - set(legs))
    centers = {leg: acap.center(caps[leg]) for leg in legs if caps.get(leg)}
    if not centers:
        statuses = ", ".join(f"{n} {s}" for s, n in mine["status"].value_counts().items())
        raise UserError(f"{study_dir}: no measured capacity of model {model!r}, workload {workload!r} (its "
                        f"searches stopped: {statuses}; only {' or '.join(acap.MEASURED)} measure one)")
    if cap.axis == "concurrency":
        # A concurrency is a whole number of requests in flight: the median of an even count rounds down.
        loads = sorted({max(1, math.floor(c)) for c in centers.values()})
        n = work["num_prompts"]
        grid = {"concurrency": loads, "request_rate": []}
        held = f"each point {n} requests (num_prompts), sent without pacing"
    else:
        loads = sorted(set(centers.values()))
        n = capacity_spec.probe_requests(cap, work["num_prompts"], loads[-1])
        conc = cap.search.concurrency or work["num_prompts"]
        grid = {"concurrency": [conc], "request_rate": loads}
        sent = {x: capacity_spec.probe_requests(cap, work["num_prompts"], x) for x in loads}
        lower = [f"its probe at {_fmt(x)} req/s sent {sent[x]}, the point there sends {n} too, arriving over "
                 f"{n / x:.3g} s" for x in loads[:-1] if sent[x] != n]
        held = (f"each point {n} requests, as many as the search's probe at {_fmt(loads[-1])} req/s sent"
                + (f" ({'; '.join(lower)})" if lower else "")
                + f", at most {conc} in flight (the search's concurrency), arrivals {work.get('arrivals', 'harness')}, "
                  f"burstiness {work.get('burstiness', 1.0):g}")
    bounds = {b.metric: b.max for b in cap.bounds}
    slo = {k: bounds[m] for k, m in (("slo_ttft_ms", "ttft_ms"), ("slo_tpot_ms", "tpot_ms")) if m in bounds}
    derived = {k: v for k, v in work.items() if k != "capacity"} | grid | {"num_prompts": n} | slo
    unit = "req/s" if cap.axis == "request_rate" else "in flight"
    per_leg = "; ".join(f"{leg} {_fmt(c)} {unit} (median of {len(caps[leg])} "
                        f"search{'es' if len(caps[leg]) > 1 else ''})" for leg, c in centers.items())
    without = [leg for leg in legs if leg in set(mine["leg"]) and leg not in centers]
    note = (f"At capacity (--at-capacity {name or study_dir}): the {cap.axis.replace('_', ' ')}s measured are the "
            f"capacities that study measured for {model} / {workload}, per leg the median over its searches that "
            f"measured one: {per_leg}"
            + (f" (no measured capacity: {', '.join(without)})" if without else "")
            + f". Points: {', '.join(_fmt(x) for x in loads)} {unit}; {held}. The search's own SLO bounds judge "
              "goodput; the `capacity` block itself is left out of the work measured.")
    return derived, note


def apply(runs: list[PlannedRun], study: str | Path, results: Path, scenario: str
          ) -> tuple[list[PlannedRun], dict[tuple[str, str], str]]:
    """`runs` with every capacity workload's work derived from STUDY (`derive`), and the note per
    (model, workload); other workloads as they are."""
    study_dir = study_folder(study, results)
    derived: dict[tuple[str, str], tuple[Workload, str]] = {}
    out = []
    for p in runs:
        ws = p.spec.workload
        if ws.work.get("capacity") is None:
            out.append(p)
            continue
        key = (p.spec.model.name, ws.name)
        if key not in derived:
            work, note = derive(study_dir, key[0], key[1], ws.work, name=label(study_dir, results))
            try:
                derived[key] = (Workload.model_validate(work | {"description": ws.description}), note)
            except ValueError as e:   # a pydantic ValidationError: the first error's message
                why = e.errors()[0]["msg"] if hasattr(e, "errors") else str(e)
                raise UserError(f"{scenario}: workload {ws.name!r} at {study_dir}'s capacities: "
                                f"{why.removeprefix('Value error, ')}") from None
        out.append(replace(p, spec=replace(p.spec, workload=derived[key][0])))
    if not derived:
        raise UserError(f"--at-capacity {study}: no workload of this crosscheck searches for a capacity "
                        f"(the option applies to a workload with a `capacity:` block)")
    return out, {k: v[1] for k, v in derived.items()}
