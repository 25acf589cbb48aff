"""A release history: one scenario measured on every release of a range (docs/history.md).

A scenario with a `history:` key names a template leg and the releases; this module plans one leg per
release through the bisect's leg machinery (`bisect_legs.release_legs`: a leg uv builds is the
template's stack with only the release changed, or the release's reviewed leg file where it names the
same stack; a prebuilt template needs each release's own leg file), builds each env, and measures the
releases that installed through the sweep (`measure.sweep.plan` with those legs, `execute_plan`), in the
paired design where every release's engine fits in memory at once and the serial design (legs
alternating) otherwise. `history.json` records each release's leg, compat id, lock and status (a
release that does not install, with the installer's reason), the design and why, and whether builds
finer than the releases exist for a bisect into a changed step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace

from packaging.version import Version

from harness.core.errors import LegEnvError, UserError
from harness.experiments.bisect_legs import release_legs
from harness.experiments.bisect_measure import stack_of
from harness.measure import leg as legmod
from harness.measure import paired
from harness.measure import sweep as sweepmod
from harness.measure.index import index_versions
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


def finer_builds(dist: str, measured: list[str], *, versions: Callable[..., list[Version]] = index_versions) -> str:
    """Whether the index holds builds between consecutive measured releases (pre-releases, dev or
    nightly builds) that a bisect could run into where a step changed."""
    try:
        every = versions(dist, include_pre=True)
    except UserError as e:
        return f"not checked: {e}"
    mv = [Version(v) for v in measured]
    between = {f"{a}→{b}": [str(v) for v in every if a < v < b and str(v) not in measured]
               for a, b in zip(mv, mv[1:])}
    found = {k: v for k, v in between.items() if v}
    if not found:
        return (f"none: the index holds no {dist} build between consecutive releases (no pre-release, dev or "
                "nightly builds), so a changed step cannot be narrowed below its two releases")
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in found.items()) + (
        " — `harness bisect` with these as --versions narrows a changed step")


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
            legmod.ensure(env)
            found = [f"{x['dist']} registers {x['group']}:{x['name']}" for x in legmod.foreign_plugins(env)]
        except UserError as e:
            return None, hfile.Release(**base, **more, status="not-installed", reason=_tail(e))
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
    hist = hfile.History(scenario=str(args.scenario), template=template.name, dist=template.vllm_dist,
                         releases=[entries[v] for v in versions],
                         design=design, design_reason=why,  # type: ignore[arg-type]
                         finer_builds=finer_builds(template.vllm_dist, measured), created_at=record.now())
    run_args = replace(args, design=design)
    sc2, study_dir, planned = sweepmod.plan(run_args, specs=installed)
    if not args.dry_run:
        hfile.write(study_dir, hist)
    return sweepmod.execute_plan(run_args, sc2, study_dir, planned, stop_rule=stop_rule)

