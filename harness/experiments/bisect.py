"""Regression bisection: the first release between two legs whose metric differs from the good leg's.

The study measured Qwen3-VL-235B-FP8 image throughput at 0.70x between vLLM 0.18 and 0.26 and could
not say which release did it. `bisect` takes every release between the two, from the package index or
as given (`--versions`, for a machine that cannot reach an index), finds each one's leg
(`harness.experiments.bisect_legs`: the release's own reviewed leg file, or the good leg's spec with
only `vllm_version` changed), measures them with the sweep machinery
(`harness.experiments.bisect_measure`: `plan` for the run specs, `execute` through the local
executor, under the node lock) and searches like `git bisect`:

- the good and the bad leg are measured first, repeat by repeat in turn; if they do not differ by
  the rule there is nothing to search ("endpoints do not differ");
- every step is measured with N repeats and compared with the good leg's samples by
  `harness.analyze.stats.ratio` (Welch t 95% interval); a release *differs* when the CI excludes 1.0 AND the ratio is
  more than `threshold` away from 1.0 (the rule is written into the record);
- a release without a leg, whose env cannot be resolved or built, or with fewer than `min_ok` repeats
  that ran, is recorded as skipped with its reason and a neighbour is measured instead (`git bisect skip`); if
  only skipped releases separate the last same release from the first differing one, the conclusion
  names all of them as suspects.

The record is rewritten (atomically) after every measured step, as an "incomplete" one: the steps so
far, the releases not measured, where the first change can still be, and no conclusion. A search that
is stopped (a lease that ends, a measurement that raises) leaves that record; the same bisect with
`--resume` reuses the runs it measured and replaces the record with the final one.

Binary search assumes one step change. A measured release that differs in the opposite direction to
the bad leg shows that assumption failed; the conclusion says so rather than hide it.

The record's model and format history: `harness.schema.bisect`.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from packaging.version import Version

from harness import workloads
from harness.analyze import stats
from harness.core import flags, paths
from harness.core.errors import UserError
from harness.core.logs import scrub
from harness.experiments import Ran
from harness.experiments.bisect_legs import ReleaseLegs, given_between, release_legs, releases_between
# Measurement, Measure and SweepMeasure live beside the search; importable from here as before.
from harness.experiments.bisect_measure import Measure, Measurement, SweepMeasure, console, stack_of
from harness.measure import leg as legmod
from harness.measure.index import index_url, index_versions
from harness.measure.leg import LegSpec
from harness.measure.scenario import Scenario, load_scenario, scenario_path
from harness.schema import record
from harness.schema import bisect as schema
from harness.schema.bisect import (MIGRATIONS, SCHEMA_VERSION, BisectRecord, Conclusion, ConclusionKind, Inputs, Role,
                                   Rule, Step, read_record, read_records, write_record)

RESULTS_DIR = schema.RESULTS_DIR


def rule_text(rule: Rule) -> str:
    """The rule in words, as the record keeps it (`inputs.rule_text`)."""
    return (f"a release differs from the good leg when the {rule.confidence:.0%} interval of its "
            f"ratio to the good leg ({stats.METHOD}) excludes 1.0 and the ratio is more than "
            f"{rule.threshold:.0%} away from 1.0; a release with fewer than {rule.min_ok} ok repeats, "
            f"or whose env cannot be resolved or built, is skipped")


# --- the search -----------------------------------------------------------------------------------

def _step(index: int, role: Role, version: str, m: Measurement, good: Measurement | None, *,
          rule: Rule, higher_is_better: bool) -> Step:
    common = dict(index=index, role=role, version=version, leg=m.leg, compat_id=m.compat_id, stack=m.stack,
                  samples=list(m.samples), failures=[scrub(f) for f in m.failures], run_ids=list(m.run_ids))
    reason = None if m.skip_reason is None else scrub(m.skip_reason)
    if reason is None and len(m.samples) < rule.min_ok:
        first = common["failures"][0] if common["failures"] else "no result"
        reason = f"only {len(m.samples)} ok repeat(s) of {len(m.samples) + len(m.failures)}: {first}"
    if reason is not None:
        return Step(**common, verdict="skipped", skipped=True, reason=reason)
    median = float(np.median(m.samples))
    if good is None:
        return Step(**common, median=median, verdict="reference")
    r = stats.ratio(good.samples, m.samples, higher_is_better=higher_is_better, confidence=rule.confidence)
    return Step(**common, median=median, ratio=r.value, ci_low=r.low, ci_high=r.high, verdict=r.verdict,
                differs=rule.differs(r))


def _fmt(s: Step) -> str:
    if s.ratio is None:
        return s.version
    ci = f" [{s.ci_low:.3f}, {s.ci_high:.3f}]" if s.ci_low is not None and s.ci_high is not None else ""
    return f"{s.version} at {s.ratio:.3f}x{ci}"


def _notes(steps: list[Step]) -> list[str]:
    bad = steps[1]
    direction = np.sign((bad.ratio or 1) - 1)
    return [f"{s.version} differs in the opposite direction to the bad leg ({s.ratio:.3f}x vs {bad.ratio:.3f}x): "
            "the change is not one step, so the search result is one of several changes"
            for s in steps if s.differs and np.sign((s.ratio or 1) - 1) != direction]


def _measured(steps: list[Step], version: str) -> Step:
    return next(s for s in reversed(steps) if s.version == version and not s.skipped)


INCOMPLETE = "search incomplete, no conclusion: "


def _so_far(versions: Sequence[str], steps: list[Step], lo: int, hi: int) -> Conclusion:
    """What the steps so far show, said as no conclusion: the search between versions[lo] (same as
    the good leg, or the good leg itself) and versions[hi] (differs) has not ended."""
    seen = {s.version for s in steps}
    unmeasured = [v for v in versions[1:-1] if v not in seen]
    suspects = list(versions[lo + 1:hi + 1])
    said = "; ".join(("" if s.role == "step" else f"{s.role} ") + (f"{s.version} skipped" if s.skipped else
                     _fmt(s) + (", differs" if s.differs else ", same" if s.differs is False else ""))
                     for s in steps)
    lower = f"{versions[lo]} does not differ" if lo else f"{versions[lo]} is the good leg"
    return Conclusion(
        kind="incomplete", suspects=suspects, unmeasured=unmeasured, notes=_notes(steps),
        text=f"{INCOMPLETE}{len(steps)} step(s) measured so far ({said}); releases not "
             f"measured: {', '.join(unmeasured) or 'none'}; so far the first differing release is one of "
             f"{', '.join(suspects)} ({lower}, {_fmt(_measured(steps, versions[hi]))} does)")


# Told the steps so far and an "incomplete" conclusion before each further measurement.
Progress = Callable[[list[Step], Conclusion], None]


def search(versions: Sequence[str], measure: Measure, *, rule: Rule | None = None,
           higher_is_better: bool = True, progress: Progress | None = None) -> tuple[list[Step], Conclusion]:
    """Bisect `versions` (good first, bad last, the releases between in order) with `measure`;
    `progress` hears what is known whenever the search goes on to measure another release."""
    rule = rule or Rule()
    if len(versions) < 2:
        raise ValueError("need at least the good and the bad version")
    steps: list[Step] = []
    m_good, m_bad = measure([versions[0], versions[-1]])
    good = _step(1, "good", versions[0], m_good, None, rule=rule, higher_is_better=higher_is_better)
    steps.append(good)
    bad = _step(2, "bad", versions[-1], m_bad, None if good.skipped else m_good, rule=rule,
                higher_is_better=higher_is_better)
    steps.append(bad)
    for end in (good, bad):
        if end.skipped:
            return steps, Conclusion(kind="endpoint_failed",
                                     text=f"the {end.role} endpoint {end.version} could not be measured: "
                                          f"{end.reason}; nothing was searched")
    if not bad.differs:
        return steps, Conclusion(
            kind="no_change", last_same=versions[-1],
            text=f"no significant change between good and bad: endpoints do not differ by the rule "
                 f"({_fmt(bad)}, {bad.verdict}); nothing was searched")
    lo, hi = 0, len(versions) - 1
    skipped: set[int] = set()
    while True:
        inner = [i for i in range(lo + 1, hi) if i not in skipped]
        if not inner:
            break
        if progress is not None:
            progress(list(steps), _so_far(versions, steps, lo, hi))
        centre = (lo + hi) / 2
        mid = min(inner, key=lambda i: (abs(i - centre), i))
        s = _step(len(steps) + 1, "step", versions[mid], measure([versions[mid]])[0], m_good, rule=rule,
                  higher_is_better=higher_is_better)
        steps.append(s)
        console.print(f"bisect: {s.version}: {'skipped: ' + s.reason if s.skipped else s.verdict}"
                      f"{'' if s.skipped else ', differs' if s.differs else ', same'}")
        if s.skipped:
            skipped.add(mid)
        elif s.differs:
            hi = mid
        else:
            lo = mid
    notes = _notes(steps)
    gap = [versions[i] for i in range(lo + 1, hi)]
    first = _measured(steps, versions[hi])
    if gap:
        suspects = [*gap, versions[hi]]
        return steps, Conclusion(
            kind="ambiguous", last_same=versions[lo], suspects=suspects, notes=notes,
            text=f"the first differing release is one of {', '.join(suspects)}: {versions[lo]} does not "
                 f"differ, {_fmt(first)} does, and the releases between were skipped")
    return steps, Conclusion(
        kind="first_differing", first_differing=versions[hi], last_same=versions[lo], notes=notes,
        text=f"first differing release: {_fmt(first)} vs the good leg ({first.verdict}); "
             f"the release before it, {versions[lo]}, does not differ")


# --- the verb -------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class BisectArgs:
    scenario: str
    good: str
    bad: str
    workload: str | None = None
    model: str | None = None
    arm: str | None = None
    repeats: int = 3
    threshold: float = 0.03
    timeout_s: float | None = None
    results: Path = RESULTS_DIR
    index: str | None = None
    versions: tuple[str, ...] | None = None  # the releases between, given: the index is not consulted
    include_pre: bool = False
    offline: bool = False
    resume: bool = False
    supersede: bool = False            # measure over finished records (the sweep's --supersede)
    allow_dirty: bool = False
    dry_run: bool = False
    lock_wait_s: float = 3600

    @classmethod
    def add_cli_args(cls, p: argparse.ArgumentParser) -> None:
        p.add_argument("--scenario", required=True, help="scenario name (scenarios/NAME.yaml) or path")
        p.add_argument("--good", required=True, help="leg measured as the reference (e.g. the older release)")
        p.add_argument("--bad", required=True, help="leg whose metric changed")
        p.add_argument("--workload", help="workload of the scenario (default: its first)")
        p.add_argument("--model", help="model of the scenario (default: its first)")
        p.add_argument("--arm", help="arm of the scenario (default: its first)")
        p.add_argument("--repeats", type=int, default=3, help="repeats per release (default 3)")
        p.add_argument("--threshold", type=float, default=0.03,
                       help="smallest |ratio-1| that counts as a change (default 0.03)")
        p.add_argument("--timeout", dest="timeout_s", type=float, help="per-run timeout in seconds")
        p.add_argument("--results", type=Path, default=RESULTS_DIR, help="where the record and runs go")
        flags.release_index(p)
        p.add_argument("--versions", nargs="+", metavar="V",
                       help="the releases between good and bad to search, instead of listing them from the "
                            "index (e.g. on an offline machine); each strictly between the two legs' releases")
        flags.offline(p)
        p.add_argument("--resume", action="store_true", help="reuse finished runs with identical fingerprints")
        p.add_argument("--supersede", action="store_true",
                       help="re-measure runs whose folder holds a finished record; the earlier records move to "
                            "superseded/ first (as harness sweep --supersede)")
        flags.allow_dirty(p)
        p.add_argument("--dry-run", action="store_true", help="list the releases and legs, measure nothing")
        flags.lock_wait(p)

    @classmethod
    def from_cli_args(cls, a: argparse.Namespace) -> "BisectArgs":
        if a.repeats < 2:
            raise UserError("--repeats should be at least 2 (a confidence interval needs two samples per side)")
        if not 0 <= a.threshold < 1:
            raise UserError("--threshold should be in [0, 1)")
        if a.timeout_s is not None and a.timeout_s <= 0:
            raise UserError("--timeout should be positive")
        if a.versions is not None and (a.index or a.include_pre):
            raise UserError("--versions names the releases itself: --index-url and --pre would not be used")
        got = {k: getattr(a, k) for k in cls.__dataclass_fields__}
        return cls(**got | {"versions": None if a.versions is None else tuple(a.versions)})


def _pick(names: list[str], wanted: str | None, what: str, where: Path) -> str:
    if wanted is None:
        return names[0]
    if wanted not in names:
        raise UserError(f"{where}: no {what} named {wanted!r} (has: {', '.join(names)})")
    return wanted


def slug(sc: Scenario, good: str, bad: str, model: str, workload: str, arm: str) -> str:
    """The record's file name (and its runs' folder): scenario, legs, model, workload, arm if not the first."""
    parts = [sc.name, good, bad, re.sub(r"[^A-Za-z0-9._-]+", "_", model), workload]
    return "--".join(parts + ([] if arm == sc.arms[0].name else [arm]))


def bisect(args: BisectArgs, *, measure: Measure | None = None) -> tuple[BisectRecord, Path | None]:
    """Validate, list the releases between the legs, search, write the record (not on a dry run)."""
    from harness.schema.outdir import check_root

    # Records go beside others there, never over a file that is not this search's own record
    # (paths.unclobbered); the folder itself must not be a symlink, a study or a protected folder.
    check_root(args.results)
    if args.good == args.bad:
        raise UserError(f"bisect: --good and --bad name the same leg ({args.good!r}); there is nothing between a "
                        f"leg and itself to search")
    sc_file = scenario_path(args.scenario)
    sc = load_scenario(sc_file)
    good, bad = legmod.load_leg(args.good), legmod.load_leg(args.bad)
    if args.good not in sc.legs:
        raise UserError(f"{sc_file}: leg {args.good!r} is not one of the scenario's legs ({', '.join(sc.legs)})")
    return bisect_specs(args, good, bad, measure=measure)


def bisect_specs(args: BisectArgs, good: LegSpec, bad: LegSpec, *,
                 measure: Measure | None = None) -> tuple[BisectRecord, Path | None]:
    """`bisect` between two legs given as specs, which need no leg file: a release history's derived
    legs (`harness.experiments.history`), whose good leg is a release of the scenario's history rather
    than one of its `legs`. `args.good`/`args.bad` are not read; the specs' names go into the record."""
    from harness.schema.outdir import check_root

    check_root(args.results)
    sc_file = scenario_path(args.scenario)
    sc = load_scenario(sc_file)
    if good.name == bad.name:
        raise UserError(f"bisect: the good and bad leg are the same ({good.name!r}); nothing between to search")
    if good.vllm_dist != bad.vllm_dist:
        raise UserError(f"{legmod.leg_path(bad.name)}: vllm_dist {bad.vllm_dist} differs from the good leg's "
                        f"{good.vllm_dist}; there are no releases between two distributions")
    if Version(good.vllm_version) == Version(bad.vllm_version):
        raise UserError(f"{legmod.leg_path(bad.name)}: same vLLM release as the good leg ({good.vllm_version})")
    model = _pick([m.name for m in sc.models], args.model, "model", sc_file)
    wl_name = _pick([w.name for w in sc.workloads_for(sc.model(model))], args.workload, "workload", sc_file)
    arm = _pick([a.name for a in sc.arms], args.arm, "arm", sc_file)
    wl = next(w for w in sc.workloads if w.name == wl_name)
    # The kind's own metric and direction (a serve workload's is not ms_per_token, nor lower-is-better).
    kind_metric = workloads.metric_of(wl.kind)
    metric, higher = kind_metric.key, kind_metric.higher_is_better
    rule = Rule(threshold=args.threshold)
    if args.versions is not None:
        between, index = given_between(good, bad, args.versions), None
    else:
        index = (args.index or index_url()).rstrip("/")
        between = releases_between(good, bad, index_versions(good.vllm_dist, index=index,
                                                              include_pre=args.include_pre))
    found = release_legs(good, bad, between)
    order = [good.vllm_version, *between, bad.vllm_version]
    inputs = Inputs(scenario=sc.name, good=good.name, bad=bad.name, good_version=good.vllm_version,
                    bad_version=bad.vllm_version, vllm_dist=good.vllm_dist, model=model, workload=wl_name, arm=arm,
                    metric=metric, higher_is_better=higher, repeats=args.repeats, rule=rule, rule_text=rule_text(rule),
                    index=index, releases_from="given" if args.versions is not None else "index")
    console.print(f"bisect {good.name} -> {bad.name}: {len(between)} release(s) between "
                  f"{'on ' + index if index else 'given'}: {', '.join(between) or '(none)'}")
    name = slug(sc, good.name, bad.name, model, wl_name, arm)
    if args.dry_run:
        for v in order:
            leg = found.legs.get(v)
            try:
                if leg is None:
                    raise UserError(found.missing[v][1])
                env = legmod.resolve(leg, offline=args.offline)
                console.print(f"  {v:>10}  leg {leg.name:<18} env {env.name}  {stack_of(env)}")
            except UserError as e:
                console.print(f"  {v:>10}  leg {found.names([v])[v]:<18} would be skipped: {e}")
        return _record(inputs, between, found.names(order), [],
                       Conclusion(kind="no_change", text="dry run: nothing measured"), record.now()), None
    started = record.now()
    measure = measure or SweepMeasure(
        scenario=args.scenario, legs=found.legs, good=good.name, model=model, workload=wl_name, arm=arm,
        metric=metric, repeats=args.repeats, results=args.results, study=name, timeout_s=args.timeout_s,
        offline=args.offline, resume=args.resume, allow_dirty=args.allow_dirty, lock_wait_s=args.lock_wait_s,
        supersede=args.supersede, good_spec=None if good.name in sc.legs else good)
    # Chosen before measuring: the record is rewritten there after every step. A record of the same
    # inputs (an earlier or a stopped run of this bisect) is replaced; one of other inputs is kept.
    path = paths.unclobbered(paths.inside(args.results, f"{name}.json"), inputs.model_dump(mode="json"),
                             _inputs_of)
    runs = paths.inside(args.results, name)

    def write(steps: list[Step], conclusion: Conclusion) -> BisectRecord:
        if found.notes:
            conclusion = conclusion.model_copy(update={"notes": [*conclusion.notes, *found.notes]})
        rec = _record(inputs, between, found.names(order), steps, conclusion, started)
        if runs.exists():
            rec = rec.model_copy(update={"runs_dir": name})
        write_record(rec, path)
        return rec

    written: list[BisectRecord] = []
    try:
        steps, conclusion = search(order, _skipping(measure, found), rule=rule, higher_is_better=higher,
                                   progress=lambda steps, so_far: written.append(write(steps, so_far)))
    except BaseException:
        # The lease ended, the run was killed or a measurement raised: what was learned stays on disk.
        if written:
            console.print(f"[yellow]bisect stopped, search incomplete: {path} holds the {len(written[-1].steps)} "
                          "step(s) measured so far; the same bisect with --resume reuses their runs")
        raise
    return write(steps, conclusion), path


