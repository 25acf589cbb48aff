"""Sweeps across a Ray cluster: each run is one Ray task that has a whole node to itself.

Every node that may measure advertises one unit of the custom resource `harness_node`
(`ray start --resources='{"harness_node": 1}'`) and every run asks for that unit, plus `tp` GPUs
on a CUDA leg. Ray's own scheduler therefore keeps runs serial on each node while nodes work in
parallel; nothing here decides which node runs what.

Inside the task the run is measured exactly as a local run is: the leg env is built on that node
(`leg.ensure`), the node lock is taken, the GPU-busy guard is checked and `run.execute` runs the
bench in its own process group, in a scratch directory. The run's files travel back to the
driver, which lands them in the same layout as a local sweep, so nodes need no shared results
folder. The study's per-rank CPU-thread policy (OMP_NUM_THREADS = CPUs allotted // tp) is applied
and recorded.

A run fails on its exit status and its own record only. Nothing reads worker log lines to judge
them fatal: the study lost a whole leg when a runner took a harmless traceback in a log for a crash
and killed a healthy worker. A task that dies with its node or its Ray worker did not measure
anything: it is retried on another node and the record and the sweep index say so. A bench that
exits non-zero is a measured failure and is never retried.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from filelock import FileLock

from harness import __version__, workloads

from harness.core import paths
from harness.measure import guard, leg as legmod, serve
from harness.core.errors import UserError
from harness.schema.record import Failure, RunRecord, Timing, now, write
from harness.measure.run import RunSpec, execute, kill_orphans
from harness.measure.executors import PlannedRun, console

try:
    import ray
    from ray import exceptions as rex
except ImportError:  # pragma: no cover - depends on the installation
    raise UserError("the ray executor needs Ray: install the project with its 'ray' extra "
                    "(pip install 'vllm-harness[ray]')") from None

NODE_RESOURCE = "harness_node"    # one unit per node: holding it is having the node to oneself
NODE_ID_LABEL = "ray.io/node-id"  # every Ray node carries this label; retries select against it
MAX_ATTEMPTS = 3
POLL_S = 5.0                       # how often a waiting driver checks that some node can still run
RUN_FILES = ("spec.json", "run.jsonl", "run.log", "manifest.json", "worker.json")
RUNNER = "ray"

# The task did not come back because its node or its Ray worker went away, or its result was on a
# node that did (ObjectLostError): nothing was measured, so the run is retried elsewhere.
LOST_ERRORS: tuple[type[BaseException], ...] = (rex.NodeDiedError, rex.WorkerCrashedError,
                                                 rex.LocalRayletDiedError, rex.ObjectLostError)


def omp_threads(cpus: float | None, tp: int) -> int:
    """The study's per-rank policy: CPUs allotted to the run // tp, at least one."""
    return max(1, int(cpus or 1) // max(1, tp))


def is_lost(exc: BaseException) -> bool:
    """The task died with its node or worker (retry elsewhere), as opposed to a run that ended."""
    return isinstance(exc, LOST_ERRORS)


def _needs_gpus(spec: RunSpec) -> int:
    return spec.model.tp if spec.leg_env.leg.device == "cuda" else 0


# --- on the node ------------------------------------------------------------------------------

def _placement(attempt: int) -> dict[str, Any]:
    ctx = ray.get_runtime_context()
    node_id = ctx.get_node_id()
    info = next((n for n in ray.nodes() if n["NodeID"] == node_id), {})
    res = info.get("Resources", {})
    return {"node_id": node_id, "node_name": info.get("NodeName"), "node_ip": info.get("NodeManagerAddress"),
            "hostname": socket.gethostname(), "node_cpus": res.get("CPU"), "node_gpus": res.get("GPU", 0.0),
            "gpu_ids": [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])], "attempt": attempt}


def _omp(spec: RunSpec, cpus: float | None) -> tuple[RunSpec, dict[str, Any]]:
    """Apply the thread policy unless the arm or the leg sets OMP_NUM_THREADS on purpose."""
    for source, env in (("arm", spec.arm.env), ("leg", spec.leg_env.leg.env)):
        if "OMP_NUM_THREADS" in env:
            return spec, {"omp_num_threads": env["OMP_NUM_THREADS"], "omp_source": source}
    n = omp_threads(cpus, spec.model.tp)
    # The run owns the node, so it is allotted all of the node's CPUs as Ray counts them.
    policy = {"omp_num_threads": str(n), "omp_source": "policy: node CPUs // tp",
              "cpus_allotted": cpus, "tp": spec.model.tp}
    return dataclasses.replace(spec, extra_env={**spec.extra_env, "OMP_NUM_THREADS": str(n)}), policy


