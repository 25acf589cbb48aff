"""Engine reuse: one engine per (repeat, leg, model, arm) measures that group's workloads in order.

Each workload keeps its own run directory (spec.json is the group's, results.json, worker.json,
run.jsonl and run.log are its own: run.log is its slice of the engine's log, the first workload's
slice including the engine's start). The engine's own files live in an `engine-<arm>-r<k>-<n>/` folder
beside the workloads (`n` counts fresh engines). A workload that crashes or runs past its timeout is
recorded as any run is; the workloads after it go on in a fresh engine, so a crash costs one workload.

The timeout is per workload, as with an engine per run: the first workload's clock starts with the
process (engine start included), each later one's when the worker says it began.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.core import paths
from harness.measure.run import (RunSpec, emit, finish, prepare_run_dir, process_group, read_events, run_environ,
                                 worker_spec)
from harness.schema.record import Engine, RunRecord, now

POLL_S = 0.5


def group_key(spec: RunSpec) -> tuple:
    return (spec.repeat, str(spec.leg_env.root), spec.model.name, spec.arm.name, spec.study, spec.series)


def group_id(spec: RunSpec) -> str:
    return "/".join([spec.series, spec.leg_env.leg.name, spec.run_id.split("/")[2], spec.arm.name, f"r{spec.repeat}"])


def engine_dir(spec: RunSpec, run_dir: Path, instance: int) -> Path:
    # Beside the workloads' folders: <...>/<model>/engine-<arm>-r<k>-<n>
    model_dir = run_dir.parents[2]
    return paths.inside(model_dir, f"engine-{spec.arm.name}-r{spec.repeat}-{instance}")


def _slice(log: bytes, start: int | None, end: int | None) -> bytes:
    return log[start or 0:end if end is not None else len(log)]


def execute_group(runs: list[tuple[RunSpec, Path]], *, invocation_id: str, dirty: list[str], allow_dirty: bool,
                  runner: str = "local", on_record: Callable[[RunRecord], None] | None = None) -> list[RunRecord]:
    """Measure `runs` (one group, in order) with as few engines as crashes allow; returns their records."""
    records: list[RunRecord] = []
    for rec in _instances(list(runs), invocation_id=invocation_id, dirty=dirty, allow_dirty=allow_dirty, runner=runner):
        records.append(rec)
        if on_record is not None:
            on_record(rec)
    return records


def _instances(pending: list[tuple[RunSpec, Path]], **kw) -> Iterator[RunRecord]:
    instance = 0
    while pending:
        instance += 1
        done = yield from _one_engine(pending, instance, **kw)
        pending = pending[done:]


def _one_engine(pending: list[tuple[RunSpec, Path]], instance: int, *, invocation_id: str, dirty: list[str],
                allow_dirty: bool, runner: str) -> Iterator[RunRecord]:
    """One engine over `pending`; yields a record for each workload it finished or lost, and returns
    how many of `pending` that was (the rest go to a fresh engine)."""
    lead, lead_dir = pending[0]
    edir = engine_dir(lead, lead_dir, instance)
    edir.mkdir(parents=True, exist_ok=True)
    for stale in ("run.jsonl", "run.log", "spec.json"):
        paths.inside(edir, stale).unlink(missing_ok=True)
    for spec, d in pending:
        prepare_run_dir(spec, d)
    worker_spec(lead, edir, pending).write(edir / "spec.json")
    started = now()
    emit(edir, "spawn", leg=lead.leg_env.leg.name, compat_id=lead.leg_env.compat_id, group=group_id(lead),
         instance=instance, workloads=[s.workload.name for s, _ in pending])
    t_start = time.monotonic()
    status, exit_code, sig, lost_at = "ok", None, None, None
    with process_group([str(lead.leg_env.python), str(lead.worker), str(edir / "spec.json")],
                       env=run_environ(lead), log=edir / "run.log", cwd=edir) as proc:
        while True:
            rc = proc.poll()
            if rc is not None:
                exit_code = rc if rc >= 0 else None
                sig = -rc if rc < 0 else None
                status = "ok" if rc == 0 else "failed"
                break
            ev = read_events(edir)
            begun = [e for e in ev if e.get("phase") == "workload_start"]
            ended = {e.get("position") for e in ev if e.get("phase") == "workload_end"}
            current = len(ended)  # index into pending of the workload now running (or about to)
            if current < len(pending):
                clock = t_start if current == 0 else next(
                    (e["t"] - time.time() + time.monotonic() for e in begun if e.get("position") == current + 1), None)
                if clock is not None and time.monotonic() - clock > pending[current][0].timeout_s:
                    status, lost_at = "timeout", current
                    emit(edir, "timeout", after_s=pending[current][0].timeout_s, position=current + 1)
                    break
            time.sleep(POLL_S)
    wall_end = time.monotonic()
    emit(edir, "exit", status=status, exit_code=exit_code, signal=sig, wall_s=wall_end - t_start)
    ev = read_events(edir)
    log = (edir / "run.log").read_bytes() if (edir / "run.log").exists() else b""
    starts = {e["position"]: e for e in ev if e.get("phase") == "workload_start"}
    ends = {e["position"]: e for e in ev if e.get("phase") == "workload_end"}
    init = next((e.get("seconds") for e in ev if e.get("phase") == "engine_init_end"), None)
    mono = lambda e: e["t"] - time.time() + time.monotonic()  # noqa: E731 - wall clock -> this clock
    done = 0
    for pos, (spec, d) in enumerate(pending, 1):
        finished = pos in ends
        if not finished and pos != len(ends) + 1:
            break  # never reached: a fresh engine measures it
        # The first workload's slice starts at the top of the log: the engine's start is part of it.
        lo = starts[pos].get("log_offset") if pos in starts and pos > 1 else 0
        hi = ends[pos].get("log_offset") if finished else None
        (d / "run.log").write_bytes(_slice(log, lo, hi))
        t0 = t_start if pos == 1 else mono(starts[pos]) if pos in starts else t_start
        t1 = mono(ends[pos]) if finished else wall_end
        run_status = "ok" if finished else ("timeout" if lost_at is not None else "failed")
        engine = Engine(mode="per-group", group_id=group_id(spec), instance=instance, init_s=init, position=pos,
                        group_log=str(Path("..", "..", "..", edir.name, "run.log")),
                        log_range=[lo or 0, hi if hi is not None else len(log)])
        yield finish(spec, d, status=run_status, exit_code=None if finished else exit_code,
                     sig=None if finished else sig, wall=t1 - t0, started=started, invocation_id=invocation_id,
                     dirty=dirty, allow_dirty=allow_dirty, runner=runner, engine=engine)
        done = pos
        if not finished:
            break
    if done == 0:
        done = 1  # nothing started at all (the engine died): the first workload carries the failure
    return done
