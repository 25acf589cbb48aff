"""The harness against vLLM's own throughput benchmark, in the same venv on the same scenario.

For every throughput workload and repeat, a harness run and a vLLM-benchmark run go back to back
(repetition outermost, the pair's order alternating with the repeat, so drift hits both alike). Both are ordinary runs of the scenario's series:
the harness run is the default arm (so `--resume` reuses main-sweep runs and vice versa), vLLM's
is the arm `vllm-bench`, which canonical selection never takes. The summary is the ratio
harness ÷ vLLM with its interval: the paired rule over the repeats' pair ratios where at least three
repeats have both sides (`significance.paired_log`), else Welch over the two sides' repeats, which is
kept beside it either way; the repeat spread of each, and the share of each run's wall time that was
the timed region.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import statistics
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import workloads
from harness.core import paths
from harness.experiments import Ran, crosscheck_paired, crosscheck_work
from harness.experiments.crosscheck_md import crosscheck_md
from harness.experiments.crosscheck_tokenization import TokenizationCost, tokenization_cost, tokenization_md

from harness.schema import checks
from harness.schema import crosscheck as crosscheck_file
from harness.schema import record
from harness.schema.crosscheck import CrosscheckRecord
from harness.core.errors import UserError
from harness.measure import prime
from harness.measure.run import WORKER, RunSpec
from harness.measure.scenario import Arm, load_scenario, scenario_path
from harness.analyze import coldstart
from harness.analyze import dataset
from harness.analyze.dataset import Problem, engine_logs
from harness.analyze.significance import PAIRED_MIN
from harness.analyze.stats import paired_ratio, ratio
from harness.measure.sweep import PlannedRun, SweepArgs, execute_plan, plan, reusable

VLLM_BENCH = WORKER.parent / "vllm_bench.py"  # beside the harness worker, run with the leg's Python
VLLM_ARM = "vllm-bench"


HARNESS_ARM = "default"
# vLLM's random dataset builds prompts of *consecutive* token ids from a random offset, so prompts
# that draw the same offset are identical and hit the prefix cache (22.7% of prompt tokens on the
# H200 mixed workload); the harness draws independent random ids. With prefix caching on, the two
# benchmarks do different work. Off (the default here), they do the same.
NO_PREFIX_CACHE = {"enable_prefix_caching": False}
NO_PREFIX_CACHE_SUFFIX = "-no-prefix-cache"


def is_crosscheck_arm(arm: str) -> bool:
    """An arm only the crosscheck makes: vLLM's side, and the harness side with prefix caching off
    (each also in the one-engine design's form)."""
    return arm in _CROSSCHECK_ARMS


# Computed once: the report asks this of every run's arm.
_CROSSCHECK_ARMS = {a for side in (VLLM_ARM, "harness") for sfx in ("", NO_PREFIX_CACHE_SUFFIX)
                    for a in (side + sfx, crosscheck_paired.arm_name(side, sfx))} - {"harness"}


def side_arms(prefix_caching: bool, one_engine: bool) -> tuple[str, str]:
    """(harness side, vLLM side) arm names."""
    suffix = "" if prefix_caching else NO_PREFIX_CACHE_SUFFIX
    if one_engine:
        return crosscheck_paired.arm_name("harness", suffix), crosscheck_paired.arm_name(VLLM_ARM, suffix)
    return (HARNESS_ARM if prefix_caching else "harness" + suffix), VLLM_ARM + suffix


def _arm(spec: RunSpec, name: str, description: str, extra: dict) -> Arm:
    return Arm(name=name, description=description, engine_args=spec.arm.engine_args | extra,
               env=spec.arm.env, pins=spec.arm.pins)


def crosscheck(args: SweepArgs, *, prefix_caching: bool = False) -> dict:
    """Harness and vLLM's benchmark back to back. With `prefix_caching=True` the harness side is the
    scenario's default arm (reusable from a sweep); otherwise both sides run with it off, in arms of
    their own that canonical selection never takes. With `args.prime`, each (leg, model) first runs
    the harness side once, in its arm with `-prime` (harness.measure.prime), so that the pairs start on
    warm caches; it never enters the summary. With `--design paired`, both sides on one engine per
    block (crosscheck_paired)."""
    one_engine = crosscheck_paired.wanted(args)
    design = crosscheck_paired.design(args) if one_engine else None
    sc, study_dir, planned = plan(dataclasses.replace(args, prime=False) if design is None else dataclasses.replace(
        args, design="serial", repeats=design.blocks))
    extra = {} if prefix_caching else NO_PREFIX_CACHE
    suffix = "" if prefix_caching else NO_PREFIX_CACHE_SUFFIX
    pairs: list[PlannedRun] = []
    harness_side: dict[tuple[str, str], RunSpec] = {}
    not_compared: set[str] = set()
    for p in planned:
        if not workloads.traits_of(p.spec.workload.kind).vllm_throughput_bench or p.spec.arm.name != "default":
            continue
        modality = p.spec.workload.modality
        try:
            # The flags vLLM's side will run (its modality's dataset at the workload's sizes); a
            # modality it cannot do is named, not timed: a ratio over other work would mean nothing.
            dataset = workloads.vllm_dataset_args(modality, p.spec.workload.work, ".")
        except workloads.NotComparable as e:
            not_compared.add(f"{p.spec.workload.name} ({e})")
            continue
        a_ours, a_twin = side_arms(prefix_caching, one_engine)
        ours = p.spec if a_ours == HARNESS_ARM else dataclasses.replace(
            p.spec, arm=_arm(p.spec, a_ours, "the harness" + ("" if prefix_caching else ", prefix caching off"), extra))
        name = dataset[dataset.index("--dataset-name") + 1]
        twin = dataclasses.replace(p.spec, worker=VLLM_BENCH, arm=_arm(
            p.spec, a_twin, f"vLLM's own benchmarks/throughput.py, {name} dataset", extra))
        # vLLM's benchmark is a script of its own, one engine each: both sides run one engine per run,
        # whatever the scenario says, so the two timed regions stand on equal engines; or, one-engine,
        # both on the block's one engine (paired: the command-mode worker lends it to vLLM's main()).
        mode = "paired" if one_engine else "per-run"
        ours, twin = dataclasses.replace(ours, engine=mode), dataclasses.replace(twin, engine=mode)
        harness_side.setdefault((p.spec.leg_env.leg.name, p.spec.model.name), ours)
        # The pair's order alternates with the repeat (odd: harness first), so that a host that speeds up
        # or slows down over the series does not tilt every pair the same way (one-engine: the design
        # swaps the sides' order every round).
        for spec in ((ours, twin) if p.spec.repeat % 2 or one_engine else (twin, ours)):
            run_dir = paths.inside(study_dir / "runs", *spec.run_id.split("/"))
            pairs.append(PlannedRun(index=len(pairs) + 1, spec=spec, run_dir=run_dir,
                                    reuse=_reusable_at(run_dir, spec, args) if args.resume else None))
    if not_compared:
        print(f"crosscheck: not cross-checked: {'; '.join(sorted(not_compared))}", file=sys.stderr)
    if not pairs:
        why = (f" (not comparable: {'; '.join(sorted(not_compared))})" if not_compared else "")
        raise UserError(f"{args.scenario}: no throughput workload with a default arm that vLLM's benchmark can "
                        f"do{why}")
    if args.prime:
        def key(s: RunSpec) -> tuple[str, str]:
            return s.leg_env.leg.name, s.model.name
        pairs = prime.with_primes(study_dir, pairs, key, lambda s: harness_side[key(s)])
    if design is not None:  # blocks outermost, each (block, model, leg) one engine: the design's order
        pairs = [dataclasses.replace(p, index=i) for i, p in enumerate(sorted(pairs, key=lambda p: p.spec.repeat), 1)]
    res = execute_plan(args, sc, study_dir, pairs, design=design, block_key=crosscheck_paired.block_key)
    summary = summarize(res.records, study_dir=study_dir)
    if args.dry_run:
        return summary
    summary |= {"invocation_id": res.invocation_id, "scenario": str(args.scenario),
                "prefix_caching": prefix_caching}
    _write(study_dir, summary, res.records, prefix_caching)
    return summary


def _write(study_dir: Path, summary: dict, records: list[record.RunRecord], prefix_caching: bool, *,
           keep: Collection[Path] = ()) -> None:
    _split_legacy(study_dir)
    for row in summary["rows"]:
        settings = _settings(records, row, prefix_caching)
        path = key_path(study_dir, row, settings)
        if path in keep:
            continue
        record.write_json_atomic(path, {**summary, "rows": [row], "settings": settings})
    write_views(study_dir)


# --- the records: one file per (leg, model, workload, settings) -------------------------------------
# A crosscheck of one workload must never replace another's: each result is kept under
# crosscheck/<leg>--<model>--<workload>--<settings hash>.json, and crosscheck.json / .md (and the
# -prefix-caching pair) are views of all of them, rewritten after every crosscheck.
FOLDER = "crosscheck"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def _settings(records: list[record.RunRecord], row: dict, prefix_caching: bool) -> dict:
    """What decides the measurement beyond (leg, model, workload): the harness side's engine
    arguments, the workload as run, the leg's environment, and prefix caching."""
    ours = [r for r in records if (r.leg, r.model, r.workload) == (row["leg"], row["model"], row["workload"])
            and not r.arm.startswith(VLLM_ARM) and not prime.is_prime(r.arm)
            and crosscheck_paired.design_of(r.arm) == row.get("design", "per run")]
    first = ours[0] if ours else None
    # The one-engine design's summary is a file of its own beside the per-run one's.
    one = {"design": row["design"]} if row.get("design") == crosscheck_paired.DESIGN_LABEL else {}
    return {"prefix_caching": prefix_caching, **one,
            "engine_args": first.engine_args if first else {},
            "workload": first.workload_spec if first else {},
            "compat_id": first.compat_id if first else None}


def key_path(study_dir: Path, row: dict, settings: dict | None) -> Path:
    digest = (hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:10]
              if settings is not None else "legacy")
    name = f"{_safe(row['leg'])}--{_safe(row['model'])}--{_safe(row['workload'])}--{digest}.json"
    return paths.inside(study_dir, FOLDER, name)


