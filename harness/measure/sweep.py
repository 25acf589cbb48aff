"""Sweeps: every (repeat, leg, model, workload, arm) of a scenario, strictly one run at a time.

Repetition is the outer loop, so slow drift of the machine cannot line up with the version axis.
All leg envs are resolved and built before the first measurement. Each invocation writes
`sweeps/<invocation>.json` beside the runs, listing every run as measured or reused.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import uuid
from datetime import datetime
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from harness import __version__, workloads
from harness.core import flags, paths
from harness.core.errors import LegEnvError, UserError
from harness.core.yamlio import read_yaml
from harness.measure import aa, dryrun, guard, leg as legmod, paired, prime, supersede
from harness.schema import record, sweep_index
from harness.schema import study as study_file
from harness.measure.leg import LegEnv, LegSpec
from harness.schema.record import RunRecord
from harness.schema.outdir import is_study
from harness.measure.lock import waiting_node_lock
from harness.measure.executors import EXECUTORS, Executor, PlannedRun, console, executor_named  # noqa: F401
from harness.measure.run import RunSpec, kill_orphans
from harness.measure.scenario import Arm, Profile, Scenario, check_plan, load_scenario, scenario_path
from harness.measure.tinymm import TINY_MODELS, build_tiny
from harness.measure.tinymodel import materialize_architecture



@dataclass(frozen=True, kw_only=True)
class SweepArgs:
    scenario: str
    results: Path = paths.RESULTS
    study: str | None = None
    legs: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()
    arms: tuple[str, ...] = ()
    repeats: int | None = None
    resume: bool = False
    retry_failed: bool = False
    allow_dirty: bool = False
    timeout_s: float | None = None
    devices: str | None = None
    dry_run: bool = False
    offline: bool = False
    executor: str = "local"
    ray_address: str | None = None
    engine: str | None = None          # per-run | per-group; default: the scenario's
    order: str | None = None           # alternate | fixed | shuffle; default: the scenario's
    wait_lock_s: float = 0.0           # while another sweep measures on this node: wait this long, not fail
    diagnose: bool = True              # re-run a failed run whose log names no cause, with DEBUG logging
    profile: int | None = None         # profile this many timed calls per run, as arm `<arm>-profiled`
    supersede: bool = False            # measure over finished records (moved to superseded/ first)
    prime: bool = False                # an engine first per (leg, model, arm), in arm <arm>-prime (measure/prime.py)
    design: str | None = None          # serial | paired; default: the scenario's (measure/paired.py)
    blocks: int | None = None          # paired: engine blocks per leg; default: the scenario's
    pairs: int | None = None           # paired: rounds per block; default: the scenario's
    series: str | None = None          # the records' series tag; default: the scenario's (its name)
    until_decided: bool | None = None  # paired: stop once every cell is decided (None: the scenario's)
    min_blocks: int | None = None      # paired, until decided: the first look; default: the scenario's
    budget_min: float | None = None    # paired: start no block after this many minutes; default: the scenario's

    @classmethod
    def add_cli_args(cls, p: argparse.ArgumentParser) -> None:
        flags.scenario_study(p)
        for name in ("legs", "models", "workloads", "arms"):
            p.add_argument(f"--{name[:-1]}", dest=name, action="append", default=[],
                           help=f"only this {name[:-1]} (repeatable)")
        p.add_argument("--repeats", type=int, help="override the scenario's repeats")
        p.add_argument("--resume", action="store_true", help="reuse finished runs with identical fingerprints")
        p.add_argument("--retry-failed", action="store_true", help="with --resume, re-measure failed runs")
        p.add_argument("--supersede", action="store_true",
                       help="re-measure runs whose folder holds a finished record (no --resume, or its "
                            "fingerprint changed); the earlier records move to superseded/<invocation>/ first")
        p.add_argument("--prime", action="store_true",
                       help="before the first run to measure of each (leg, model, arm), one engine whose run is "
                            "kept in arm <arm>-prime and never canonical, so that the measured runs start on warm "
                            "compile caches (a fresh machine's first engine compiles)")
        flags.allow_dirty(p)
        p.add_argument("--timeout", dest="timeout_s", type=float, help="per-run timeout in seconds")
        p.add_argument("--devices", help="CUDA_VISIBLE_DEVICES for every run")
        p.add_argument("--dry-run", action="store_true", help="print the plan, measure nothing")
        flags.offline(p)
        p.add_argument("--executor", choices=list(EXECUTORS), default="local")
        p.add_argument("--address", dest="ray_address", help="Ray cluster address (with --executor ray)")
        p.add_argument("--engine", choices=["per-run", "per-group"],
                       help="one engine per run, or one per (repeat, leg, model, arm) for its workloads "
                            "(default: the scenario's engine)")
        p.add_argument("--wait-lock", dest="wait_lock_s", type=float, default=0.0, metavar="S",
                       help="if another sweep holds this node's lock, wait up to S seconds for it")
        p.add_argument("--order", choices=["alternate", "fixed", "shuffle"],
                       help="leg order within each repeat (default: the scenario's order)")
        p.add_argument("--profile", type=int, nargs="?", const=3, metavar="N",
                       help="profile the first N timed generate() calls of every run (default 3) with vLLM's torch "
                            "profiler hooks, as arm <arm>-profiled; never canonical numbers")
        p.add_argument("--design", choices=["serial", "paired"],
                       help="serial: one leg at a time, repeats outermost; paired: every leg's engine up at once, "
                            "timed passes alternating between them in engine blocks (default: the scenario's)")
        p.add_argument("--blocks", type=int, help="paired: engine instances per leg (at least 2); with "
                       "--until-decided the most")
        p.add_argument("--until-decided", action="store_true", default=None,
                       help="paired, two legs: after each block from --min-blocks on, stop once every cell is "
                            "decided (each look tests at alpha / looks; docs/statistics.md)")
        p.add_argument("--min-blocks", type=int, help="paired, until decided: the first look (default 3)")
        p.add_argument("--budget-min", type=float, help="paired: start no engine block after this many minutes")
        p.add_argument("--pairs", type=int, help="paired: rounds of one pass per leg and workload per block")
        p.add_argument("--series", help="the records' series tag (default: the scenario's): two designs of one "
                                        "scenario measured into one study, e.g. to compare them (analyze.modes)")
        p.add_argument("--no-diagnose", dest="diagnose", action="store_false",
                       help="do not re-run a failed run whose log names no cause with VLLM_LOGGING_LEVEL=DEBUG")

    @classmethod
    def from_cli_args(cls, a: argparse.Namespace) -> "SweepArgs":
        if a.repeats is not None and a.repeats < 1:
            raise UserError("--repeats should be at least 1")
        if a.timeout_s is not None and a.timeout_s <= 0:
            raise UserError("--timeout should be positive")
        if getattr(a, "profile", None) is not None and a.profile < 1:
            raise UserError("--profile should be at least 1")
        if getattr(a, "blocks", None) is not None and a.blocks < 2:
            raise UserError("--blocks should be at least 2 (engine instances are a level of their own)")
        if getattr(a, "pairs", None) is not None and a.pairs < 1:
            raise UserError("--pairs should be at least 1")
        if getattr(a, "min_blocks", None) is not None and a.min_blocks < 2:
            raise UserError("--min-blocks should be at least 2 (the first look needs two engine blocks)")
        if getattr(a, "budget_min", None) is not None and not a.budget_min > 0:
            raise UserError("--budget-min should be positive")
        if getattr(a, "series", None) is not None and paths.unsafe_name(a.series):
            raise UserError(f"--series: {paths.unsafe_name(a.series)}")
        return cls(scenario=a.scenario, results=a.results, study=a.study, legs=tuple(a.legs),
                   models=tuple(a.models), workloads=tuple(a.workloads), arms=tuple(a.arms),
                   repeats=a.repeats, resume=a.resume, retry_failed=a.retry_failed,
                   allow_dirty=a.allow_dirty, timeout_s=a.timeout_s, devices=a.devices,
                   dry_run=a.dry_run, offline=a.offline, executor=a.executor, ray_address=a.ray_address,
                   engine=a.engine, order=a.order, diagnose=getattr(a, "diagnose", True),
                   wait_lock_s=getattr(a, "wait_lock_s", 0.0), profile=getattr(a, "profile", None),
                   supersede=getattr(a, "supersede", False), prime=getattr(a, "prime", False),
                   design=getattr(a, "design", None), blocks=getattr(a, "blocks", None),
                   pairs=getattr(a, "pairs", None), series=getattr(a, "series", None),
                   until_decided=getattr(a, "until_decided", None), min_blocks=getattr(a, "min_blocks", None),
                   budget_min=getattr(a, "budget_min", None))


@dataclass(kw_only=True)
class SweepResult:
    invocation_id: str
    study_dir: Path
    records: list[RunRecord]
    measured: int
    reused: int
    index_path: Path


def _pick(names: Iterable[str], wanted: tuple[str, ...], what: str, where: Path) -> list[str]:
    names = list(names)
    for w in wanted:
        if w not in names:
            raise UserError(f"{where}: no {what} named {w!r} (has: {', '.join(names)})")
    return [n for n in names if not wanted or n in wanted]


def model_source(sc_file: Path, model) -> tuple[str, str | None]:
    """(path vLLM loads, load_format): the tiny model, dummy weights for an architecture, or as given."""
    if model.path in TINY_MODELS:
        return str(build_tiny(model.path)), None
    if model.architecture:
        return str(materialize_architecture(sc_file.parent / model.architecture)), "dummy"
    p = Path(model.path).expanduser()
    return (str(p.resolve()) if p.exists() else model.path), None


def check_model_paths(sc_file: Path, sc: Scenario, names: list[str]) -> None:
    """A model path that names a local folder must exist before anything is built or measured; a
    hub id (`org/name`, resolved by vLLM) is left to vLLM."""
    for i, m in enumerate(sc.models):
        if m.name not in names or not m.path or m.path in TINY_MODELS:
            continue
        p = Path(m.path).expanduser()
        local = m.path.startswith(("/", ".", "~")) or m.path.count("/") > 1
        if p.exists() and not p.is_dir():
            raise UserError(f"{sc_file}: models[{i}].path: {m.path} is a file, not a model folder")
        if local and not p.exists():
            raise UserError(f"{sc_file}: models[{i}].path: no such model folder {m.path}")


def _spec(name: str, specs: Mapping[str, LegSpec] | None) -> LegSpec:
    """A leg by name: one the caller planned (a history's derived legs have no file), else its leg file."""
    return specs[name] if specs is not None and name in specs else legmod.load_leg(name)


def resolve_envs(sc: Scenario, leg_names: list[str], model_names: list[str], arm_names: list[str],
                 *, offline: bool = False, dry_run: bool = False,
                 specs: Mapping[str, LegSpec] | None = None) -> dict[tuple[str, str, str], LegEnv]:
    """One env per (leg, model, arm); pins make derived envs, which are shared when identical.
    In a dry run a leg that does not resolve here is listed as unresolved instead of stopping it.
    `specs`: legs without a file of their own (a history's derived legs), by name."""
    envs: dict[tuple[str, str, str], LegEnv] = {}
    cache: dict[tuple[str, tuple[str, ...]], LegEnv] = {}
    for ln in leg_names:
        spec = _spec(ln, specs)
        for mn in model_names:
            for an in arm_names:
                arm = next(a for a in sc.arms if a.name == an)
                pins = tuple(spec.model_pins.get(mn, [])) + tuple(arm.pins)
                key = (ln, pins)
                if key not in cache:
                    try:
                        cache[key] = legmod.resolve(spec, pins, offline=offline)
                    except LegEnvError as e:
                        if not dry_run:
                            raise
                        console.print(f"[yellow]dry run: {e}")
                        cache[key] = dryrun.unresolved_env(spec, pins, e)
                envs[(ln, mn, an)] = cache[key]
    return envs


def plan(args: SweepArgs, *, specs: Mapping[str, LegSpec] | None = None) -> tuple[Scenario, Path, list[PlannedRun]]:
    """The sweep's runs in order. `specs`: the legs to measure in place of the scenario's, in order (a
    history's release legs, `harness.experiments.history`)."""
    sc_file = scenario_path(args.scenario)
    sc = load_scenario(sc_file)
    if args.series is not None:
        sc = sc.model_copy(update={"series": args.series})
    legs = _pick(sc.legs if specs is None else list(specs), args.legs, "leg", sc_file)
    models = _pick([m.name for m in sc.models], args.models, "model", sc_file)
    arms = _pick([a.name for a in sc.arms], args.arms, "arm", sc_file)
    wanted_wl = _pick([w.name for w in sc.workloads], args.workloads, "workload", sc_file)
    study = args.study or sc.name
    why = paths.unsafe_name(study)
    if why:
        raise UserError(f"--study: {why}")
    study_dir = paths.inside(args.results, study)
    _check_study_dir(study_dir)
    check_model_paths(sc_file, sc, models)
    # Sizes the command line overrides and the workloads' source folders, before any leg or engine.
    check_plan(sc_file, sc, wanted_wl, repeats=args.repeats, timeout_s=args.timeout_s,
               check_sources=args.executor == "local")
    envs = (resolve_envs(sc, legs, models, arms, offline=args.offline, dry_run=args.dry_run) if specs is None
            else resolve_envs(sc, legs, models, arms, offline=args.offline, dry_run=args.dry_run, specs=specs))
    sources = {m: model_source(sc_file, sc.model(m)) for m in models}
    engine = args.engine or sc.engine
    design = paired_design(args, sc, legs, say=console.print, specs=specs)
    if design is not None:
        planned = _paired_plan(args, sc, study, study_dir, legs, models, arms, wanted_wl, envs, sources)
        return sc, study_dir, planned
    planned: list[PlannedRun] = []
    for rep in range(1, (args.repeats or sc.repeats) + 1):
        for ln in leg_order(legs, rep, args.order or sc.order, sc.order_seed):
            for mn in models:
                m = sc.model(mn)
                wls = [w for w in sc.workloads_for(m) if w.name in wanted_wl]
                # With one engine per group, a group's workloads must follow one another.
                pairs = ([(w, an) for an in arms for w in wls] if engine == "per-group"
                         else [(w, an) for w in wls for an in arms])
                for wl, an in pairs:
                    spec = RunSpec(study=study, series=sc.series_tag, leg_env=envs[(ln, mn, an)], model=m,
                                   model_path=sources[mn][0], load_format=sources[mn][1], workload=wl,
                                   arm=profiled_arm(next(a for a in sc.arms if a.name == an), args.profile),
                                   repeat=rep,
                                   timeout_s=args.timeout_s or sc.timeout_s, devices=args.devices, engine=engine)
                    planned.append(PlannedRun(index=len(planned) + 1, spec=spec,
                                              run_dir=paths.inside(study_dir / "runs", *spec.run_id.split("/"))))
    if args.resume:
        for p in planned:
            p.reuse = reusable(p, args.retry_failed)
    if args.prime:
        planned = prime.with_primes(study_dir, planned, lambda s: (s.leg_env.leg.name, s.model.name, s.arm.name))
    return sc, study_dir, planned


def _check_study_dir(study_dir: Path) -> None:
    """A sweep writes runs/, sweeps/ and study.yaml into its study folder: only a new or empty folder,
    or a study's, and never one inside a study (a results root that is itself a study or its runs/)."""
    if study_dir.exists() and not study_dir.is_dir():
        raise UserError(f"{study_dir}: not a folder; a study is measured into a folder")
    if study_dir.is_dir() and any(study_dir.iterdir()) and not is_study(study_dir):
        raise UserError(f"{study_dir}: an existing folder that is not a study (no study.yaml or runs/ in it); "
                        "refused: name a new folder, or a study's")
    inside = next((p for p in list(study_dir.resolve().parents)[:2] if is_study(p)), None)
    if inside is not None:
        raise UserError(f"{study_dir}: inside the study {inside}; refused: --results names the folder that holds "
                        "studies")


def paired_design(args: SweepArgs, sc: Scenario, legs: list[str], *, say: Callable[[str], None] | None = None,
                  specs: Mapping[str, LegSpec] | None = None) -> paired.Design | None:
    """The paired design's settings when this sweep uses it (None: serial). A CUDA leg that cannot
    sleep makes it serial, said in one line through `say`."""
    if (args.design or sc.design) != "paired":
        return None
    if len(legs) < 2:
        raise UserError("the paired design needs two legs or more (one leg has nothing to pair with)")
    if args.repeats is not None:
        raise UserError("--repeats: the paired design repeats engine blocks; use --blocks")
    for what, bad in (("--executor ray", args.executor != "local"), ("--profile", args.profile is not None),
                      ("--prime", args.prime), ("--engine", args.engine is not None)):
        if bad:
            raise UserError(f"{what} does not combine with the paired design")
    serve = [w.name for w in sc.workloads if workloads.traits_of(w.kind).server]
    if serve:
        raise UserError(f"workload {serve[0]!r} is a serve workload; the paired design measures offline passes")
    sleep, why_not = paired.resolve_sleep(sc.sleep, [_spec(ln, specs) for ln in legs])
    if why_not:
        if say is not None:
            say(f"[yellow]{why_not}")
        return None
    until = bool(sc.until_decided if args.until_decided is None else args.until_decided)
    blocks, min_blocks = args.blocks or sc.blocks, args.min_blocks or sc.min_blocks
    if until and len(legs) != 2:
        raise UserError("--until-decided compares two legs; this sweep has " + str(len(legs)))
    if until and min_blocks > blocks:
        raise UserError(f"--until-decided: the first look (block {min_blocks}) is after the last block ({blocks})")
    if until and args.resume:
        raise UserError("--until-decided does not combine with --resume: the looks are planned for one sweep")
    budget = args.budget_min if args.budget_min is not None else sc.budget_min
    return paired.Design(blocks=blocks, pairs=args.pairs or sc.pairs, pair_order=sc.pair_order,
                         order_seed=sc.order_seed, sleep=sleep, until_decided=until, min_blocks=min_blocks,
                         budget_s=None if budget is None else budget * 60)


def _paired_plan(args: SweepArgs, sc: Scenario, study: str, study_dir: Path, legs: list[str], models: list[str],
                 arms: list[str], wanted_wl: list[str], envs: dict, sources: dict) -> list[PlannedRun]:
    """Blocks outermost, then (model, arm), then every leg's workloads in scenario order; repeat = block."""
    blocks = args.blocks or sc.blocks
    planned: list[PlannedRun] = []
    for block in range(1, blocks + 1):
        for mn in models:
            m = sc.model(mn)
            wls = [w for w in sc.workloads_for(m) if w.name in wanted_wl]
            for an in arms:
                for ln in legs:
                    for wl in wls:
                        spec = RunSpec(study=study, series=sc.series_tag, leg_env=envs[(ln, mn, an)], model=m,
                                       model_path=sources[mn][0], load_format=sources[mn][1], workload=wl,
                                       arm=next(a for a in sc.arms if a.name == an), repeat=block,
                                       timeout_s=args.timeout_s or sc.timeout_s, devices=args.devices,
                                       engine="paired")
                        planned.append(PlannedRun(index=len(planned) + 1, spec=spec,
                                                  run_dir=paths.inside(study_dir / "runs", *spec.run_id.split("/"))))
    if args.resume:
        for p in planned:
            p.reuse = reusable(p, args.retry_failed)
        whole: dict[tuple, list[PlannedRun]] = {}
        for p in planned:
            whole.setdefault(paired.block_key(p.spec), []).append(p)
        for (block, mn, an), runs in whole.items():
            done = [p for p in runs if p.reuse is not None]
            if done and len(done) < len(runs):
                # Half a block cannot be finished: its pairs need every leg's engine of that block.
                if not args.supersede:
                    raise UserError(f"{study_dir}: paired block {block} of ({mn}, {an}) is half done ({len(done)} of "
                                    f"{len(runs)} runs finished); --supersede re-measures the whole block")
                for p in runs:
                    p.reuse = None
    return planned


def profiled_arm(arm: Arm, iterations: int | None) -> Arm:
    """`--profile N`: the arm, profiled, under its own name, so its runs never replace unprofiled ones."""
    if iterations is None:
        return arm
    prof = (arm.profile or Profile()).model_copy(update={"iterations": iterations})
    name = arm.name if arm.profile is not None else f"{arm.name}-profiled"
    return arm.model_copy(update={"name": name, "profile": prof})


def leg_order(legs: list[str], repeat: int, order: str, seed: int = 0) -> list[str]:
    """The legs of one repeat in measuring order, so slow drift of the machine cannot line up with
    the version axis: alternate reverses every other repeat; shuffle draws with a recorded seed."""
    if order == "alternate":
        return list(legs) if repeat % 2 else list(reversed(legs))
    if order == "shuffle":
        out = list(legs)
        random.Random(f"{seed}:{repeat}").shuffle(out)
        return out
    return list(legs)


def reusable(p: PlannedRun, retry_failed: bool) -> RunRecord | None:
    path = p.run_dir / "results.json"
    if not path.exists():
        return None
    try:
        rec = record.read(path)
    except Exception:  # noqa: BLE001 - a record we cannot read is simply measured again
        return None
    if rec.fingerprint != p.spec.fingerprint or rec.status == "timeout":
        return None
    if rec.status == "failed" and retry_failed:
        return None
    return rec


def write_study_meta(study_dir: Path, sc: Scenario, legs: list[str], *, looks: int = 1,
                     specs: Mapping[str, LegSpec] | None = None, aa_groups: list | None = None) -> None:
    path = study_dir / "study.yaml"
    meta = (read_yaml(path) or {}) if path.exists() else {}  # bounded like every YAML input
    # A sweep until decided tests every look at alpha / looks: the tables must test at that level too.
    if int(meta.get("looks") or 1) != looks and (study_dir / "runs").is_dir():
        raise UserError(f"{path}: looks {meta.get('looks') or 1} (the level its verdicts are tested at); this "
                        f"sweep would need {looks}: measure it into a new study")
    if looks > 1:
        meta["looks"] = looks
    before = json.dumps(meta, sort_keys=True, default=str)
    meta.setdefault("schema_version", study_file.SCHEMA_VERSION)
    meta.setdefault("name", study_dir.name)
    meta.setdefault("title", sc.description or sc.name)
    meta.setdefault("provenance", "measured")
    meta.setdefault("main_series", sc.series_tag)
    for key in ("margin", "engine_sd", "engine_sd_source"):
        if getattr(sc, key) is not None:
            meta.setdefault(key, getattr(sc, key))
    if sc.half_pass:
        meta.setdefault("half_pass", list(sc.half_pass))
    if aa_groups and (merged := aa.merge_aa(str(path), meta.get("aa"), aa_groups)) != meta.get("aa"):
        meta["aa"], meta["schema_version"] = merged, study_file.SCHEMA_VERSION   # v1 → v2: `aa` is new in 2
    order = meta.setdefault("legs", [])
    for ln in legs:
        if ln not in [x["name"] for x in order]:
            order.append({"name": ln, "label": _spec(ln, specs).label})
    # A hand-edited study.yaml keeps its layout and comments unless the sweep has something to add.
    if path.exists() and json.dumps(meta, sort_keys=True, default=str) == before:
        return
    study_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(meta, sort_keys=False))
    os.replace(tmp, path)