def run_on_node(spec: RunSpec, *, invocation_id: str, dirty: list[str], allow_dirty: bool,
                attempt: int) -> Iterator[dict[str, Any]]:
    """The Ray task (a streaming generator): yields where it runs, then the run's record and files.

    Yielding the placement first lets the driver know the node even when the node dies mid-run.
    """
    placement = _placement(attempt)
    yield {"placement": placement}
    where = placement["node_name"] or placement["node_ip"] or placement["hostname"]
    env = spec.leg_env
    env.root.parent.mkdir(parents=True, exist_ok=True)
    # Nodes that share a cache folder must not build the same env at once.
    with FileLock(str(env.root.parent / f"{env.root.name}.build.lock")):
        built = legmod.ensure(env)
    spec, omp = _omp(spec, placement["node_cpus"])
    placement |= omp | {"leg_env_reused": built.reused, "leg_env_seconds": built.seconds}
    with guard.node_lock():
        kill_orphans()  # only runs tagged with this node's lock, left by a sweep that died here
        found = guard.check(guard.gpu_processes(), allow_dirty, f"GPU already has processes on node {where}")
        scratch = Path(tempfile.mkdtemp(prefix="harness-run-"))
        placement["scratch_dir"] = str(scratch)  # the run_dir its spec.json names
        try:
            # A server kind's run drives the leg's server from this task; everything else is the bench worker.
            run = serve.execute if workloads.traits_of(spec.workload.kind).server else execute
            rec = run(spec, scratch, invocation_id=invocation_id, dirty=[*dirty, *found],
                      allow_dirty=allow_dirty, runner=RUNNER, attempt=attempt)
            files = run_files(scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    yield {"record": rec.model_dump(mode="json"), "files": files, "placement": placement}


# --- on the driver ----------------------------------------------------------------------------

@dataclass(kw_only=True)
class _Attempt:
    p: PlannedRun
    number: int
    excluded: tuple[str, ...] = ()           # node ids this run was lost on
    lost: list[dict[str, Any]] = field(default_factory=list)
    placement: dict[str, Any] | None = None
    gen: Any = None                          # ray.ObjectRefGenerator


def _harness_nodes() -> list[dict[str, Any]]:
    return [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get(NODE_RESOURCE, 0) >= 1]


def _can_run(node: dict[str, Any], spec: RunSpec, excluded: tuple[str, ...]) -> bool:
    return node["NodeID"] not in excluded and node["Resources"].get("GPU", 0) >= _needs_gpus(spec)


def _lost_node_id(a: _Attempt, exc: BaseException) -> str | None:
    if a.placement:
        return a.placement["node_id"]
    m = re.search(r"node ID: ([0-9a-f]{16,})", str(exc))
    return m.group(1) if m else None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def run_files(scratch: Path) -> dict[str, bytes]:
    """Every file the run left in its folder (requests.json, outputs, profile traces and summaries
    included: each is bounded where it is written), by path relative to it; results.json is sent
    as the record itself."""
    return {p.relative_to(scratch).as_posix(): p.read_bytes() for p in sorted(scratch.rglob("*"))
            if p.is_file() and not p.is_symlink() and p.name != "results.json"}


def land(run_dir: Path, rec: RunRecord, files: dict[str, bytes]) -> None:
    """Write a run's files in the local layout; results.json goes last, so --resume never sees half a run."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("results.json", *RUN_FILES):
        (run_dir / stale).unlink(missing_ok=True)
    for name, data in files.items():
        dest = paths.inside(run_dir, *PurePosixPath(name).parts)  # a name from a node never leaves the run
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    write(rec, run_dir)


def _unmeasured_record(a: _Attempt, invocation_id: str, allow_dirty: bool, reason: str, *,
                       attempt: int, phase: str = "lost-node") -> RunRecord:
    """A run that has no record of its own (never finished on a node): failed, without numbers."""
    spec, leg = a.p.spec, a.p.spec.leg_env.leg
    last = a.lost[-1] if a.lost else {}
    return RunRecord(
        study=spec.study, series=spec.series, run_id=spec.run_id, fingerprint=spec.fingerprint,
        harness_version=__version__, invocation_id=invocation_id, runner=RUNNER, node=last.get("node_name"),
        attempt=attempt, leg=leg.name, leg_label=leg.label, compat_id=spec.leg_env.compat_id,
        pins=list(spec.leg_env.pins), model=spec.model.name, tp=spec.model.tp, workload=spec.workload.name,
        workload_spec=spec.workload.work, arm=spec.arm.name, arm_spec=spec.arm.model_dump(),
        engine_args=spec.engine_args, repeat=spec.repeat, status="failed", timing=Timing(),
        manifest={"runner": RUNNER, "lost_attempts": a.lost},
        failure=Failure(reason=reason, exceptions=[x["error"] for x in a.lost], phase=phase),
        allow_dirty=allow_dirty, dirty=a.p.dirty, started_at=None, finished_at=now())


class RayExecutor:
    """Runs a sweep's plan as Ray tasks, one per run, each holding a whole node."""

    OPTIONS = ("address",)

    def __init__(self, address: str | None = None, *, max_attempts: int = MAX_ATTEMPTS,
                 poll_s: float = POLL_S) -> None:
        self.address = address
        self.max_attempts = max_attempts
        self.poll_s = poll_s

    def run_all(self, planned: list[PlannedRun], *, invocation_id: str, allow_dirty: bool,
                on_done: Callable[[PlannedRun, RunRecord, bool], None]) -> None:
        todo = [p for p in planned if p.reuse is None]
        pinned = [p.spec.run_id for p in todo if p.spec.devices is not None]
        if pinned:
            raise UserError(f"--devices cannot be used with --executor ray (Ray assigns each run its GPUs): "
                            f"{pinned[0]}")
        if todo and not self.address and not ray.is_initialized():
            raise UserError("--executor ray needs --address HOST:PORT of a running Ray cluster")
        for p in planned:
            if p.reuse is not None:
                on_done(p, p.reuse, True)
        if not todo:
            return
        owned = not ray.is_initialized()
        if owned:
            try:
                ray.init(address=self.address, log_to_driver=False, namespace="vllm-harness")
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise UserError(f"cannot join the Ray cluster at {self.address}: {_one_line(e)}") from None
        try:
            self._check_cluster(todo)
            self._run(todo, invocation_id=invocation_id, allow_dirty=allow_dirty, on_done=on_done)
        finally:
            if owned:
                ray.shutdown()

    def _check_cluster(self, todo: list[PlannedRun]) -> None:
        nodes = _harness_nodes()
        if not nodes:
            raise UserError(f"the Ray cluster at {self.address or 'this driver'} has no live node with the "
                            f"{NODE_RESOURCE!r} resource; start each measuring node with "
                            f"ray start --resources='{{\"{NODE_RESOURCE}\": 1}}'")
        for p in todo:
            if not any(_can_run(n, p.spec, ()) for n in nodes):
                most = max(n["Resources"].get("GPU", 0) for n in nodes)
                raise UserError(f"{p.spec.run_id}: needs {_needs_gpus(p.spec)} GPUs on one node; the cluster's "
                                f"{NODE_RESOURCE} nodes have at most {most:g}")

    def _submit(self, a: _Attempt, *, invocation_id: str, allow_dirty: bool) -> _Attempt:
        spec = a.p.spec
        opts: dict[str, Any] = {
            "num_cpus": 1, "num_gpus": _needs_gpus(spec), "resources": {NODE_RESOURCE: 1},
            "max_retries": 0, "num_returns": "streaming", "name": f"harness {spec.run_id} #{a.number}",
        }
        if a.excluded:
            opts["label_selector"] = {NODE_ID_LABEL: f"!in({', '.join(a.excluded)})"}
        a.placement = None
        a.gen = _task.options(**opts).remote(spec, invocation_id=invocation_id, dirty=a.p.dirty,
                                             allow_dirty=allow_dirty, attempt=a.number)
        return a

    def _run(self, todo: list[PlannedRun], *, invocation_id: str, allow_dirty: bool,
             on_done: Callable[[PlannedRun, RunRecord, bool], None]) -> None:
        submit = lambda a: self._submit(a, invocation_id=invocation_id, allow_dirty=allow_dirty)  # noqa: E731
        inflight: dict[Any, _Attempt] = {}
        for p in todo:
            a = submit(_Attempt(p=p, number=1))
            inflight[a.gen] = a

        def finish(a: _Attempt, rec: RunRecord, files: dict[str, bytes]) -> None:
            land(a.p.run_dir, rec, files)
            on_done(a.p, rec, False)

        try:
            while inflight:
                ready, _ = ray.wait(list(inflight), num_returns=1, timeout=self.poll_s)
                if not ready:
                    for a in self._stranded(inflight):
                        del inflight[a.gen]
                        ray.cancel(a.gen)
                        reason = (f"no live {NODE_RESOURCE} node left to run it "
                                  f"(lost on {len(a.lost)} node(s))")
                        # Only the attempts that started count; the one waiting never did.
                        finish(a, _unmeasured_record(a, invocation_id, allow_dirty, reason,
                                                     attempt=max(1, len(a.lost))), {})
                    continue
                a = inflight[ready[0]]
                try:
                    item = ray.get(next(a.gen))
                except StopIteration:
                    raise RuntimeError(f"{a.p.spec.run_id}: the Ray task ended without a record") from None
                except LOST_ERRORS as e:
                    del inflight[a.gen]
                    node_id = _lost_node_id(a, e)
                    name = (a.placement or {}).get("node_name") or (node_id or "unknown")[:12]
                    a.lost.append({"attempt": a.number, "node_id": node_id, "node_name": name,
                                   "error": _one_line(e), "at": now()})
                    if a.number >= self.max_attempts:
                        console.print(f"[red]lost  [/] {a.p.spec.run_id}: node {name} lost; "
                                      f"{a.number} attempts, giving up")
                        finish(a, _unmeasured_record(a, invocation_id, allow_dirty,
                                                     f"lost its node on all {a.number} attempts",
                                                     attempt=a.number), {})
                        continue
                    console.print(f"[yellow]lost  [/] {a.p.spec.run_id}: node {name} lost "
                                  f"({type(e).__name__}); retrying on another node, attempt {a.number + 1}")
                    excluded = a.excluded + ((node_id,) if node_id else ())
                    nxt = submit(_Attempt(p=a.p, number=a.number + 1, excluded=excluded, lost=a.lost))
                    inflight[nxt.gen] = nxt
                    continue
                except rex.OutOfMemoryError as e:
                    # Ray's memory monitor killed the run for the memory it took: that is the run's
                    # own failure, measured like any other, and another node would do the same.
                    del inflight[a.gen]
                    finish(a, _unmeasured_record(a, invocation_id, allow_dirty, _one_line(e),
                                                 attempt=a.number, phase="killed-by-ray-oom"), {})
                    continue
                except rex.RayTaskError as e:
                    cause = e.cause if isinstance(getattr(e, "cause", None), BaseException) else e
                    where = (a.placement or {}).get("node_name") or "?"
                    if isinstance(cause, UserError):
                        raise UserError(f"node {where}: {cause}") from None
                    raise
                if "placement" in item and "record" not in item:
                    a.placement = item["placement"]
                    continue
                del inflight[a.gen]
                rec = RunRecord.model_validate(item["record"])
                placement = item["placement"]
                manifest = rec.manifest | {"ray": placement} | ({"lost_attempts": a.lost} if a.lost else {})
                rec = rec.model_copy(update={"node": placement["node_name"] or placement["hostname"],
                                             "manifest": manifest})
                finish(a, rec, item["files"])
        finally:
            self._stop(list(inflight))

    def _stranded(self, inflight: dict[Any, _Attempt]) -> list[_Attempt]:
        """Runs not started anywhere that no live node may take any more (all lost or excluded)."""
        nodes = _harness_nodes()
        return [a for a in inflight.values()
                if a.placement is None and not any(_can_run(n, a.p.spec, a.excluded) for n in nodes)]

    @staticmethod
    def _stop(gens: list[Any], grace_s: float = 30.0) -> None:
        """Interrupt runs still going (each kills its process group on the way out, which
        `run.kill_group` may take 15 s to do), then force."""
        for g in gens:
            ray.cancel(g)
        deadline = time.monotonic() + grace_s
        for g in gens:
            if not _drain(g, deadline):
                ray.cancel(g, force=True)


def _drain(gen: Any, deadline: float) -> bool:
    """Consume a cancelled task's items until it has ended; False if it is still going at `deadline`."""
    while (left := deadline - time.monotonic()) > 0:
        ready, _ = ray.wait([gen], num_returns=1, timeout=left)
        if not ready:
            return False
        try:
            ray.get(next(gen))
        except StopIteration:
            return True
        except Exception:  # noqa: BLE001 - any end (cancelled, crashed) is the end we wait for
            return True
    return False


_task = ray.remote(run_on_node)