def _split_legacy(study_dir: Path) -> None:
    """A study crosschecked before results were kept per key: its single files become per-key
    records first, so the next crosscheck adds to them instead of replacing them."""
    if (study_dir / FOLDER).is_dir():
        return
    for name, pc in (("crosscheck.json", False), ("crosscheck-prefix-caching.json", True)):
        path = study_dir / name
        if not path.exists():
            continue
        rec = _read(path).model_dump()
        if rec.get("prefix_caching") is None:
            rec["prefix_caching"] = pc
        for row in rec["rows"]:
            record.write_json_atomic(key_path(study_dir, row, None), {**rec, "rows": [row], "settings": None})


def _read(path: Path) -> CrosscheckRecord:
    return crosscheck_file.read(path)


def load_all(study_dir: Path) -> list[dict]:
    """Every crosscheck record of the study, one per (leg, model, workload, settings), in name order;
    a study from before the split: its single files."""
    folder = Path(study_dir) / FOLDER
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        files = [p for p in (Path(study_dir) / "crosscheck.json", Path(study_dir) / "crosscheck-prefix-caching.json")
                 if p.exists()]
        # A single file from before records said whether prefix caching was on: its name says it.
        return [{"prefix_caching": p.name == "crosscheck-prefix-caching.json"}
                | {k: v for k, v in _read(p).model_dump().items() if not (k == "prefix_caching" and v is None)}
                | {"path": str(p)} for p in files]
    return [_read(p).model_dump() | {"path": str(p)} for p in files]