def sweep(args: SweepArgs, *, executor: Executor | None = None,
          stop_rule: paired.StopRule | None = None) -> SweepResult:
    """Plan and measure. `stop_rule`: what a paired sweep until decided asks after each block (the
    CLI passes harness.analyze.until_decided; it lives above measure/, as it uses the analysis)."""
    sc, study_dir, planned = plan(args)
    return execute_plan(args, sc, study_dir, planned, executor=executor, stop_rule=stop_rule)


def execute_plan(args: SweepArgs, sc: Scenario, study_dir: Path, planned: list[PlannedRun], *,
                 executor: Executor | None = None, stop_rule: paired.StopRule | None = None,
                 design: paired.Design | None = None,
                 block_key: Callable[[RunSpec], tuple] = paired.block_key) -> SweepResult:
    """Build the envs, take the node lock, run the guards, then measure the plan in order. `design`
    (with its `block_key`) measures the plan in a paired design its caller built (the crosscheck's
    same-engine one) instead of the one the scenario and arguments ask for."""
    over = supersede.replacements(planned)
    if args.dry_run:
        replacing = {r.planned.index for r in over}
        for p in planned:
            what = "reuse" if p.reuse else "over " if p.index in replacing else "run  "
            console.print(f"{p.index:>4}  {what}  {p.spec.run_id}  env={p.spec.leg_env.name}", highlight=False)
            console.print(f"      inputs: {dryrun.inputs_line(p.spec.workload.work)}", highlight=False)
        design = design or paired_design(args, sc, list(planned_legs(planned)), specs=planned_legs(planned))
        if design is not None:
            _print_paired_plan(planned, design, block_key)
        for line in aa.say_aa(aa.planned_groups(planned)):
            console.print(line, highlight=False)
        if over:
            console.print(f"{len(over)} run(s) marked 'over' measure where a record is; "
                          f"{sum(r.needs_consent for r in over)} of them finished (--supersede to replace)")
        return SweepResult(invocation_id="dry-run", study_dir=study_dir, records=[], measured=0,
                           reused=sum(p.reuse is not None for p in planned), index_path=Path())
    supersede.check(over, resume=args.resume, supersede=args.supersede)
    design = design or (paired_design(args, sc, list(planned_legs(planned)), specs=planned_legs(planned))
                        if planned and planned[0].spec.engine == "paired" else None)
    # Sortable by name in the order invocations started (milliseconds), unique by the suffix.
    invocation_id = datetime.now().strftime("%Y%m%dT%H%M%S%f")[:-3] + "-" + uuid.uuid4().hex[:6]
    executor = executor or executor_named(args.executor, address=args.ray_address, diagnose=args.diagnose)
    if args.executor != "local":
        held = _null()
    elif args.wait_lock_s > 0:
        held = waiting_node_lock(args.wait_lock_s, poll_s=10.0, say=console.print)
    else:
        held = guard.node_lock()
    with held:
        if args.executor == "local":
            left = kill_orphans()
            if left:
                console.print(f"[yellow]killed {len(left)} process(es) left by an earlier, interrupted sweep")
        envs = {p.spec.leg_env.root: p.spec.leg_env for p in planned if p.reuse is None}
        for env in envs.values():
            rep = legmod.ensure(env)
            console.print(f"leg env {env.name}: {'reused' if rep.reused else 'built'} in {rep.seconds:.1f} s")
            found = guard.check([f"{x['dist']} registers {x['group']}:{x['name']}"
                                 for x in legmod.foreign_plugins(env)], args.allow_dirty,
                                f"foreign vLLM plugins in {env.name}")
            for p in planned:
                if p.spec.leg_env.root == env.root:
                    p.dirty = found
        groups = aa.planned_groups(planned)
        for line in aa.say_aa(groups):
            console.print(line, highlight=False)
        write_study_meta(study_dir, sc, list(planned_legs(planned)), looks=design.looks if design is not None else 1,
                         specs=planned_legs(planned), aa_groups=groups)
        index_path = paths.inside(study_dir, "sweeps", f"{invocation_id}.json")
        index = sweep_index.SweepIndex(
            schema_version=sweep_index.SCHEMA_VERSION, invocation_id=invocation_id, harness_version=__version__,
            scenario=str(args.scenario), args={k: str(v) for k, v in vars(args).items()}, started_at=record.now(),
            finished_at=None, planned=len(planned), runs=[], engine=args.engine or sc.engine,
            order=args.order or sc.order, leg_order=_leg_orders(planned))
        if design is not None:
            index.design = {"design": "paired", **dataclasses.asdict(design)}
        index.superseded = supersede.move_aside(over, study_dir, invocation_id)
        index.write(index_path)
        records: list[RunRecord] = []
        counts = {"measured": 0, "reused": 0}
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                      console=console, transient=False) as bar:
            task = bar.add_task("sweep", total=len(planned))

            def on_done(p: PlannedRun, rec: RunRecord, reused: bool) -> None:
                records.append(rec)
                counts["reused" if reused else "measured"] += 1
                entry = {"run_id": p.spec.run_id, "fingerprint": p.spec.fingerprint,
                         "status": rec.status, "reused": reused, "measured_by": rec.invocation_id,
                         "attempt": rec.attempt, "runner": rec.runner, "node": rec.node}
                if not reused and rec.manifest.get("lost_attempts"):
                    entry["lost_attempts"] = rec.manifest["lost_attempts"]  # runs retried after a lost node
                index.runs.append(sweep_index.SweepEntry(**entry))
                index.write(index_path)
                # The kind's own metric: a serve run's is its peak output tok/s, not a throughput field.
                kind = p.spec.workload.kind
                key = workloads.metric_of(kind).key if kind in workloads.KINDS else "throughput_tok_s"
                value = getattr(rec.metrics, key, None)
                shown = f"{value:,.2f}" if value else (rec.failure.reason[:80] if rec.failure else "")
                colour = {"ok": "green", "failed": "red", "timeout": "red"}[rec.status]
                bar.console.print(f"[{colour}]{rec.status:7}[/] run {p.index}/{len(planned)} "
                                  f"{p.spec.run_id} {'(reused) ' if reused else ''}{shown}")
                bar.update(task, advance=1, description=f"run {p.index}/{len(planned)}")

            if design is not None:
                if design.until_decided and stop_rule is None:
                    raise UserError("--until-decided needs its stop rule (harness.analyze.until_decided)")
                stop = ((lambda done: stop_rule(records, done, design, sc)) if design.until_decided and stop_rule
                        else None)
                paired.run_paired(planned, design, invocation_id=invocation_id, allow_dirty=args.allow_dirty,
                                  on_done=on_done, say=bar.console.print, stop=stop, key=block_key)
            else:
                executor.run_all(planned, invocation_id=invocation_id, allow_dirty=args.allow_dirty,
                                 on_done=on_done)
        index.finished_at = record.now()
        index.write(index_path)
    return SweepResult(invocation_id=invocation_id, study_dir=study_dir, records=records,
                       measured=counts["measured"], reused=counts["reused"], index_path=index_path)