def _skipping(measure: Measure, found: ReleaseLegs) -> Measure:
    """`measure` for the releases that have a leg; one without is skipped with the reason it has none,
    and never reaches `measure`."""
    def measure_with_legs(versions: Sequence[str]) -> list[Measurement]:
        todo = [v for v in versions if v in found.legs]
        got = dict(zip(todo, measure(todo))) if todo else {}
        return [got[v] if v in got else Measurement(leg=found.missing[v][0], skip_reason=found.missing[v][1])
                for v in versions]
    return measure_with_legs


def _inputs_of(path: Path) -> dict | None:
    """The inputs of the bisect record at `path`: a bisect of other inputs is kept beside it."""
    try:
        return read_record(path).inputs.model_dump(mode="json")
    except Exception:  # noqa: BLE001 - unreadable: never overwrite it either
        return None


def _record(inputs: Inputs, between: list[str], legs: dict[str, str], steps: list[Step], conclusion: Conclusion,
            started: str) -> BisectRecord:
    now = record.now()
    return BisectRecord(created_at=started, finished_at=None if conclusion.kind == "incomplete" else now,
                        updated_at=now, node=os.uname().nodename, inputs=inputs, releases=between, legs=legs,
                        steps=steps, conclusion=conclusion)


# --- the experiment (harness.experiments) ---------------------------------------------------------

