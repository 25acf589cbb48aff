"""The worker's command mode: start one engine, then do what the controller asks, one command a line.

Usage (by harness.measure.paired, with the leg's Python): python commands.py SPEC.json REPLY_FD
The spec lists the workloads this engine measures (`runs`, each {run_dir, workload}). Commands are
JSON lines on stdin; every command gets one JSON line back on the file descriptor REPLY_FD (stdout is
the run's log, shared with vLLM's processes, so replies cannot go there):

  {"cmd": "warmup", "workload": i}  the workload's warm-up iterations (outside every timed region)
  {"cmd": "pass", "workload": i}    one timed pass: its perf_counter seconds, wall-clock start/end,
                                    output tokens and the kind's metric for that pass alone
  {"cmd": "sleep"} / {"cmd": "wake"} vLLM's sleep mode (level 1) around another engine's passes
  {"cmd": "finish"}                 worker.json for every workload that ran a pass, then exit 0

An item whose `worker` is vllm_bench.py is vLLM's side of a same-engine crosscheck: each of its passes
is one call of vLLM's own benchmark main() on this engine (vllm_bench.LentSide), timed by that main().

The first reply, unasked, says the engine is up ({"event": "ready", ...}). End of stdin (the
controller died) ends the worker, and the worker dies with its process group as in the one-shot mode
(bench.die_with_group). A pass that raises is not caught: the traceback goes to the log and the worker
exits non-zero, which the controller records as that engine's crash.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[3]))
import bench  # noqa: E402
import handover  # noqa: E402
import vllm_bench  # noqa: E402

from harness.schema.wire import WorkerSpec  # noqa: E402
from harness.workloads.base import Pass  # noqa: E402


class Workload:
    """What one workload has done on this engine so far."""

    def __init__(self, item: dict, ev: bench.Events):
        self.item, self.run_dir, self.ev = item, Path(item["run_dir"]), ev
        self.prep: bench.Prepared | None = None
        self.warm_s = 0.0
        self.passes: list[Pass] = []
        self.outs: list = []           # the first pass's outputs (requests.json, input description)
        self.inputs: dict | None = None


def main(spec_path: str, reply_fd: int) -> int:
    spec = WorkerSpec.read(spec_path)
    gev = bench.Events(Path(spec.run_dir) / "run.jsonl")
    if os.getpgrp() == os.getpid():  # only as a group leader: never kill a caller's group
        bench.die_with_group()
    reply_file = os.fdopen(reply_fd, "w", encoding="utf-8", buffering=1)
    os.set_inheritable(reply_fd, False)  # vLLM's spawned processes must not hold the controller's pipe

    def reply(**fields: object) -> None:
        reply_file.write(json.dumps(fields) + "\n")
        reply_file.flush()

    items = spec.runs
    gev("worker_start", python=sys.executable, workloads=len(items), mode="commands")
    sleep_mode = bool(spec.engine_args.get("enable_sleep_mode"))
    llm, ctx, init_s = bench.start_engine(spec, gev, items)
    wls: list[Workload | vllm_bench.LentSide] = [
        vllm_bench.LentSide(item, spec, ctx) if item.get("worker") == vllm_bench.SCRIPT
        else Workload(item, bench.Events(Path(item["run_dir"]) / "run.jsonl")) for item in items]
    for w in wls:
        w.ev("engine_ready", engine_init_s=init_s)
    reply(ok=True, event="ready", init_s=init_s, pid=os.getpid(), sleep_mode=sleep_mode)
    while True:
        line = sys.stdin.readline()  # a line as soon as it arrives; '' at end of input
        if not line:
            break
        if not line.strip():
            continue
        cmd = json.loads(line)
        what = cmd.get("cmd")
        t0 = time.perf_counter()
        if what == "sleep":
            llm.sleep(level=1)
            reply(ok=True, cmd=what, seconds=time.perf_counter() - t0)
        elif what == "wake":
            llm.wake_up()
            reply(ok=True, cmd=what, seconds=time.perf_counter() - t0)
        elif what == "warmup":
            w = wls[int(cmd["workload"])]
            if isinstance(w, vllm_bench.LentSide):
                reply(ok=True, cmd=what, seconds=w.warmup(llm))
                continue
            if w.prep is None:
                w.prep = bench.Prepared(w.item["workload"], ctx)
            bench._reset_prefix_cache(llm)
            w.warm_s += w.prep.warmup(llm, w.ev)
            reply(ok=True, cmd=what, seconds=time.perf_counter() - t0)
        elif what == "pass":
            w = wls[int(cmd["workload"])]
            if isinstance(w, vllm_bench.LentSide):
                bench._reset_prefix_cache(llm)  # as before the harness's passes, outside the clock
                reply(ok=True, cmd=what, **w.one_pass(llm, int(cmd.get("round", 0))))
                continue
            reply(ok=True, cmd=what, **_one_pass(llm, w, ctx, int(cmd.get("round", 0))))
        elif what == "finish":
            for position, w in enumerate(wls, 1):
                if isinstance(w, vllm_bench.LentSide):
                    w.finish()
                elif w.passes and w.prep is not None:
                    timing = {"engine_init_s": init_s if position == 1 else 0.0, "warmup_s": w.warm_s,
                              "timed_s": sum(p.seconds for p in w.passes),
                              "passes_s": [p.seconds for p in w.passes]}
                    w.prep.write_result(w.run_dir, w.ev, w.passes, w.outs, timing=timing)
            gev("teardown_start")
            reply(ok=True, cmd=what)
            del llm
            gev("teardown_end")
            return 0
        else:
            reply(ok=False, cmd=what, error=f"unknown command {what!r}")
    gev("stdin_closed")  # the controller went away without a finish: nothing is written
    return 1


def _one_pass(llm, w: Workload, ctx: dict, round_: int) -> dict:
    """One timed pass of `w` (warmed up first if nobody asked: never a cold pass on the clock)."""
    if w.prep is None:
        w.prep = bench.Prepared(w.item["workload"], ctx)
        bench._reset_prefix_cache(llm)
        w.warm_s += w.prep.warmup(llm, w.ev)
    bench._reset_prefix_cache(llm)  # outside the pass's own clock
    keep: list | None = [] if not w.passes else None
    w.ev("pass_start", round=round_, n=len(w.passes) + 1)
    started = time.time()
    with handover.Clock(llm) as clock:
        p = w.prep.timed_pass(llm, w.run_dir, keep=keep)
    ended = time.time()
    w.ev("pass_end", round=round_, seconds=p.seconds)
    w.passes.append(p)
    if keep is not None:
        w.outs = keep
        w.inputs = w.prep.inputs(keep)
    kind = w.prep.kind
    value = kind.metrics(w.prep.timed([p], w.inputs or {"prompt_tokens": 0})).get(kind.METRIC.key)
    return {"seconds": p.seconds, "started_at": started, "ended_at": ended,
            "output_tokens": sum(p.group_output_tokens), "value": value, "handover": clock.summary()}


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1], int(sys.argv[2])))
    except BaseException as exc:
        if not isinstance(exc, SystemExit):
            try:
                spec = json.loads(Path(sys.argv[1]).read_text())
                bench.Events(Path(spec["run_dir"]) / "run.jsonl")("error", error=f"{type(exc).__name__}: {exc}"[:2000])
            except Exception:  # noqa: BLE001 - the traceback below is the record of last resort
                pass
        raise