def _row_key(row: dict) -> tuple[str, str, str]:
    return row["leg"], row["model"], row["workload"]


def write_views(study_dir: Path) -> None:
    """crosscheck.json / .md and their -prefix-caching pair: every kept record's rows together. They
    are the study's own view files, rewritten on every crosscheck; one the harness did not write (or
    that was edited by hand since) is refused before any of them is written (schema.outdir)."""
    from harness.schema.outdir import check_file, output_file

    recs = load_all(study_dir)
    views: list[tuple[Path, str]] = []
    for pc, name in ((False, "crosscheck"), (True, "crosscheck-prefix-caching")):
        mine = [r for r in recs if bool(r.get("prefix_caching")) == pc]
        if not mine:
            continue
        # A record from before settings were kept (the split's "legacy" files) stands for its row until a
        # record with settings covers the same (leg, model, workload): a later crosscheck, or the same
        # runs summarised again. Its file stays; the view shows the row once.
        keyed = {_row_key(row) for r in mine if r.get("settings") is not None for row in r["rows"]}
        rows = [row for r in mine for row in r["rows"] if r.get("settings") is not None or _row_key(row) not in keyed]
        view = {"schema_version": crosscheck_file.SCHEMA_VERSION, "rows": rows,
                "invocation_id": mine[-1].get("invocation_id"), "scenario": mine[-1].get("scenario"),
                "prefix_caching": pc}
        views += [(paths.inside(study_dir, f"{name}.json"), json.dumps(view, indent=2) + "\n"),
                  (paths.inside(study_dir, f"{name}.md"), crosscheck_md(view, study_band(study_dir)))]
    _adopt_legacy(study_dir, views)
    for dest, _ in views:
        check_file(dest, verb="crosscheck", default=True, study_view=True)
    for dest, text in views:
        with output_file(dest, verb="crosscheck", default=True, study_view=True) as tmp:
            tmp.write_text(text, encoding="utf-8")