NAME = "bisect"
GROUP = "search"
HELP = "find the first release between two legs whose metric differs"
EXAMPLE = "harness search bisect --scenario cpu-tiny --good cpu-0.27.1 --bad cpu-0.32.0 --repeats 3"
SIDE_SECTION = True   # the report shows each bisect of the study's legs and models beside its tables
Args = BisectArgs


def run(args: BisectArgs) -> Ran:
    """The search (`bisect`); a dry run writes nothing."""
    rec, path = bisect(args)
    return Ran(record=rec, files=() if path is None else (path,))


@dataclass(frozen=True, kw_only=True)
class Summary:
    record: BisectRecord
    unit: str                             # of the step medians
    between_legs: dict[str, str]          # release between the two legs -> its leg
    stacks: dict[str, dict[str, str]]     # release -> its resolved stack, for the measured ones


def summary(rec: BisectRecord) -> Summary:
    i = rec.inputs
    # The unit of the kind whose metric the record names (a record of an unknown metric: its name).
    kind_metric = workloads.metric_reading(i.metric)
    return Summary(record=rec, unit=kind_metric.unit if kind_metric else i.metric,
                   between_legs={v: leg for v, leg in rec.legs.items() if v not in (i.good_version, i.bad_version)},
                   stacks={s.version: s.stack for s in rec.steps if s.stack})


