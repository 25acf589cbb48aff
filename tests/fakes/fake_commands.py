"""FAKE command-mode worker (stands in for harness/measure/worker/commands.py, which needs vLLM): it
speaks the same protocol (JSON commands on stdin, one JSON reply a line on the reply descriptor) and
writes the same files (run.jsonl phases, manifest.json, worker.json), with no engine.

Behaviour is chosen by the spec's engine_args (they come from the scenario, as in a real run):
  fake_pass_s:      seconds each timed pass sleeps (default 0.005)
  fake_crash_round: in this round's first pass, print a traceback and exit 1 (an engine crash)
  fake_hang_round:  in this round's first pass, sleep forever (for the per-command timeout)
  fake_tok_s:       the throughput a pass reports is this / fake_pass_s-scaled (default 1000)
  fake_init_s:      seconds the engine takes to start (default 0)
  fake_only_tok_s:  with fake_only_leg, that leg's tok/s (a true difference between the legs)
  fake_busy_idle:   while idle, burn CPU in a child process (partner_cpu_s must see it)
  fake_steady:      a pass reports fake_tok_s times a fixed draw within ±1% (seeded by the engine's
                    run id and the pass's number, so blocks differ but reruns agree) instead of
                    scaling it by the pass's measured seconds: a test whose verdict must not depend on
                    how a loaded host's scheduler stretched a short sleep
  fake_only_leg:    the fake_* behaviours above apply only to this leg's engine (its name is in the
                    run id the harness puts in the environment); other legs behave normally
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "harness" / "measure" / "worker"))
from bench import Events  # noqa: E402


def _tok(args: dict, pass_s: float, s: float, n: int) -> float:
    base = float(args.get("fake_tok_s", 1000.0))
    if args.get("fake_steady"):
        return base * random.Random(f"{os.environ.get('HARNESS_RUN_ID', '')}:{n}").uniform(0.99, 1.01)
    return base * pass_s / s


def main(spec_path: str, reply_fd: int) -> int:
    spec = json.loads(Path(spec_path).read_text())
    args = spec["engine_args"]
    only = args.get("fake_only_leg")
    if only and f"/{only}/" not in os.environ.get("HARNESS_RUN_ID", ""):
        args = {k: v for k, v in args.items()
                if k in ("fake_pass_s", "fake_tok_s", "fake_init_s", "fake_steady", "enable_sleep_mode")}
    if "fake_only_tok_s" in args:  # this leg's own tok/s (the other legs keep fake_tok_s)
        args["fake_tok_s"] = args["fake_only_tok_s"]
    out = os.fdopen(reply_fd, "w", buffering=1)
    gev = Events(Path(spec["run_dir"]) / "run.jsonl")
    gev("worker_start", mode="commands")
    if args.get("fake_busy_idle"):  # a grandchild in the same process group, burning CPU all along
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
    items = spec["runs"]
    evs = [Events(Path(i["run_dir"]) / "run.jsonl") for i in items]
    for i in items:
        (Path(i["run_dir"]) / "manifest.json").write_text(json.dumps({"vllm": "fake", "host": "fake"}))
    time.sleep(float(args.get("fake_init_s", 0)))
    gev("engine_init_end", seconds=0.01)
    passes: dict[int, list[float]] = {}
    first_of_round: set[int] = set()
    out.write(json.dumps({"ok": True, "event": "ready", "init_s": 0.01, "pid": os.getpid(),
                          "sleep_mode": bool(args.get("enable_sleep_mode"))}) + "\n")
    pass_s = float(args.get("fake_pass_s", 0.005))
    while True:
        line = sys.stdin.readline()
        if not line:
            return 1
        cmd = json.loads(line)
        what = cmd["cmd"]
        if what == "pass":
            i, rnd = int(cmd["workload"]), int(cmd.get("round", 0))
            evs[i]("pass_start", round=rnd)
            if rnd not in first_of_round:
                first_of_round.add(rnd)
                if args.get("fake_crash_round") == rnd:
                    print("Traceback (most recent call last):\n  File \"fake.py\", line 1, in pass\n"
                          "RuntimeError: FAKE engine died in a pass", flush=True)
                    return 1
                if args.get("fake_hang_round") == rnd:
                    time.sleep(3600)
            started = time.time()
            t0 = time.perf_counter()
            time.sleep(pass_s)
            s = time.perf_counter() - t0
            passes.setdefault(i, []).append(s)
            evs[i]("pass_end", round=rnd, seconds=s)
            tok = _tok(args, pass_s, s, len(passes[i]))
            out.write(json.dumps({"ok": True, "cmd": what, "seconds": s, "started_at": started, "ended_at": time.time(),
                                  "output_tokens": 10, "value": tok}) + "\n")
        elif what == "finish":
            for i, item in enumerate(items):
                if i in passes:
                    tok = [_tok(args, pass_s, s, n + 1) for n, s in enumerate(passes[i])]
                    res = {"metrics": {"throughput_tok_s": statistics.median(tok), "total_tok_s": statistics.median(tok),
                                       "samples_tok_s": tok},
                           "work": {"num_seqs": 1, "output_tokens": 10, "passes": len(tok)},
                           "timing": {"timed_s": sum(passes[i]), "passes_s": passes[i], "engine_init_s": 0.01}}
                    (Path(item["run_dir"]) / "worker.json").write_text(json.dumps(res))
            out.write(json.dumps({"ok": True, "cmd": what}) + "\n")
            return 0
        else:  # warmup, sleep, wake
            if what == "warmup":
                evs[int(cmd["workload"])]("warmup_start")
            out.write(json.dumps({"ok": True, "cmd": what, "seconds": 0.001}) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
