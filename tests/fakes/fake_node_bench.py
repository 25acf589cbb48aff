"""FAKE bench worker for the Ray executor's tests: no engine, the same files as
harness/measure/worker/bench.py (run.jsonl phases, manifest.json captured by the real stack module, so
OMP_NUM_THREADS and the run's environment are recorded as in a real run, and worker.json).

Behaviour is chosen by the spec's engine_args (they come from the scenario, as in a real run):
  fake_sleep_s:             time spent "measuring"
  fake_harmless_traceback:  print a traceback from a background thread, as vLLM's usage-stats thread
                            did in the study, and carry on to a normal result
  fake_exit:                print a traceback and exit with this code (a measured failure)
  fake_lose_node_once:      a flag file; if it does not exist yet, create it and kill every process
                            of the stand-in node this run is on (HARNESS_TEST_NODE in the environment),
                            this one last: the machine "dies" mid-run
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "harness" / "measure" / "worker"))
import stack  # noqa: E402
from bench import Events  # noqa: E402


def _usage_thread_crash() -> None:
    def report() -> None:
        raise ValueError("Expecting value: line 1 column 1 (char 0)")  # cpuinfo's stdout, json-parsed

    t = threading.Thread(target=report, name="_report_usage_worker")
    t.start()
    t.join()


def _lose_node() -> None:
    tag = f"HARNESS_TEST_NODE={os.environ['HARNESS_TEST_NODE']}".encode()
    me = os.getpid()
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != me:
            try:
                if tag in (d / "environ").read_bytes().split(b"\0"):
                    os.kill(int(d.name), signal.SIGKILL)
            except (OSError, ValueError):
                pass
    os.kill(me, signal.SIGKILL)


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    run_dir = Path(spec["run_dir"])
    args, wl = spec["engine_args"], spec["workload"]
    ev = Events(run_dir / "run.jsonl")
    ev("worker_start", python=sys.executable)
    manifest = stack.capture(import_torch=False) | {"vllm": "fake", "device": "fake", "fake_bench": True}
    (run_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    ev("env_ready")
    ev("engine_init_start")
    if args.get("fake_harmless_traceback"):
        _usage_thread_crash()
    if args.get("fake_exit"):
        print("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
              "RuntimeError: Engine core initialization failed. See root cause above.", flush=True)
        return int(args["fake_exit"])
    ev("engine_init_end", seconds=0.0)
    flag = args.get("fake_lose_node_once")
    if flag and not Path(flag).exists():
        Path(flag).write_text(os.environ.get("HARNESS_TEST_NODE", ""))
        ev("timed_start")
        _lose_node()
    ev("timed_start")
    t0 = time.perf_counter()
    time.sleep(float(args.get("fake_sleep_s", 0.2)))
    timed = time.perf_counter() - t0
    ev("timed_end", seconds=timed)
    n = wl["num_prompts"]
    result = {"metrics": {"throughput_tok_s": 1000.0, "total_tok_s": 1000.0},
              "work": {"num_seqs": n, "output_tokens": n * wl["output_len"],
                       "prompt_tokens": n * wl["input_len"], "seed": wl["seed"]},
              "timing": {"timed_s": timed, "engine_init_s": 0.0}}
    (run_dir / "worker.json").write_text(json.dumps(result))
    ev("teardown_end")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
