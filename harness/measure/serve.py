"""A serve run: the leg's OpenAI-compatible server under the harness's own load, point by point.

The server is started from the leg's venv (worker/serve_server.py runs vLLM's api_server module) as
the leader of its own process group on 127.0.0.1 and a free port, with the same parent-death signal
and group kill as every run (run.process_group), so no server outlives its run, also when the sweep
is killed. Its output is the run's run.log, which failure attribution reads. The load comes from
harness.measure.loadgen, in this process: one client for every leg.

A server that never answers /health is a failed run with the cause its log gives. A server that dies
during a point fails that point (its completed requests are not a measurement of the point); the
server is started again and the next point goes on. The run is `ok` only when every point measured.

A workload with a `capacity:` block runs harness.measure.capacity's search instead of the grid: each
probe is a point; a probe that cannot be measured ends the search, and the run is failed with why.
An image workload sends OpenAI chat requests with the seeded images (harness.measure.serve_inputs).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from harness.measure import capacity as search
from harness.measure import engine_log, engine_metrics, loadgen, serve_inputs
from harness.measure.run import (RunSpec, _safe, emit, finish, prepare_run_dir, process_group, read_events,
                                 run_environ, worker_spec)
from harness.schema.record import Failure, RunRecord, now, write
from harness.schema.serve import CapacitySearch, PointMetrics, ServeInputs, ServePoint, ServeResult
from harness.schema.wire import WorkerResult
from harness.workloads import serve as kind
from harness.workloads import text
from harness.workloads.base import sha256_json
from harness.workloads import capacity as capacity_spec
from harness.workloads.capacity import Capacity

SERVER = Path(__file__).resolve().parent / "worker" / "serve_server.py"
HOST = "127.0.0.1"
# How long a point whose requests failed waits to see whether the server died under it (see Server.settle).
SETTLE_S = 2.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _flag(key: str, value: Any) -> list[str]:
    name = "--" + key.replace("_", "-")
    if value is True:
        return [name]
    if value is False:
        return ["--no-" + key.replace("_", "-")]
    if value is None:
        return []
    return [name, json.dumps(value) if isinstance(value, (dict, list)) else str(value)]


def server_args(spec: RunSpec, port: int) -> list[str]:
    """api_server's command line: the model and the run's engine arguments, as its flags."""
    wl = spec.workload.work
    args = {"model": spec.model_path, "served_model_name": served_name(spec), "host": HOST, "port": port,
            "tensor_parallel_size": spec.model.tp, "seed": wl["seed"]}
    if spec.model.dtype and spec.model.dtype != "auto":
        args["dtype"] = spec.model.dtype
    if spec.model.tokenizer:
        args["tokenizer"] = spec.model.tokenizer
    args |= spec.engine_args
    return [x for k, v in args.items() for x in _flag(k, v)]


def served_name(spec: RunSpec) -> str:
    return _safe(spec.model.name)


def _no_proxy() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


DRAIN_S = 60.0   # at most this long waiting for the last point's requests to leave the engine
_IN_ENGINE = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def in_engine(base: str) -> int | None:
    """Requests the server's engine holds now (running + waiting, from vLLM's Prometheus /metrics);
    None where the server does not say."""
    text = engine_metrics.fetch(base)
    if text is None:
        return None
    held = [v for name, _, v in engine_metrics.samples(text) if name in _IN_ENGINE]
    return round(sum(held)) if held else None


def drain(base: str, timeout_s: float = DRAIN_S, poll_s: float = 0.2) -> tuple[float, int | None]:
    """Wait, at most `timeout_s`, until the engine holds no request, so that a point does not begin on the
    last one's leftovers (an overloaded point's queue, cut-off lead-out requests still being aborted:
    results/h100-capacity-steady lost 4 requests to resets in the point after one). Returns the seconds
    waited and the requests left (0: drained; None: the server has no such metrics, not waited for)."""
    start = time.monotonic()
    left = in_engine(base)
    while left and time.monotonic() - start < timeout_s:
        time.sleep(poll_s)
        left = in_engine(base)
    return time.monotonic() - start, left


def wait_healthy(base: str, proc: subprocess.Popen, timeout_s: float) -> str | None:
    """None once /health answers 200; otherwise why not (the server exited, or the timeout)."""
    opener, deadline = _no_proxy(), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"server exited with code {proc.returncode} before it was healthy"
        with contextlib.suppress(urllib.error.URLError, OSError, ConnectionError):
            with opener.open(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return None
        time.sleep(0.5)
    return f"server not healthy after {timeout_s:.0f} s"


class Server:
    """The leg's server, started again after a death; each start appends to the run's log."""

    def __init__(self, spec: RunSpec, run_dir: Path, env: dict[str, str]) -> None:
        self.spec, self.run_dir, self.env = spec, run_dir, env
        self.starts = 0
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self._ctx: contextlib.AbstractContextManager | None = None

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self, timeout_s: float) -> tuple[str | None, float]:
        self.stop()
        self.starts += 1
        self.port = free_port()
        cmd = [str(self.spec.leg_env.python), str(SERVER), str(self.run_dir / "spec.json"), "--",
               *server_args(self.spec, self.port)]
        emit(self.run_dir, "server_start", instance=self.starts, port=self.port)
        t0 = time.monotonic()
        self._ctx = process_group(cmd, env=self.env, log=self.run_dir / "run.log", cwd=self.run_dir)
        self.proc = self._ctx.__enter__()
        why = wait_healthy(self.base, self.proc, timeout_s)
        init_s = time.monotonic() - t0
        emit(self.run_dir, "server_ready" if why is None else "server_not_ready", instance=self.starts,
             seconds=init_s, reason=why)
        return why, init_s

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def settle(self, timeout_s: float) -> None:
        """Give a dying server up to `timeout_s` to be seen dead. A killed server's sockets close while
        its process is torn down, before it can be reaped: its requests fail a moment before `alive()`
        says so, and a point read in that moment would be taken for an overloaded live server's."""
        if self.proc is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout_s)

    def exit_reason(self) -> str:
        rc = None if self.proc is None else self.proc.poll()
        if rc is None:
            return "server stopped answering"
        return f"server killed by signal {-rc}" if rc < 0 else f"server exited with code {rc}"

    def stop(self) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(None, None, None)  # the whole group: api_server, EngineCore, workers
            emit(self.run_dir, "server_stop", instance=self.starts)
        self._ctx, self.proc = None, None