def _adopt_legacy(study_dir: Path, views: list[tuple[Path, str]]) -> None:
    """Views written before the harness marked its outputs: a .json that reads as a crosscheck record,
    and a .md whose table header is the one this view starts with, are the harness's own."""
    from harness.schema.outdir import adopt_file
    from harness.schema.output_marker import sidecar

    for dest, text in views:
        if not dest.is_file() or sidecar(dest).exists():
            continue
        if dest.suffix == ".json":
            try:
                _read(dest)
            except UserError:
                continue
        else:
            with open(dest, encoding="utf-8", errors="replace") as f:
                if f.readline()[:40] != text[:40]:
                    continue
        adopt_file(dest, verb="crosscheck")


def _reusable_at(run_dir: Path, spec: RunSpec, args: SweepArgs) -> record.RunRecord | None:
    return reusable(PlannedRun(index=0, spec=spec, run_dir=run_dir), args.retry_failed)


def from_records(args: SweepArgs, *, prefix_caching: bool = False, problems: list[Problem] | None = None) -> dict:
    """A crosscheck's summary from the records already in the study folder, measuring nothing: for a
    crosscheck cut short (a machine lease ended mid-series) and read back where its legs cannot be
    resolved. It never builds an env, so it checks what a fingerprint would: within each (leg, model,
    workload), every harness-side record must share engine arguments, workload and env (compat id),
    and the vLLM side the env; the planned (arm, repeat) pairs without a finished record are named.

    Every record comes from the Dataset (read through the schema's one check): one that cannot be read,
    or whose numbers cannot be a measurement (NaN, infinite, negative, zero), is left out and named in
    `problems`; an earlier summary of a (leg, model, workload) that lost a record so is kept, not
    rewritten from fewer pairs (named there too)."""
    sc_file = scenario_path(args.scenario)
    sc = load_scenario(sc_file)
    study_dir = paths.inside(args.results, args.study or sc.name)
    one_engine = crosscheck_paired.wanted(args)
    arms = side_arms(prefix_caching, one_engine)
    repeats = (args.blocks or crosscheck_paired.BLOCKS) if one_engine else args.repeats or sc.repeats
    found: dict[tuple[str, str, str], list[record.RunRecord]] = {}
    started: set[tuple[str, str, str, str, int]] = set()
    problems = [] if problems is None else problems
    lost: set[tuple[str, str]] = set()   # (leg, workload) of a record left out
    for run_dir, r, bad in _study_records(study_dir, sc.name):
        path = run_dir / "results.json"
        if run_dir.parts[-2] not in arms:
            continue
        if r is None:
            # Selected by its folder (series/leg/model/workload/arm/rK), since its contents cannot be trusted.
            leg, wl, rep = run_dir.parts[-5], run_dir.parts[-3], run_dir.name[1:]
            if not ((args.legs and leg not in args.legs) or (args.workloads and wl not in args.workloads)
                    or (rep.isdigit() and int(rep) > repeats)):
                problems.append(Problem(path=path, what=bad, kind="excluded"))
                lost.add((leg, wl))
            continue
        # The harness side of a prefix-caching crosscheck is the sweep's default arm, which holds every
        # workload of the scenario; only kinds vLLM's throughput bench also measures were crosschecked
        # (as `crosscheck` plans them). A record from before kinds were declared: the kind its metric shows.
        kind = checks.kind_of(r)
        if not (workloads.known(kind) and workloads.traits_of(str(kind)).vllm_throughput_bench):
            continue
        if ((args.legs and r.leg not in args.legs) or (args.models and r.model not in args.models)
                or (args.workloads and r.workload not in args.workloads) or r.repeat > repeats):
            continue
        found.setdefault((r.leg, r.model, r.workload), []).append(r)
        started.add((r.leg, r.model, r.workload, r.arm, r.repeat))
    if prefix_caching:  # the default arm is the sweep's too: a key without a vLLM side was never crosschecked
        found = {k: v for k, v in found.items() if any(r.arm == arms[1] for r in v)}
    if not found and problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UserError(f"{problems[0]}{more}; no other crosscheck record to summarise, nothing written")
    if not found:
        raise UserError(f"{study_dir}: no finished crosscheck record ({' / '.join(arms)}) matches; nothing to summarise")
    for key, recs in found.items():
        ours = [r for r in recs if r.arm == arms[0]]
        theirs = [r for r in recs if r.arm == arms[1]]
        for side, what in ((ours, lambda r: (r.compat_id, r.engine_args, r.workload_spec)),
                           (theirs, lambda r: r.compat_id)):
            odd = [r for r in side if what(r) != what(side[0])]
            if odd:
                raise UserError(f"{study_dir / 'runs' / odd[0].run_id}: measured with other settings than "
                                f"{side[0].run_id} (env, engine arguments or workload); not one crosscheck")
    records = [r for recs in found.values() for r in recs]
    unmeasured = [f"{sc.name}/{leg}/{_safe(model)}/{wl}/{arm}/r{n}" for leg, model, wl in found
                  for arm in arms for n in range(1, repeats + 1) if (leg, model, wl, arm, n) not in started]
    summary = summarize(records, unmeasured=unmeasured, study_dir=study_dir)
    if args.dry_run:
        return summary
    summary |= {"invocation_id": "from-records", "scenario": str(args.scenario), "prefix_caching": prefix_caching}
    keep = _kept_earlier(study_dir, summary, records, prefix_caching, lost, problems)
    _write(study_dir, summary, records, prefix_caching, keep=keep)
    return summary


