"""`--prime`: an engine started before the first measured run of each (leg, model, arm), so that the
measured runs start on warm compile caches.

A machine lease starts with empty caches: the first engine of a leg and model compiles its graphs
(and the kernels no warm-up reaches), and the run it times can measure apart from the rest
(`harness.analyze.coldstart` reads which runs did, from vLLM's log). A priming run is an ordinary run
of that first workload, one engine of its own, recorded like any other under the arm `<arm>-prime`,
which canonical selection and the crosscheck summary never take. It is never reused: a resumed sweep
may stand on a fresh machine, so each priming run is a new repeat of its arm.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from pathlib import Path

from harness.core import paths
from harness.measure.executors import PlannedRun
from harness.measure.run import RunSpec

SUFFIX = "-prime"


def is_prime(arm: str) -> bool:
    return arm.endswith(SUFFIX)


def prime_spec(study_dir: Path, spec: RunSpec) -> RunSpec:
    """`spec` as a priming run: arm `<arm>-prime`, one engine, at its arm's next free repeat."""
    arm = spec.arm.model_copy(update={"name": spec.arm.name + SUFFIX, "description": (
        "an engine started before the first measured run of its leg and model, to fill the machine's "
        "compile caches; never a canonical number")})
    first = dataclasses.replace(spec, arm=arm, repeat=1, engine="per-run")
    arm_dir = paths.inside(study_dir / "runs", *first.run_id.split("/")).parent
    taken = [int(d.name[1:]) for d in arm_dir.glob("r*") if d.name[1:].isdigit()] if arm_dir.is_dir() else []
    return dataclasses.replace(first, repeat=max(taken, default=0) + 1)


def with_primes(study_dir: Path, runs: list[PlannedRun], key: Callable[[RunSpec], Hashable],
                spec_of: Callable[[RunSpec], RunSpec] = lambda s: s) -> list[PlannedRun]:
    """The plan with a priming run before the first run to measure of each key (a key whose runs are
    all reused needs none); `spec_of` picks what the priming run measures."""
    out: list[PlannedRun] = []
    seen: set[Hashable] = set()
    for p in runs:
        k = key(p.spec)
        if p.reuse is None and k not in seen:
            seen.add(k)
            spec = prime_spec(study_dir, spec_of(p.spec))
            out.append(PlannedRun(index=0, spec=spec, run_dir=paths.inside(study_dir / "runs", *spec.run_id.split("/"))))
        out.append(p)
    for i, p in enumerate(out, 1):
        p.index = i
    return out