def recorded_vocab(run_dir: Path) -> int | None:
    sizes = [e.get("size") for e in read_events(run_dir) if e.get("phase") == "prompt_vocab"]
    return sizes[-1] if sizes and isinstance(sizes[-1], int) else None


SERVED_MODALITIES = ("text", "image")


def prompt_builder(work: dict[str, Any], vocab: int) -> tuple[kind.Build, serve_inputs.ImageSet | None]:
    """What builds a point's prompts from (count, seed): seeded token ids, or seeded chat requests with
    images (identical on every leg; the ImageSet gathers the hashes of every image built)."""
    if work.get("modality", "text") == "image":
        images = serve_inputs.ImageSet()

        def chat(n: int, seed: int) -> list[Any]:
            return serve_inputs.image_requests(work, n, seed, images)
        return chat, images

    def build(n: int, seed: int) -> list[Any]:
        return text.token_ids(n, work["input_len"], vocab, seed)
    return build, None


def prompts_for(work: dict[str, Any], vocab: int) -> tuple[list[list[Any]], list[Any], ServeInputs | None]:
    """Per grid point its prompts, the warm-up prompts and what an image workload sent."""
    build, images = prompt_builder(work, vocab)
    groups, warm = kind.prompt_groups(work, build), kind.warmup_prompts(work, build)
    return groups, warm, images.record() if images else None


def _slo(work: dict[str, Any]) -> tuple[float, float]:
    """The per-request bounds a point's goodput is judged on: a capacity search's own, where it declares them."""
    cap = kind.capacity(work)
    ttft = cap.bound("ttft_ms") if cap else None
    tpot = cap.bound("tpot_ms") if cap else None
    return (ttft.max if ttft else work["slo_ttft_ms"]), (tpot.max if tpot else work["slo_tpot_ms"])