def study_records(study_dir: Path, legs: set[str], models: set[str]) -> list[BisectRecord]:
    """The bisect records of the study's legs and models (a bisect of another model says nothing
    about these), from the results root's bisect/ folder."""
    folder = study_dir.parent / "bisect"
    return [r for r in (read_records(folder) if folder.is_dir() else [])
            if {r.inputs.good, r.inputs.bad} <= legs and r.inputs.model in models]


def belongs(rec: BisectRecord, study: str) -> bool:
    """A bisect belongs to the study whose scenario it measured (its records name the same study)."""
    return rec.inputs.scenario == study


def quote(records: Sequence[BisectRecord], a: dict[str, str]) -> str:
    """`{{ bisect: version=V, stat=median|ratio|n|spread [, model=M, workload=W] }}`: one step's number,
    narrowed by model= and workload= where given; two records with the step and neither given is a
    question, not a pick."""
    recs = [r for r in records if a.get("model", r.inputs.model) == r.inputs.model
            and a.get("workload", r.inputs.workload) == r.inputs.workload]
    having = [r for r in recs if any(s.version == a.get("version") for s in r.steps)]
    if len(having) > 1:
        raise UserError(f"bisect: {len(having)} bisect records have a step {a.get('version')!r} ("
                        + ", ".join(f"{r.inputs.model} / {r.inputs.workload}" for r in having)
                        + "); name one with model= and workload=")
    for rec in having:
        for step in rec.steps:
            if step.version == a.get("version"):
                if step.median is None:
                    # A skipped release has no number to quote; say so rather than print a blank.
                    raise UserError(f"bisect: step {step.version} of {rec.inputs.good} → {rec.inputs.bad} was not "
                                    f"measured ({step.reason or 'skipped'}); nothing to quote")
                if a.get("stat", "median") == "median":
                    return f"{step.median:,.2f}" if abs(step.median) >= 10 else f"{step.median:.4g}"
                if a.get("stat") == "ratio":
                    if step.ratio is None:
                        raise UserError(f"bisect: step {step.version} is the reference; it has no ratio to quote")
                    ci = (f" [{step.ci_low:.3f}, {step.ci_high:.3f}]"
                          if step.ci_low is not None and step.ci_high is not None else "")
                    return f"{step.ratio:.3f}x{ci}"
                if a.get("stat") == "n":
                    return str(len(step.samples))
                if a.get("stat") == "spread":
                    sp = stats.spread(list(step.samples))
                    return "—" if sp is None else f"{sp:.1%}"
    raise UserError(f"bisect: no step of version {a.get('version')!r} in a bisect record of this study's legs")