def planned_legs(planned: list[PlannedRun]) -> dict[str, LegSpec]:
    """The plan's legs by name, in the order it first measures them."""
    return {p.spec.leg_env.leg.name: p.spec.leg_env.leg for p in planned}


def _print_paired_plan(planned: list[PlannedRun], design: paired.Design,
                       block_key: Callable[[RunSpec], tuple] = paired.block_key) -> None:
    blocks: dict[tuple, list[PlannedRun]] = {}
    for p in planned:
        blocks.setdefault(block_key(p.spec), []).append(p)
    console.print(f"paired design: {design.blocks} engine block(s) x {design.pairs} round(s), "
                  f"{design.pair_order} order (seed {design.order_seed}), sleep {'on' if design.sleep else 'off'}",
                  highlight=False)
    if design.until_decided:
        console.print(f"until decided: a look after each of blocks {design.min_blocks}–{design.blocks} "
                      f"({design.looks} looks, each at α/{design.looks}); the sweep stops at the first look that "
                      "decides every cell" + (f", or after {design.budget_s / 60:g} min" if design.budget_s else ""),
                      highlight=False)
    for runs in blocks.values():
        block, mn, an = runs[0].spec.repeat, runs[0].spec.model.name, runs[0].spec.arm.name
        legs = list(dict.fromkeys(p.spec.leg_env.leg.name for p in runs))
        wls = list(dict.fromkeys(p.spec.workload.name + (f" ({p.spec.arm.name})" if design.sides else "")
                                 for p in runs if p.spec.leg_env.leg.name == legs[0]))
        reused = all(p.reuse is not None for p in runs)
        what = f"leg {legs[0]}, both sides on one engine" if design.sides else f"arm {an}"
        console.print(f"block {block}, {mn}, {what}{' (reused)' if reused else ''}:", highlight=False)
        for line in paired.describe_block(legs, wls, design, block):
            console.print(line, highlight=False)


def _leg_orders(planned: list[PlannedRun]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in planned:
        legs = out.setdefault(f"r{p.spec.repeat}", [])
        if p.spec.leg_env.leg.name not in legs:
            legs.append(p.spec.leg_env.leg.name)
    return out


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