def _describe(groups: list[list[Any]]) -> dict[str, Any]:
    flat = [x for g in groups for x in g]
    if flat and isinstance(flat[0], dict):   # chat requests: their JSON, images included, is the hash
        return {"prompts_sha256": sha256_json(flat), "prompt_tokens": None}
    return text.describe([{"prompt_token_ids": ids} for ids in flat], {}) if flat else {}


def execute(spec: RunSpec, run_dir: Path, *, invocation_id: str, dirty: list[str], allow_dirty: bool,
            runner: str = "local", attempt: int = 1) -> RunRecord:
    """Measure one serve run into `run_dir` and write its results.json; never raises for a failed run."""
    work = spec.workload.work
    prepare_run_dir(spec, run_dir)
    worker_spec(spec, run_dir).write(run_dir / "spec.json")
    env = run_environ(spec)
    started = now()
    emit(run_dir, "spawn", leg=spec.leg_env.leg.name, compat_id=spec.leg_env.compat_id, run_id=spec.run_id)
    t0 = time.monotonic()
    server = Server(spec, run_dir, env)
    points: list[ServePoint] = []
    status, failure_reason, init_s, warm_s = "ok", None, None, 0.0
    plan = kind.points(work)
    cap = kind.capacity(work)
    block, inputs = None, None
    groups: list[list[Any]] = []
    try:
        if work.get("modality", "text") not in SERVED_MODALITIES:
            raise _Refused(f"serve workloads send text token ids or chat requests with images; modality "
                           f"{work['modality']!r} is not served")
        why, init_s = server.start(min(work["startup_timeout_s"], spec.timeout_s))
        if why is not None:
            status = "timeout" if "not healthy" in why else "failed"
            failure_reason = why
        else:
            vocab = recorded_vocab(run_dir)
            if vocab is None:
                raise _Refused("no model files on disk to draw prompt ids from (serve needs config.json or "
                               "tokenizer.json)")
            build, images = prompt_builder(work, vocab)
            # Uncounted requests' prompts (lead_in_s, lead_out) from a builder of their own: an image
            # workload's record lists the images its counted requests sent, not the lead's.
            lead_build, _ = prompt_builder(work, vocab)
            warm = kind.warmup_prompts(work, build)
            if cap is None:
                groups = kind.prompt_groups(work, build)
                inputs = images.record() if images else None
            # A probe's size depends on the rate probed (search.probe_s): its prompts are built when it
            # runs, from the probe's own seed, so the same probe on two legs sends the same requests.
            emit(run_dir, "warmup_start", requests=len(warm))
            w0 = time.monotonic()
            if warm:
                loadgen.run_point(server.base, model=served_name(spec), prompts=warm, max_tokens=work["output_len"],
                                  concurrency=min(len(warm), max(work["concurrency"])),
                                  timeout_s=work["request_timeout_s"])
            warm_s = time.monotonic() - w0
            emit(run_dir, "warmup_end", seconds=warm_s)
            if cap is not None:
                block, points = run_search(server, spec, cap, build, groups, t0, lead_build)
                inputs = images.record() if images else None
                if block.status == "failed":
                    status, failure_reason = "failed", f"capacity search: {block.stop}"
                    if points and "timed out" in points[-1].reason:
                        status = "timeout"
                plan = []
            for p, prompts in zip(plan, groups):
                if time.monotonic() - t0 > spec.timeout_s:
                    points.append(failed_point(p, work, server.starts, f"run timed out after {spec.timeout_s:.0f} s"))
                    status = "timeout"
                    continue
                if not server.alive():
                    why, _ = server.start(min(work["startup_timeout_s"], spec.timeout_s))
                    if why is not None:
                        points.append(failed_point(p, work, server.starts, f"restart failed: {why}"))
                        continue
                points.append(measure_point(server, spec, p, prompts, lead_build))
    except _Refused as e:
        status, failure_reason = "failed", str(e)
    finally:
        server.stop()
    wall = time.monotonic() - t0
    if any(pt.status != "ok" for pt in points) and status == "ok":
        status = "failed"
        bad = [pt for pt in points if pt.status != "ok"]
        failure_reason = (f"{len(bad)} of {len(points)} load points failed; first: "
                          f"{_label(bad[0])}: {bad[0].reason}")
    emit(run_dir, "exit", status=status, wall_s=wall)
    measured = [pt.metrics.model_dump() for pt in points if pt.status == "ok" and pt.metrics]
    timed_s = sum(pt.metrics.duration_s for pt in points if pt.metrics)
    descr = _describe(groups)
    if points:
        WorkerResult(metrics=kind.metrics(measured),
                     work={"num_seqs": sum(pt.metrics.requests for pt in points if pt.metrics),
                           "prompt_tokens": descr.get("prompt_tokens"),
                           "output_tokens": sum(pt.metrics.output_tokens for pt in points if pt.metrics),
                           "prompts_sha256": descr.get("prompts_sha256"), "seed": work["seed"]},
                     timing={"engine_init_s": init_s, "warmup_s": warm_s, "timed_s": timed_s}).write(run_dir)
    rec = finish(spec, run_dir, status=status, exit_code=None, sig=None, wall=wall, started=started,
                 invocation_id=invocation_id, dirty=dirty, allow_dirty=allow_dirty, runner=runner, attempt=attempt)
    slo_ttft, slo_tpot = _slo(work)
    serve = ServeResult(client=loadgen.client_info(), slo_ttft_ms=slo_ttft, slo_tpot_ms=slo_tpot,
                        server_starts=server.starts, server_port=server.port, points=points, capacity=block,
                        inputs=inputs)
    update: dict[str, Any] = {"serve": serve}
    if rec.status == "ok" and status != "ok":
        update["status"] = status
    if status != "ok":
        # A server that never came up: the log's own root cause when it names one. Later on, what the
        # harness saw (a point's server died, answered 500) comes first, and the log's root cause is
        # added to it: an engine that starts and then dies on its first request is named by its log.
        f = rec.failure or Failure()
        from_log = f.reason if f.traceback and not f.reason.startswith(("exit code", "timed out")) else None
        if not points:
            reason = from_log or failure_reason or f.reason
        elif from_log and failure_reason and from_log not in failure_reason:
            reason = f"{failure_reason}; the server's log names the cause: {from_log}"
        else:
            reason = failure_reason or f.reason
        phases = [e["phase"] for e in read_events(run_dir) if e["phase"] not in ("error", "exit")]
        update["failure"] = f.model_copy(update={"reason": reason,
                                                 "phase": phases[-1] if phases else f.phase})
        update["metrics"] = rec.metrics.model_copy(update={"output_tok_s": None, "requests_per_s": None})
    rec = rec.model_copy(update=update)
    write(rec, run_dir)
    return rec


