"""One run: a (leg, model, workload, arm, repeat) measured in its own process group.

The worker runs with the leg's Python in a new session; on exit, timeout or interruption the whole
process group (vLLM's EngineCore and workers included) is killed, so nothing outlives a run and
nothing keeps measuring beside the next one.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import __version__

from harness.core import paths
from harness.core.source import harness_source
from harness.core.logs import failure_reason, last_line, strip_prefix, tracebacks  # noqa: F401
from harness.measure.leg import LegEnv
from harness.schema.record import Engine, Failure, Phases, Profile, RunRecord, Timing, now, write
# read_events is also this module's to the measuring code that imports it from here (group, serve).
from harness.schema.run_files import read_events, read_object
from harness.schema.wire import WorkerSpec, read_result
from harness.measure.scenario import Arm, Model, Workload

WORKER = Path(__file__).resolve().parent / "worker" / "bench.py"
RUN_ENV_TAG = "HARNESS_RUN_ID"  # set in every run's environment, with the node lock it ran under
LOCK_ENV_TAG = "HARNESS_RUN_LOCK"


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    study: str
    series: str
    leg_env: LegEnv
    model: Model
    model_path: str
    workload: Workload
    arm: Arm
    repeat: int
    timeout_s: float
    load_format: str | None = None
    devices: str | None = None          # CUDA_VISIBLE_DEVICES for this run
    extra_env: dict[str, str] = field(default_factory=dict)
    # The script the leg's Python runs; the default measures with vLLM's offline API. Another
    # script must write the same files (run.jsonl phases, manifest.json, worker.json).
    worker: Path = WORKER
    engine: str = "per-run"             # or "per-group": one engine measures a group's workloads

    @property
    def engine_args(self) -> dict[str, Any]:
        args = {**self.model.engine_args, **self.arm.engine_args}
        if self.load_format:
            args.setdefault("load_format", self.load_format)
        return args

    @property
    def run_id(self) -> str:
        return "/".join([self.series, self.leg_env.leg.name, _safe(self.model.name), self.workload.name,
                         self.arm.name, f"r{self.repeat}"])

    @property
    def fingerprint(self) -> str:
        """Everything that decides what is measured; --resume reuses a record only on a match."""
        blob = {
            "harness": __version__, "leg": self.leg_env.leg.name, "compat_id": self.leg_env.compat_id,
            "pins": list(self.leg_env.pins), "model": self.model.model_dump(), "model_path": self.model_path,
            "workload": self.workload.work,
            # An arm without a profile hashes as arms did before profiles existed.
            "arm": self.arm.model_dump(exclude={"description"} | ({"profile"} if self.arm.profile is None else set())),
            "engine_args": self.engine_args, "repeat": self.repeat,
        }
        if self.engine != "per-run":  # per-run is what every record before engine reuse measured
            blob["engine"] = self.engine
        return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def check_run_dir(spec: RunSpec, run_dir: Path) -> None:
    """Refuse a run whose id or directory could climb out of the folder it is measured in: the
    run deletes files in its directory before measuring. Names are validated on load; this holds
    for specs built any other way too."""
    from harness.core.errors import UserError

    bad = [p for p in spec.run_id.split("/") if p in ("", ".", "..") or p.startswith(".")]
    if bad or ".." in run_dir.parts:
        raise UserError(f"{run_dir}: run id {spec.run_id!r} or its directory holds a '..', '.' or empty "
                        "component; refused before anything was deleted")


def emit(run_dir: Path, phase: str, **fields: Any) -> None:
    with (run_dir / "run.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps({"t": time.time(), "phase": phase, "pid": os.getpid(), **fields}) + "\n")


# --- the process ----------------------------------------------------------------------------------

def _die_with_parent() -> None:
    # If the sweep itself is killed (even with -9), the run goes too instead of measuring on: the
    # worker turns this SIGTERM into a SIGKILL of its whole group (worker/bench.py, die_with_group).
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def kill_group(pgid: int, grace_s: float = 10.0, leader: subprocess.Popen | None = None) -> None:
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if leader is not None:
                leader.poll()  # a dead but unreaped leader keeps its group "alive"
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


@contextlib.contextmanager
def process_group(cmd: list[str], *, env: dict[str, str], log: Path, cwd: Path) -> Iterator[subprocess.Popen]:
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True, preexec_fn=_die_with_parent)
    try:
        yield proc
    finally:
        kill_group(proc.pid, grace_s=2.0 if proc.poll() is not None else 10.0, leader=proc)
        with contextlib.suppress(Exception):
            proc.wait(timeout=5)


def orphans(lock: Path | None = None) -> list[int]:
    """PIDs of runs left behind by a sweep that died under `lock` (default: this node's lock).

    Only runs tagged with the lock we now hold can be orphans: a run of a live sweep holds its own
    lock, so it is never taken for one.
    """
    tag = f"{LOCK_ENV_TAG}={lock or paths.lock_path()}\0".encode()
    found = []
    me = os.getpid()
    for d in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError):
            if int(d.name) != me and tag in (d / "environ").read_bytes():
                found.append(int(d.name))
    return found


def kill_orphans(lock: Path | None = None) -> list[int]:
    pids = orphans(lock)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return pids


def _profile(run_dir: Path) -> Profile:
    """What the worker's profile.json says of a profiled run (one that died before it: only that it was profiled)."""
    data = read_object(run_dir / "profile.json")
    s = data.get("summary") or {}
    return Profile(**{k: v for k, v in data.items() if k in Profile.model_fields and k != "summary"},
                   **{k: s.get(k) for k in ("device", "profiled_s", "steps")})


def _phases(run_dir: Path) -> Phases | None:
    split = read_object(run_dir / "requests.json").get("split")
    return Phases(**split) if isinstance(split, dict) else None


RUN_FILES = ("results.json", "worker.json", "manifest.json", "run.jsonl", "run.log", "spec.json",
             "profile.json", "profile.md", "requests.json")


def prepare_run_dir(spec: RunSpec, run_dir: Path) -> None:
    """An empty run directory for a new measurement (the files of an earlier one removed)."""
    check_run_dir(spec, run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in RUN_FILES:
        paths.inside(run_dir, stale).unlink(missing_ok=True)


def run_environ(spec: RunSpec) -> dict[str, str]:
    env = spec.leg_env.environ()
    env |= {k: v for k, v in spec.arm.env.items()} | spec.extra_env
    # Colour codes in run.log would hide vLLM's process prefixes and tracebacks from the parser.
    env.pop("FORCE_COLOR", None)
    env["NO_COLOR"] = "1"
    env[RUN_ENV_TAG] = spec.run_id
    env[LOCK_ENV_TAG] = str(paths.lock_path())
    env["PYTHONUNBUFFERED"] = "1"
    if spec.devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = spec.devices
    if spec.arm.profile is not None:
        env["HARNESS_PROFILE"] = spec.arm.profile.model_dump_json()  # harness.measure.worker.kernel_trace
    else:
        env.pop("HARNESS_PROFILE", None)
    return env


def worker_spec(spec: RunSpec, run_dir: Path, runs: list[tuple[RunSpec, Path]] = ()) -> WorkerSpec:
    return WorkerSpec(run_dir=str(run_dir), model_path=spec.model_path, tokenizer=spec.model.tokenizer,
                      dtype=spec.model.dtype, tp=spec.model.tp, engine_args=spec.engine_args,
                      workload=spec.workload.work,
                      runs=[{"run_dir": str(d), "workload": s.workload.work,
                             # Another script's work done on this engine (vLLM's benchmark, lent it).
                             **({"worker": s.worker.name} if s.worker != WORKER else {})} for s, d in runs])


def execute(spec: RunSpec, run_dir: Path, *, invocation_id: str, dirty: list[str],
            allow_dirty: bool, runner: str = "local", attempt: int = 1) -> RunRecord:
    """Measure one run into `run_dir` and write its results.json; never raises for a failed run."""
    prepare_run_dir(spec, run_dir)
    worker_spec(spec, run_dir).write(run_dir / "spec.json")
    env = run_environ(spec)
    started = now()
    emit(run_dir, "spawn", leg=spec.leg_env.leg.name, compat_id=spec.leg_env.compat_id, run_id=spec.run_id)
    t0 = time.monotonic()
    status, exit_code, sig = "ok", None, None
    with process_group([str(spec.leg_env.python), str(spec.worker), str(run_dir / "spec.json")],
                       env=env, log=run_dir / "run.log", cwd=run_dir) as proc:
        try:
            rc = proc.wait(timeout=spec.timeout_s)
            exit_code = rc if rc >= 0 else None
            sig = -rc if rc < 0 else None
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            status = "timeout"
            emit(run_dir, "timeout", after_s=spec.timeout_s)
    wall = time.monotonic() - t0
    emit(run_dir, "exit", status=status, exit_code=exit_code, signal=sig, wall_s=wall)
    return finish(spec, run_dir, status=status, exit_code=exit_code, sig=sig, wall=wall, started=started,
                  invocation_id=invocation_id, dirty=dirty, allow_dirty=allow_dirty, runner=runner, attempt=attempt)


def finish(spec: RunSpec, run_dir: Path, *, status: str, exit_code: int | None, sig: int | None, wall: float,
           started: str, invocation_id: str, dirty: list[str], allow_dirty: bool, runner: str = "local",
           attempt: int = 1, engine: Engine | None = None) -> RunRecord:
    """The record of a run whose worker has ended: from worker.json, manifest.json, run.jsonl and run.log."""
    wl = spec.workload
    worker, manifest = read_result(run_dir / "worker.json"), read_object(run_dir / "manifest.json")
    if status == "ok" and worker is None:
        status = "failed"  # exited 0 without a result: never count that as a measurement
    failure = None
    if status != "ok":
        log = (run_dir / "run.log").read_text(encoding="utf-8", errors="replace")
        tbs = tracebacks(log)
        events = read_events(run_dir)
        # The phase the run had reached when it failed: the worker's own "error" event is not one.
        phases = [e["phase"] for e in events if e.get("pid") != os.getpid() and e["phase"] != "error"]
        # A signal explains the end better than whatever the dying processes printed on the way.
        reason = (f"timed out after {spec.timeout_s:.0f} s" if status == "timeout"
                  else f"killed by signal {sig} ({signal.Signals(sig).name})" if sig
                  else failure_reason(tbs) or f"exit code {exit_code}")
        failure = Failure(exit_code=exit_code, signal=sig, reason=reason, traceback=tbs[-1] if tbs else "",
                          exceptions=[last_line(t) for t in tbs], phase=phases[-1] if phases else None)
    leg = spec.leg_env.leg
    rec = RunRecord(
        study=spec.study, series=spec.series, run_id=spec.run_id, fingerprint=spec.fingerprint,
        harness_version=__version__, invocation_id=invocation_id, runner=runner, node=socket.gethostname(),
        attempt=attempt, leg=leg.name, leg_label=leg.label, compat_id=spec.leg_env.compat_id,
        pins=list(spec.leg_env.pins), model=spec.model.name, tp=spec.model.tp, workload=wl.name,
        workload_spec=wl.work, arm=spec.arm.name, arm_spec=spec.arm.model_dump(),
        engine_args=spec.engine_args, repeat=spec.repeat, status=status,
        metrics=worker.metrics if worker is not None and status == "ok" else {},
        work=worker.work if worker is not None else {},
        timing=Timing(wall_s=wall, **(worker.timing if worker is not None else {})),
        manifest=manifest | {"runner": runner, "lock": spec.leg_env.lock.splitlines()} | harness_source(run_dir),
        failure=failure, engine=engine, allow_dirty=allow_dirty, dirty=dirty, started_at=started, finished_at=now(),
        profile=_profile(run_dir) if spec.arm.profile is not None else None, phases=_phases(run_dir),
    )
    write(rec, run_dir)
    return rec
