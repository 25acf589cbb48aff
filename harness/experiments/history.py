"""A release history: one scenario measured on every release of a range (docs/history.md).

A scenario with a `history:` key names a template leg and the releases; this module plans one leg per
release through the bisect's leg machinery (`bisect_legs.release_legs`: a leg uv builds is the
template's stack with only the release changed, or the release's reviewed leg file where it names the
same stack; a prebuilt template needs each release's own leg file), builds each env, and measures the
releases that installed through the sweep (`measure.sweep.plan` with those legs, `execute_plan`), in the
paired design where every release's engine fits in memory at once and the serial design (legs
alternating) otherwise. `history.json` records each release's leg, compat id, lock and status (a
release that does not install, with the installer's reason), the design and why, and whether builds
finer than the releases exist. Where they do and a step changed (the step test of
`harness.analyze.history`), the sweep bisects into it (`bisect.bisect_specs` on the two release legs)
and the history record lists each bisect with its conclusion and record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from packaging.version import Version

from harness.analyze.canonical import canonicalize
from harness.analyze.dataset import load
from harness.analyze.history import MOVED, history_view
from harness.core.errors import LegEnvError, UserError
from harness.experiments.bisect import BisectArgs, bisect_specs
from harness.experiments.bisect_legs import kind_name, release_legs
from harness.experiments.bisect_measure import stack_of
from harness.measure import leg as legmod
from harness.measure import paired
from harness.measure import sweep as sweepmod
from harness.measure.index import index_versions, resolver_versions_between
from harness.measure.leg import LegEnv, LegSpec
from harness.measure.lock import waiting_node_lock
from harness.measure.scenario import History as HistoryPlan
from harness.measure.scenario import Scenario, load_scenario, scenario_path
from harness.schema import history as hfile
from harness.schema import record

# Memory of one tiny-model CPU engine beside its KV cache (VLLM_CPU_KVCACHE_SPACE): the worker and the
# engine process with torch and vLLM loaded. In the smoke check (docs/history.md) the tiny-Llama engines of
# 0.27.0-0.31.0 peaked at about 1.1 GiB resident, worker and engine together, and 0.32.0's at up to 2.8 GiB
# while it started (its compile workers); 2 GiB plus the KV cache in full covers the largest. The paired
# design keeps every release's engine up at once.
ENGINE_BASE_GIB = 2.0
# Share of the memory available at planning time the resident engines may take.
MEMORY_SHARE = 0.8


def is_history(scenario: str) -> bool:
    return load_scenario(scenario_path(scenario)).history is not None


def releases(plan: HistoryPlan, template: LegSpec, *, versions: Callable[[str], list[Version]] = index_versions
             ) -> list[str]:
    """The history's releases in ascending order: the listed ones, or every release of the template's
    distribution on the package index from `first` to `last`."""
    if plan.releases:
        given = sorted({Version(v): v for v in plan.releases}.items())
        return [text for _, text in given]
    lo, hi = Version(str(plan.first)), Version(str(plan.last))
    if lo > hi:
        raise UserError(f"history: first {plan.first} is after last {plan.last}")
    return [str(v) for v in versions(template.vllm_dist) if lo <= v <= hi]


def release_specs(template: LegSpec, versions: list[str]) -> tuple[dict[str, LegSpec], dict[str, tuple[str, str]]]:
    """version -> its leg, and version -> (leg name, why none) for a prebuilt release without a leg file."""
    found = release_legs(template, template, [v for v in versions if v != template.vllm_version])
    return ({v: found.legs[v] for v in versions if v in found.legs},
            {v: found.missing[v] for v in versions if v in found.missing})


def memory_available_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        return None
    return None


def choose_design(sc: Scenario, legs: list[LegSpec], *, asked: str | None,
                  available_gib: float | None) -> tuple[str, str]:
    """(design, why): the paired design where the scenario (or --design) asks for it and every release's
    engine fits in memory at once; the serial design, legs alternating, otherwise."""
    want = asked or sc.design
    if want != "paired":
        return "serial", "the scenario asks for the serial design (legs alternating across repeats)"
    if len(legs) < 2:
        return "serial", "one release installed: nothing to pair with"
    cpu = [leg for leg in legs if leg.device == "cpu"]
    if cpu:
        need = sum(ENGINE_BASE_GIB + float(leg.env.get("VLLM_CPU_KVCACHE_SPACE", "4")) for leg in cpu)
        if available_gib is None:
            return "serial", "the memory available here is unknown, so the paired design's resident engines may not fit"
        if need > MEMORY_SHARE * available_gib:
            return "serial", (f"{len(cpu)} resident CPU engines need about {need:.0f} GiB, above {MEMORY_SHARE:.0%} "
                              f"of the {available_gib:.0f} GiB available: legs alternate instead")
        return "paired", (f"{len(cpu)} resident CPU engines need about {need:.0f} GiB of the {available_gib:.0f} GiB "
                          "available: every release in each round, order balanced")
    return "paired", "every release's engine resident, order balanced (the sweep falls back where legs cannot sleep)"


def finer_between(template: LegSpec, measured: list[str], *,
                  versions: Callable[..., list[Version]] | None = None) -> dict[str, list[str]]:
    """"a→b" -> the builds between consecutive measured releases a and b that a bisect could run into:
    for a leg uv builds, every version on the index between them (pre-releases, dev or nightly builds,
    and releases the history did not list); for a prebuilt template, the releases between them that
    have a leg file of their own (the prebuilt list: such a leg's vLLM sits in a folder of its own).
    A UserError where the index cannot be read."""
    mv = [Version(v) for v in measured]
    if template.prebuilt_python:
        every = prebuilt_releases(template)
    else:
        try:
            every = (versions or index_versions)(template.vllm_dist, include_pre=True)
        except UserError as e:
            if "no package index configured" not in str(e) or versions is not None:
                raise
            # No index URL set: ask uv's resolver, which installs from its own configured (or default) index.
            every = [v for a, b in zip(mv, mv[1:])
                     for v in resolver_versions_between(legmod._uv(), template.vllm_dist, a, b)]  # noqa: SLF001
    between = {f"{a}→{b}": [str(v) for v in every if a < v < b and str(v) not in measured]
               for a, b in zip(mv, mv[1:])}
    return {k: v for k, v in between.items() if v}


def prebuilt_releases(template: LegSpec) -> list[Version]:
    """The releases of a prebuilt template's kind that have a leg file (`h200-0.24.0` -> `h200-0.25.0`, ...)."""
    out = []
    for name in legmod.known_legs():
        leg = legmod.load_leg(name)
        if (leg.prebuilt_python and (leg.device, leg.vllm_dist) == (template.device, template.vllm_dist)
                and name == kind_name(template, leg.vllm_version)):
            out.append(Version(leg.vllm_version))
    return sorted(out)


def finer_text(dist: str, found: dict[str, list[str]] | UserError) -> str:
    """What `finer_between` found, as history.json's `finer_builds` line."""
    if isinstance(found, UserError):
        return f"not checked: {found}"
    if not found:
        return (f"none: no {dist} build between consecutive releases (no pre-release, dev or nightly build, "
                "no prebuilt leg), so a changed step cannot be narrowed below its two releases")
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in found.items()) + (
        " — a changed step among these is bisected into them after the history is measured")