class _Refused(Exception):
    pass


def _label(p: ServePoint) -> str:
    rate = "inf" if p.request_rate is None else f"{p.request_rate:g}"
    return f"c={p.concurrency} rate={rate}"


def failed_point(p: kind.Point, work: dict[str, Any], instance: int, reason: str) -> ServePoint:
    return ServePoint(index=p.index, concurrency=p.concurrency, request_rate=p.request_rate,
                      seed=kind.point_seed(work, p.index), status="failed", reason=reason, server_instance=instance)


def run_search(server: Server, spec: RunSpec, cap: Capacity, build: kind.Build, sent: list[list[Any]],
               t0: float, lead_build: kind.Build | None = None) -> tuple[CapacitySearch, list[ServePoint]]:
    """The capacity search on this run's server: probe `step` sends the prompts of seed point_seed(step),
    as many as capacity.probe_requests asks at its value; each probe's prompts are appended to `sent`."""
    work = spec.workload.work

    def probe(step: int, value: float, phase: str) -> tuple[ServePoint, list[loadgen.RequestResult] | None]:
        if cap.axis == "concurrency":
            p = kind.Point(index=step, concurrency=int(value), request_rate=None)
        else:
            p = kind.Point(index=step, concurrency=cap.search.concurrency or work["num_prompts"], request_rate=value)
        if time.monotonic() - t0 > spec.timeout_s:
            return failed_point(p, work, server.starts, f"run timed out after {spec.timeout_s:.0f} s"), None
        if not server.alive():
            return failed_point(p, work, server.starts, f"{server.exit_reason()} before the probe"), None
        n = capacity_spec.probe_requests(cap, work["num_prompts"], value)
        emit(server.run_dir, "probe", step=step, search_phase=phase, axis=cap.axis, value=value, requests=n)
        prompts = build(n, kind.point_seed(work, step))
        point, run = _measure(server, spec, p, prompts, lead_build)
        # Chat requests carry their images (~150 KB each at 224x224): keep only their hash once sent.
        sent.append([{"prompts_sha256": sha256_json(prompts)}] if prompts and isinstance(prompts[0], dict)
                    else prompts)
        return point, (run.results if point.status == "ok" and run is not None else None)

    block, points = search.search(cap, work["capacity"], probe)
    emit(server.run_dir, "capacity", status=block.status, capacity=block.capacity, stop=block.stop)
    return block, points