def _study_records(study_dir: Path, series: str) -> list[tuple[Path, record.RunRecord | None, str]]:
    """Every run folder of the series (series/leg/model/workload/arm/rK, in folder order) holding a
    record, as the Dataset read it: (run folder, its record, "") or, for one it left out (unreadable,
    or numbers that cannot be a measurement), (run folder, None, why)."""
    if not (study_dir / "runs").is_dir():
        return []
    ds = dataset.load(study_dir)
    found: list[tuple[Path, record.RunRecord | None, str]] = [(study_dir / d, rec, "") for d, rec in ds.typed.items()]
    found += [(p.path.parent, None, p.what) for p in ds.problems
              if p.kind in ("unreadable", "excluded") and p.path.name == "results.json"]
    base = study_dir / "runs" / series
    mine = [x for x in found if x[0].parent.parent.parent.parent.parent == base and x[0].name.startswith("r")]
    return sorted(mine, key=lambda x: x[0])


def _kept_earlier(study_dir: Path, summary: dict, records: list[record.RunRecord], prefix_caching: bool,
                  lost: set[tuple[str, str]], problems: list[Problem]) -> set[Path]:
    """The earlier records a summary built without some of its records must not replace: a
    (leg, model, workload) whose record was left out, where a summary of the same settings is kept."""
    keep: set[Path] = set()
    for row in summary["rows"]:
        if (row["leg"], row["workload"]) not in lost:
            continue
        path = key_path(study_dir, row, _settings(records, row, prefix_caching))
        if path.exists():
            keep.add(path)
            problems.append(Problem(path=path, kind="note", what=(
                f"kept as it was: records of {row['leg']} / {row['model']} / {row['workload']} were left out "
                f"(named above), so this summary ({row['n_pairs']} pairs) does not replace it")))
    return keep