def finer_builds(template: LegSpec, measured: list[str], *,
                 versions: Callable[..., list[Version]] | None = None) -> tuple[dict[str, list[str]], str]:
    """(the builds between consecutive releases, the line that says so)."""
    try:
        found = finer_between(template, measured, versions=versions)
    except UserError as e:
        return {}, finer_text(template.vllm_dist, e)
    return found, finer_text(template.vllm_dist, found)


def changed_steps(study_dir: Path) -> list[tuple[str, str, str, str, str]]:
    """(model, workload, old version, new version, verdict) of every step the history's step test calls
    faster or slower (`harness.analyze.history`, decided together at the study's level)."""
    view = history_view(canonicalize(load(study_dir)), study_dir)
    if view is None:
        return []
    version = {r.leg: r.version for r in view.record.releases}
    return [(s.model, s.workload, version[a], version[b], r.verdict)
            for s in view.series for a, b, r in s.steps if r.verdict in MOVED]


def bisect_changed(args: sweepmod.SweepArgs, sc: Scenario, study_dir: Path, hist: hfile.History,
                   specs: dict[str, LegSpec], *, changed: Callable[[Path], list] = changed_steps) -> hfile.History:
    """Run a bisect into every changed step that has finer builds ("since which release?"), one per
    (model, workload), its record beside the results root's other bisects (where every report finds
    it); the history record lists them. A bisect that cannot run is listed with why, and the history
    measured so far stays as it is."""
    by_version = {s.vllm_version: s for s in specs.values()}
    done: list[hfile.Bisected] = []
    try:
        steps = changed(study_dir)
    except UserError as e:
        sweepmod.console.print(f"[yellow]history: the steps could not be read, so no bisect ran: {e}")
        return hist
    for model, wl, a, b, verdict in steps:
        between = hist.finer.get(f"{a}→{b}")
        if not between:
            continue
        bargs = BisectArgs(scenario=str(args.scenario), good=by_version[a].name, bad=by_version[b].name,
                           model=model, workload=wl, repeats=max(2, args.repeats or sc.repeats),
                           threshold=sc.margin or BisectArgs.threshold, timeout_s=args.timeout_s,
                           results=study_dir.parent / "bisect", versions=tuple(between), offline=args.offline,
                           resume=args.resume, allow_dirty=args.allow_dirty,
                           lock_wait_s=args.wait_lock_s or BisectArgs.lock_wait_s)
        sweepmod.console.print(f"history: {model} / {wl} {a}→{b} is {verdict}: bisecting into {', '.join(between)}")
        entry = dict(model=model, workload=wl, step=f"{a}→{b}", verdict=verdict, between=between)
        try:
            rec, path = bisect_specs(bargs, by_version[a], by_version[b])
        except UserError as e:
            done.append(hfile.Bisected(**entry, conclusion=f"not run: {e}"))
        else:
            rel = None if path is None else str(path.relative_to(study_dir.parent))
            done.append(hfile.Bisected(**entry, record=rel, conclusion=rec.conclusion.text))
        hist = hist.model_copy(update={"bisects": [*hist.bisects, done[-1]]})
        hfile.write(study_dir, hist)
    return hist