def measure_point(server: Server, spec: RunSpec, p: kind.Point, prompts: list[Any],
                  lead_build: kind.Build | None = None) -> ServePoint:
    return _measure(server, spec, p, prompts, lead_build)[0]


def lead_of(work: dict[str, Any], build: kind.Build | None) -> loadgen.Lead | None:
    """The uncounted requests that hold each paced point in steady state, where the workload declares them
    (lead_in_s, lead_out); their prompts are the workload's own kind, from their own seeds."""
    if build is None or not (work.get("lead_in_s") or work.get("lead_out")):
        return None
    cap = work.get("lead_out_max_s")
    return loadgen.Lead(build=build, lead_in_s=float(work.get("lead_in_s") or 0.0), lead_out=bool(work.get("lead_out")),
                        lead_out_max_s=float(cap) if cap is not None else None)


def _measure(server: Server, spec: RunSpec, p: kind.Point, prompts: list[Any],
             lead_build: kind.Build | None = None) -> tuple[ServePoint, loadgen.PointRun | None]:
    work = spec.workload.work
    seed = kind.point_seed(work, p.index)
    waited, left = drain(server.base)
    if left or waited >= 1.0:
        emit(server.run_dir, "drain", index=p.index, seconds=round(waited, 2), left=left)
    emit(server.run_dir, "point_start", index=p.index, concurrency=p.concurrency, request_rate=p.request_rate,
         instance=server.starts)
    log_at = engine_log.offset(server.run_dir / "run.log")
    hist_at = engine_metrics.scrape(server.base)
    run = loadgen.run_point(server.base, model=served_name(spec), prompts=prompts, max_tokens=work["output_len"],
                            concurrency=p.concurrency, rate=p.request_rate, seed=seed,
                            timeout_s=work["request_timeout_s"], arrivals=work.get("arrivals", "harness"),
                            burstiness=work.get("burstiness", 1.0), lead=lead_of(work, lead_build))
    latency = engine_metrics.delta(hist_at, engine_metrics.scrape(server.base) if hist_at else None)
    if run.lead_out_stopped:
        # Recorded beside the point: its last counted requests finished without arrivals behind them.
        emit(server.run_dir, "lead_out_stopped", index=p.index, after_s=work.get("lead_out_max_s"))
    slo_ttft, slo_tpot = _slo(work)
    m = PointMetrics.model_validate(loadgen.summarize(run, slo_ttft_ms=slo_ttft, slo_tpot_ms=slo_tpot))
    reason = ""
    if m.failed:
        server.settle(SETTLE_S)
    if not server.alive():
        # What the client saw too (an HTTP 500 before the server went): the server's log adds the cause.
        seen = f"; requests: {'; '.join(m.errors)}" if m.errors else ""
        reason = f"{server.exit_reason()} during the point ({m.completed} of {m.requests} requests completed{seen})"
    elif m.completed == 0:
        reason = f"no request completed: {'; '.join(m.errors) or 'no error text'}"
    emit(server.run_dir, "point_end", index=p.index, completed=m.completed, failed=m.failed, reason=reason)
    return ServePoint(index=p.index, concurrency=p.concurrency, request_rate=p.request_rate, seed=seed,
                      status="failed" if reason else "ok", reason=reason, server_instance=server.starts,
                      metrics=m, engine=engine_log.view(server.run_dir / "run.log", log_at),
                      engine_latency=latency), run