def summarize(records: list[record.RunRecord], unmeasured: Sequence[str] = (), study_dir: Path | None = None) -> dict:
    groups: dict[tuple[str, str, str, str], dict[str, list[record.RunRecord]]] = {}
    for r in records:
        design = crosscheck_paired.design_of(r.arm)
        groups.setdefault((r.leg, r.model, r.workload, design), {}).setdefault(r.arm, []).append(r)
    rows = []
    for (leg, model, wl, design), by_arm in sorted(groups.items()):
        ours = [r for arm, rs in by_arm.items() if not arm.startswith(VLLM_ARM) and not prime.is_prime(arm)
                for r in rs if r.status == "ok"]
        theirs = [r for arm, rs in by_arm.items() if arm.startswith(VLLM_ARM) for r in rs if r.status == "ok"]
        welch = ratio([r.metrics.total_tok_s for r in theirs], [r.metrics.total_tok_s for r in ours])
        one_engine = design == crosscheck_paired.DESIGN_LABEL
        pairs = crosscheck_paired.pair_values(ours, theirs) if one_engine else _pair_values(ours, theirs)
        # The design pairs each repeat's two runs back to back, so the pairs decide wherever there are
        # enough of them; Welch over the two sides' repeats is kept beside it (and decides otherwise).
        paired = paired_ratio([v for _, v in pairs], [h for h, _ in pairs]) if len(pairs) >= PAIRED_MIN else None
        rt = paired or welch
        check = crosscheck_work.work_check(ours, theirs)
        refused = crosscheck_work.refusal(check)
        share = [r.timing.timed_share for r in ours if r.timing.timed_share]
        rows.append({
            "leg": leg, "model": model, "workload": wl, "design": design,
            "modality": next((r.workload_spec.get("modality") for r in ours + theirs
                              if isinstance(r.workload_spec, dict) and r.workload_spec.get("modality")), "text"),
            "work_check": check, "transport": crosscheck_work.transport(theirs),
            "harness_tok_s": [r.metrics.total_tok_s for r in ours],
            "vllm_tok_s": [r.metrics.total_tok_s for r in theirs],
            # Other work on the two sides: no ratio at all, the refusal in its place.
            "ratio": None if refused else rt.value, "ci_low": None if refused else rt.low,
            "ci_high": None if refused else rt.high, "verdict": refused or rt.verdict,
            "method": "paired" if paired else "welch", "n_pairs": len(pairs),
            "welch": {} if refused else {"ratio": welch.value, "ci_low": welch.low, "ci_high": welch.high,
                                         "verdict": welch.verdict},
            "spread_harness": welch.spread_new, "spread_vllm": welch.spread_old,
            "timed_share_harness": share,
            "wall_s_harness": [r.timing.wall_s for r in ours],
            "failed": [f"{r.arm} r{r.repeat}: {r.failure.reason}" for arm, rs in by_arm.items() for r in rs
                       if r.status != "ok" and r.failure and not prime.is_prime(arm)],
            "unmeasured": [u for u in unmeasured if u.split("/")[1:4] == [leg, _safe(model), wl]],
            "pair_ratios": [] if refused else [h / v for h, v in pairs],
            "round_ratios": [] if refused or not one_engine else crosscheck_paired.round_ratios(ours, theirs),
            "handover": crosscheck_paired.handover(ours, theirs) if one_engine else {},
            "cold_runs": _cold(study_dir, ours, theirs),
        })
    return CrosscheckRecord(rows=rows).model_dump(exclude_none=False)