def _install(spec: LegSpec, *, offline: bool, allow_dirty: bool, build: bool) -> tuple[LegEnv | None, hfile.Release]:
    base = dict(version=spec.vllm_version, leg=spec.name, label=spec.label,
                derived=spec.name not in legmod.known_legs())
    try:
        env = legmod.resolve(spec, (), offline=offline)
    except UserError as e:
        return None, hfile.Release(**base, status="not-installed", reason=_tail(e))
    more = dict(compat_id=env.compat_id, lock=env.lock, stack=stack_of(env))
    if build:
        try:
            rep = legmod.ensure(env)
            found = [f"{x['dist']} registers {x['group']}:{x['name']}" for x in legmod.foreign_plugins(env)]
        except UserError as e:
            return None, hfile.Release(**base, **more, status="not-installed", reason=_tail(e))
        more |= dict(build_s=round(rep.seconds, 1), env_reused=rep.reused)
        if found and not allow_dirty:
            return None, hfile.Release(**base, **more, status="dirty", reason="; ".join(found))
    return env, hfile.Release(**base, **more, status="measured")


def _tail(e: UserError | str, lines: int = 12) -> str:
    """Why a release did not install: one summary line first (the resolver's `cause:` where it gives one,
    which names the pin that cannot be met), then the tool's last lines."""
    log = e.log if isinstance(e, LegEnvError) else str(e)
    tail = log.strip().splitlines()[-lines:]
    cause = next((ln.strip().removeprefix("cause:").strip() for ln in tail if ln.strip().startswith("cause:")), None)
    head = cause or (str(e).strip().splitlines() or [""])[-1]
    return "\n".join([head, *tail])


def sweep_history(args: sweepmod.SweepArgs, *, stop_rule: paired.StopRule | None = None) -> sweepmod.SweepResult:
    """Plan the history's legs, build them, record the plan, and measure the releases that installed.
    Each release's env is built here with the leg's own pins; a model's or arm's pins make further envs,
    which the sweep builds as it always does."""
    sc_file = scenario_path(args.scenario)
    sc = load_scenario(sc_file)
    if sc.history is None:
        raise UserError(f"{sc_file}: no history: key (a plain scenario is measured by the sweep itself)")
    template = legmod.load_leg(sc.history.template)
    versions = releases(sc.history, template)
    specs, missing = release_specs(template, versions)
    entries: dict[str, hfile.Release] = {
        v: hfile.Release(version=v, leg=name, label=v, status="no-leg", reason=why)
        for v, (name, why) in missing.items()}
    installed: dict[str, LegSpec] = {}
    held = (contextlib.nullcontext() if args.dry_run
            else waiting_node_lock(args.wait_lock_s or 3600, say=sweepmod.console.print))
    with held:
        for v, spec in specs.items():
            env, entries[v] = _install(spec, offline=args.offline, allow_dirty=args.allow_dirty, build=not args.dry_run)
            said = (entries[v].status if env is None
                    else "resolves (dry run: not built)" if args.dry_run else "installed")
            sweepmod.console.print(f"history: {v} on leg {spec.name}: {said}"
                                   + (f" ({entries[v].reason.splitlines()[0]})" if entries[v].reason else ""))
            if env is not None:
                installed[spec.name] = spec
    if not installed:
        raise UserError(f"{sc_file}: no release of the history installed here")
    design, why = choose_design(sc, list(installed.values()), asked=args.design, available_gib=memory_available_gib())
    sweepmod.console.print(f"history: {design} design: {why}")
    measured = [v for v in versions if entries[v].status == "measured"]
    finer, finer_line = finer_builds(template, measured)
    hist = hfile.History(scenario=str(args.scenario), template=template.name, dist=template.vllm_dist,
                         releases=[entries[v] for v in versions],
                         design=design, design_reason=why,  # type: ignore[arg-type]
                         finer_builds=finer_line, finer=finer, created_at=record.now())
    run_args = replace(args, design=design)
    sc2, study_dir, planned = sweepmod.plan(run_args, specs=installed)
    if args.dry_run:
        return sweepmod.execute_plan(run_args, sc2, study_dir, planned, stop_rule=stop_rule)
    hfile.write(study_dir, hist)
    res = sweepmod.execute_plan(run_args, sc2, study_dir, planned, stop_rule=stop_rule)
    if finer and sc.history.bisect:
        bisect_changed(args, sc, study_dir, hist, installed)
    return res

