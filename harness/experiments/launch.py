"""Measuring a diagnostic: its sweep through `harness.measure.sweep`, waiting for the node lock
(`harness.measure.lock`) instead of measuring beside another sweep."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from harness.analyze.studies.common import names, study_path
from harness.measure import guard
from harness.measure.lock import while_busy


# A Jupyter kernel forces colour on for everything it starts (FORCE_COLOR, CLICOLOR_FORCE); vLLM then
# writes ANSI codes into run.log, where the harness's log reading (process prefixes, tracebacks) does
# not find them. A run started from a notebook must log as one started from a shell.
_COLOUR_ENV = ("FORCE_COLOR", "CLICOLOR_FORCE", "CLICOLOR")


@contextlib.contextmanager
def _plain_logs() -> Iterator[None]:
    saved = {k: os.environ.pop(k) for k in _COLOUR_ENV if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def measure(*, scenario: str, results_dir: str | Path, legs: str | Sequence[str] = (),
            models: str | Sequence[str] = (), workloads: str | Sequence[str] = (), arms: str | Sequence[str] = (),
            repeats: int | None = None, resume: bool = False, timeout_s: float | None = None,
            lock_wait_s: float = 3600, poll_s: float = 30) -> Any:
    """Run a diagnostic's sweep into `results_dir` (its parent is the results root, its name the
    study) through `harness.measure.sweep`: repetition is the outer loop, envs are built first, and the
    node lock is taken. While another sweep holds the lock, wait (up to `lock_wait_s`) instead of
    failing; the wait only tries the lock, so nothing is resolved or started beside that sweep."""
    from harness.measure.sweep import SweepArgs, sweep

    study_dir = study_path(results_dir)
    args = SweepArgs(scenario=scenario, results=study_dir.parent, study=study_dir.name, legs=names(legs),
                     models=names(models), workloads=names(workloads), arms=names(arms), repeats=repeats,
                     resume=resume, timeout_s=timeout_s)

    def probe_then_sweep() -> Any:
        # Probe the lock first: the sweep resolves and builds envs before it takes the lock, and that
        # must not load the node beside another sweep. The lock can still be taken between the probe
        # and the sweep's own acquisition; then the sweep raises NodeBusyError and the wait goes on.
        with guard.node_lock():
            pass
        with _plain_logs():
            return sweep(args)

    return while_busy(probe_then_sweep, wait_s=lock_wait_s, poll_s=poll_s)


def measured_summary(res: Any) -> str:
    """One line about a finished `measure`."""
    failed = sum(r.status != "ok" for r in res.records)
    return (f"{len(res.records)} runs ({res.measured} measured, {res.reused} reused, {failed} not ok) under "
            f"{res.study_dir}; sweep index {res.index_path.name}")