def _cold(study_dir: Path | None, ours: list[record.RunRecord], theirs: list[record.RunRecord]) -> list[str]:
    """The runs, by side and repeat, whose engine compiled its graphs from an empty cache (vLLM's log
    says so): the first engine of a leg on a machine, which may measure apart from the rest."""
    if study_dir is None:
        return []
    return [f"{side} r{r.repeat}" for side, rs in (("harness", ours), ("vLLM", theirs))
            for r in sorted(rs, key=lambda r: r.repeat)
            if coldstart.engine_state(*engine_logs(Path(study_dir) / "runs" / r.run_id, r)) == "compiled"]


def _pair_values(ours: list[record.RunRecord], theirs: list[record.RunRecord]) -> list[tuple[float, float]]:
    """(harness, vLLM) tok/s of each repeat that has both sides ok, in repeat order: the two ran back
    to back, so each pair shares the host's state. Only when one invocation measured both: a side
    re-measured later (a lease ended between the two) stood on another host state, maybe another
    machine, and pairs with nothing."""
    by_rep = {r.repeat: r for r in theirs}
    return [(r.metrics.total_tok_s, v.metrics.total_tok_s) for r in sorted(ours, key=lambda r: r.repeat)
            if (v := by_rep.get(r.repeat)) and v.metrics.total_tok_s and v.invocation_id == r.invocation_id]


def study_band(study_dir: Path) -> float | None:
    """study.yaml's `crosscheck_band`, or None (no file, or no band set)."""
    from harness.core.yamlio import validate_at
    from harness.schema.study import StudyFile

    path = Path(study_dir) / "study.yaml"
    return validate_at(StudyFile, path)[1].crosscheck_band if path.exists() else None


def load(study_dir: Path, *, prefix_caching: bool = False) -> dict | None:
    """Every kept crosscheck row of the study (all workloads and settings), as one record; None
    when the study has none. Reads crosscheck/ (load_all); a study from before it, its single file."""
    folder = Path(study_dir) / FOLDER
    if folder.is_dir() and any(folder.glob("*.json")):
        recs = [r for r in load_all(study_dir) if bool(r.get("prefix_caching")) == prefix_caching]
        if not recs and not prefix_caching:
            recs = load_all(study_dir)
        if not recs:
            return None
        return {"schema_version": crosscheck_file.SCHEMA_VERSION, "rows": [row for r in recs for row in r["rows"]],
                "invocation_id": recs[-1].get("invocation_id"), "scenario": recs[-1].get("scenario"),
                "prefix_caching": prefix_caching}
    path = study_dir / ("crosscheck-prefix-caching.json" if prefix_caching else "crosscheck.json")
    if not path.exists() and not prefix_caching:
        path = study_dir / "crosscheck-prefix-caching.json"  # a study measured before the split
    return _read(path).model_dump() if path.exists() else None


# --- the experiment (harness.experiments) ---------------------------------------------------------

