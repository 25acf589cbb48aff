"""Measuring a bisect's releases: what one release's measurement gives (`Measurement`), and the
`Measure` that a bisect gets unless a test gives it another, `SweepMeasure`, which measures through
the sweep machinery (`harness.measure.sweep`): `plan` for the good leg's run specs, each release's runs
those specs on the release's leg env, `execute_plan` under the node lock.

Kept apart from `harness.experiments.bisect` (the search and its record), which imports it."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml
from packaging.version import Version
from rich.console import Console

from harness.core import paths
from harness.core.errors import LegEnvError, UserError
from harness.core.yamlio import read_yaml
from harness.measure import leg as legmod
from harness.measure.index import lock_versions
from harness.measure.leg import LegEnv, LegSpec
from harness.measure.lock import waiting_node_lock, while_busy
from harness.measure.sweep import PlannedRun, SweepArgs, execute_plan, plan, reusable
from harness.schema import checks
from harness.schema.record import RunRecord

console = Console(stderr=True)


def _say(text: str) -> None:
    console.print(f"[yellow]{text}")


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """What measuring one release gave: the metric of every ok repeat, or why there is none."""

    samples: tuple[float, ...] = ()
    run_ids: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()     # one line per repeat that did not finish ok
    skip_reason: str | None = None     # the release could not be measured at all
    leg: str = ""
    compat_id: str | None = None
    stack: dict[str, str] = field(default_factory=dict)


# Measures releases (by version) and returns one Measurement each, in the same order.
Measure = Callable[[Sequence[str]], list[Measurement]]


def stack_of(env: LegEnv) -> dict[str, str]:
    got = lock_versions(env.lock)
    return {k: got[k] for k in (env.leg.vllm_dist, "torch", "transformers") if k in got}


class SweepMeasure:
    """Measures releases through `harness.measure.sweep`: `plan` makes the good leg's run specs (model source,
    workload, arm, timeout), each release's runs are those specs on the release's leg env, and
    `execute_plan` measures them (node lock, guards, one run at a time, repeats outermost).

    Envs are resolved and built first, under the node lock like a sweep's, so that a release that
    cannot be installed (or carries a foreign vLLM plugin) is skipped instead of ending the bisect."""

    def __init__(self, *, scenario: str, legs: dict[str, LegSpec], good: str, model: str, workload: str,
                 arm: str, metric: str, repeats: int, results: Path, study: str, timeout_s: float | None,
                 offline: bool, resume: bool, allow_dirty: bool, lock_wait_s: float, supersede: bool = False,
                 good_spec: LegSpec | None = None):
        """`good_spec`: the good leg's spec where it is no leg of the scenario's `legs` (a history's derived
        release leg); the run specs are planned on it."""
        self.legs, self.metric, self.offline = legs, metric, offline
        self.resume, self.allow_dirty, self.lock_wait_s = resume, allow_dirty, lock_wait_s
        self.model, self.scenario = model, scenario
        # Serial whatever the scenario's design: the good leg's runs are templates that every release's
        # runs copy one by one (a paired plan's rounds are not).
        self.args = SweepArgs(scenario=scenario, results=results, study=study, legs=(good,), models=(model,),
                              workloads=(workload,), arms=(arm,), repeats=repeats, timeout_s=timeout_s,
                              offline=offline, resume=resume, allow_dirty=allow_dirty, supersede=supersede,
                              design="serial")
        self.sc, self.study_dir, self.templates = plan(self.args, specs=None if good_spec is None
                                                       else {good_spec.name: good_spec})
        self.arm_pins = tuple(self.templates[0].spec.arm.pins)

    def _envs(self, versions: Sequence[str], out: dict[str, Measurement]) -> dict[str, LegEnv]:
        envs: dict[str, LegEnv] = {}
        for v in versions:
            spec = self.legs[v]
            pins = tuple(spec.model_pins.get(self.model, [])) + self.arm_pins
            try:
                envs[v] = legmod.resolve(spec, pins, offline=self.offline)
            except UserError as e:
                # LegEnvError, or a prebuilt leg whose folder does not (yet) hold its release: either way
                # this release cannot be measured here, which is a skip, not the end of the bisect.
                out[v] = Measurement(leg=spec.name, skip_reason=str(e))
        with waiting_node_lock(self.lock_wait_s, say=_say):
            for v, env in list(envs.items()):
                try:
                    rep = legmod.ensure(env)
                    found = [f"{x['dist']} registers {x['group']}:{x['name']}" for x in legmod.foreign_plugins(env)]
                except LegEnvError as e:
                    out[v] = Measurement(leg=env.leg.name, compat_id=env.compat_id, skip_reason=str(e))
                    del envs[v]
                    continue
                console.print(f"leg env {env.name}: {'reused' if rep.reused else 'built'} in {rep.seconds:.1f} s")
                if found and not self.allow_dirty:
                    out[v] = Measurement(leg=env.leg.name, compat_id=env.compat_id,
                                         skip_reason=f"foreign vLLM plugins in {env.name}: {'; '.join(found)}")
                    del envs[v]
        return envs

    def __call__(self, versions: Sequence[str]) -> list[Measurement]:
        out: dict[str, Measurement] = {}
        envs = self._envs(versions, out)
        planned: list[PlannedRun] = []
        for t in self.templates:
            for v in versions:
                if v in envs:
                    spec = replace(t.spec, leg_env=envs[v])
                    p = PlannedRun(index=len(planned) + 1, spec=spec,
                                   run_dir=paths.inside(self.study_dir / "runs", *spec.run_id.split("/")))
                    if self.resume:
                        p.reuse = reusable(p, retry_failed=False)
                    planned.append(p)
        records: list[RunRecord] = []
        if planned:
            # Derived legs have no leg file: list them in study.yaml first, so the sweep's own
            # study metadata finds them there instead of looking for their files.
            self._write_study_meta([envs[v].leg for v in versions if v in envs])
            args = replace(self.args, legs=tuple(envs[v].leg.name for v in versions if v in envs))
            records = self._execute(args, planned)
        for v, env in envs.items():
            mine = [r for r in records if r.compat_id == env.compat_id and r.leg == env.leg.name]
            # The schema's one check of a record's numbers (harness.schema.checks): a NaN, infinite,
            # negative or zero metric is no sample, and is named among the failures.
            bad = {r.run_id: why for r in mine if r.status == "ok" and (why := checks.metric_problem(r))}
            ok = [r for r in mine if r.status == "ok" and getattr(r.metrics, self.metric) is not None
                  and r.run_id not in bad]
            out[v] = Measurement(
                samples=tuple(float(getattr(r.metrics, self.metric)) for r in ok),
                run_ids=tuple(r.run_id for r in mine), leg=env.leg.name, compat_id=env.compat_id,
                failures=tuple(f"r{r.repeat}: {r.status}: " + (f"impossible metric: {bad[r.run_id]}" if r.run_id in bad
                                                             else r.failure.reason if r.failure else 'no metric')
                               for r in mine if r not in ok),
                stack=stack_of(env))
        return [out[v] for v in versions]

    def _execute(self, args: SweepArgs, planned: list[PlannedRun]) -> list[RunRecord]:
        # Another sweep may take the node lock after the envs were built: wait, never measure beside it.
        return while_busy(lambda: execute_plan(args, self.sc, self.study_dir, planned).records,
                          wait_s=self.lock_wait_s, say=_say)

    def _write_study_meta(self, legs: list[LegSpec]) -> None:
        path = self.study_dir / "study.yaml"
        meta = (read_yaml(path) or {}) if path.exists() else {}  # bounded, as the sweep reads it
        meta.setdefault("name", self.study_dir.name)
        meta.setdefault("title", f"bisect runs of scenario {self.sc.name}")
        meta.setdefault("provenance", "measured")
        meta.setdefault("main_series", self.sc.series_tag)
        order = meta.setdefault("legs", [])
        for spec in legs:
            if spec.name not in [x["name"] for x in order]:
                order.append({"name": spec.name, "label": spec.label})
        order.sort(key=lambda x: Version(next((s.vllm_version for s in self.legs.values() if s.name == x["name"]),
                                              "0")))
        self.study_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".yaml.tmp")
        tmp.write_text(yaml.safe_dump(meta, sort_keys=False))
        os.replace(tmp, path)