def summary_md(summary: Summary) -> str:
    """The record as a report section: inputs, the rule, one row per measured step, the conclusion;
    for an incomplete record what was measured so far and what was not, said as no conclusion."""
    rec = summary.record
    i = rec.inputs
    unit = summary.unit
    source = "given (`--versions`; no index was consulted)" if i.releases_from == "given" else "on the index"
    legs = ", ".join(f"{v} `{leg}`" for v, leg in summary.between_legs.items())
    lines = [
        f"### Bisect: {i.scenario} / {i.model} / {i.workload}, {i.good} → {i.bad}"
        + ("" if rec.complete else " (search incomplete)"),
        "",
        f"Metric `{i.metric}` ({'higher' if i.higher_is_better else 'lower'} is better), {i.repeats} repeats per "
        f"release, arm `{i.arm}`. Releases of `{i.vllm_dist}` between {i.good_version} and {i.bad_version}, "
        f"{source}: {', '.join(rec.releases) or 'none'}." + (f" Their legs: {legs}." if legs else "") +
        " A release is measured on its own reviewed leg file where one exists, otherwise on the good leg's stack "
        "with only the vLLM release changed (a prebuilt leg's release cannot be, and is skipped). Every release is "
        "compared with the good leg's samples, measured at the start beside the bad leg's.",
        "",
        f"Rule: {i.rule_text}.",
        "",
        f"| # | release | leg | role | ok runs | median {unit} | speed vs good [CI] (>1 faster) | verdict | differs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in rec.steps:
        ratio = "—" if s.ratio is None else f"{s.ratio:.3f}x" + (
            f" [{s.ci_low:.3f}, {s.ci_high:.3f}]" if s.ci_low is not None and s.ci_high is not None else "")
        # Four significant digits below 10: a latency of 0.17 ms/tok needs them to show a 1% step.
        med = "—" if s.median is None else f"{s.median:,.2f}" if abs(s.median) >= 10 else f"{s.median:.4g}"
        verdict = s.verdict + (f": {s.reason}" if s.skipped else "")
        differs = "—" if s.differs is None else ("yes" if s.differs else "no")
        runs = f"{len(s.samples)}/{len(s.samples) + len(s.failures)}"
        lines.append(f"| {s.index} | {s.version} | {s.leg} | {s.role} | {runs} | {med} | {ratio} | "
                     f"{verdict.replace('|', '/')[:160]} | {differs} |")
    if rec.complete:
        lines += ["", f"**Conclusion:** {rec.conclusion.text}."]
    else:
        lines += ["", f"**Search incomplete, no conclusion:** {rec.conclusion.text.removeprefix(INCOMPLETE)}."]
    for n in rec.conclusion.notes:
        lines += ["", f"Note: {n}."]
    stacks = summary.stacks
    if stacks:
        lines += ["", "Resolved stacks: " + "; ".join(
            f"{v}: " + ", ".join(f"{k} {x}" for k, x in st.items()) for v, st in stacks.items()) + "."]
    node = rec.node or "unknown node"
    when = (f"Measured {rec.created_at} – {rec.finished_at} on {node}" if rec.complete else
            f"Measuring began {rec.created_at} on {node}, last recorded {rec.updated_at}; the search did not end "
            "(the same bisect with `--resume` reuses these runs and finishes it)")
    lines += ["", when + (f"; run records under `{rec.runs_dir}/`" if rec.runs_dir else "") + "."]
    return "\n".join(lines) + "\n"