NAME = "crosscheck"
GROUP = "check"
HELP = ("harness vs vLLM's own throughput benchmark, same venv and scenario; --design paired: both timed on one "
        "engine per block (--blocks, --pairs rounds), their passes alternating")
EXAMPLE = "harness check crosscheck cpu-tiny --study cpu-crosscheck --leg cpu-0.32.0 --workload mixed --repeats 3"
SIDE_SECTION = False   # the report gives it its own section (publish.sections.diagnostics)


@dataclass(frozen=True, kw_only=True)
class Args:
    sweep: SweepArgs
    prefix_caching: bool = False
    tokenization: bool = False
    from_records: bool = False

    @classmethod
    def add_cli_args(cls, p: argparse.ArgumentParser) -> None:
        SweepArgs.add_cli_args(p)
        p.add_argument("--prefix-caching", action="store_true",
                       help="leave prefix caching on (vLLM's random prompts then share prefixes by chance)")
        p.add_argument("--tokenization", action="store_true",
                       help="measure only what vLLM's benchmark times and the harness does not: encoding the "
                            "workload's prompts as text with the leg's tokenizer (no engine)")
        p.add_argument("--from-records", action="store_true",
                       help="measure nothing: summarise the finished records in the study folder (a crosscheck "
                            "cut short), naming each planned repeat without one; needs no leg env")

    @classmethod
    def from_cli_args(cls, a: argparse.Namespace) -> "Args":
        return cls(sweep=SweepArgs.from_cli_args(a), prefix_caching=a.prefix_caching, tokenization=a.tokenization,
                   from_records=a.from_records)


def study_rows(study_dir: Path) -> list[dict]:
    """Every kept crosscheck row of the study (load), none when it has no crosscheck."""
    return (load(study_dir) or {"rows": []})["rows"]


def run(args: Args) -> Ran:
    if args.tokenization:
        return Ran(record=TokenizationCost(tokenization_cost(args.sweep, crosscheck_rows=study_rows)))
    if args.from_records:
        problems: list[Problem] = []
        summary = from_records(args.sweep, prefix_caching=args.prefix_caching, problems=problems)
        for p in problems:
            print(f"warning: {p.path.resolve()}: {p.what}", file=sys.stderr)
    else:
        summary = crosscheck(args.sweep, prefix_caching=args.prefix_caching)
    return Ran(record=CrosscheckRecord.model_validate(summary))


@dataclass(frozen=True, kw_only=True)
class Summary:
    record: CrosscheckRecord | TokenizationCost
    band: float | None = None   # the study's target band around 1.0 (study.yaml crosscheck_band), if any


def summary(rec: CrosscheckRecord | TokenizationCost) -> Summary:
    return Summary(record=rec)


def summary_md(s: Summary) -> str:
    if isinstance(s.record, TokenizationCost):
        return tokenization_md(s.record.rows)
    return crosscheck_md(s.record.model_dump(), s.band)


def study_records(study_dir: Path, legs: set[str], models: set[str]) -> list[CrosscheckRecord]:
    """The study's crosscheck rows (every kept workload and setting), as one record."""
    found = load(study_dir)
    return [CrosscheckRecord.model_validate(found)] if found else []


def quote(records: Sequence[CrosscheckRecord], a: dict[str, str]) -> str:
    """`{{ crosscheck: leg=L, model=M, workload=W, stat=harness|vllm[, design=one engine] }}`: the median
    tok/s of one side (design: "per run" unless named)."""
    for rec in records:
        for r in rec.rows:
            if (r.leg, r.model, r.workload, r.design) == (a.get("leg"), a.get("model"), a.get("workload"),
                                                          a.get("design", "per run")):
                vals = r.harness_tok_s if a.get("stat", "harness") == "harness" else r.vllm_tok_s
                return f"{statistics.median(vals):,.0f}"
    raise UserError(f"crosscheck: no row {a.get('leg')} {a.get('model')} {a.get('workload')} in this study")
