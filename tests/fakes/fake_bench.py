"""FAKE bench worker for tests that are about the harness, not about vLLM: it writes the same files
as harness/measure/worker/bench.py (run.jsonl phases, manifest.json, worker.json) without any engine.

Behaviour is chosen by the spec's engine_args (they come from the scenario, as in a real run):
  fake_sleep_s: sleep inside the timed region (for timeouts and interruption)
  fake_fail:    raise inside a child process, then exit 1 (a crash in an engine subprocess)
  fake_child:   start a grandchild that sleeps forever (must die with the process group)
  fake_tok_s:   the throughput to report
  fake_vllm_prompt_tokens: prompt tokens per request that vLLM's side (a run of the crosscheck's
                vllm-bench arm) reports, as vLLM's text-only fallback would: other work than asked
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "harness" / "measure" / "worker"))
from bench import Events  # noqa: E402


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    run_dir = Path(spec["run_dir"])
    ev = Events(run_dir / "run.jsonl")
    args = spec["engine_args"]
    wl = spec["workload"]
    ev("worker_start")
    (run_dir / "manifest.json").write_text(json.dumps({"vllm": "fake", "device": "fake", "host": "fake"}))
    ev("env_ready")
    if args.get("fake_child"):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    ev("engine_init_start")
    if args.get("fake_fail"):
        prefix = "(EngineCore_DP0 pid=99) ERROR 11-29 23:58:00 [core.py:1] "
        lines = ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>', args["fake_fail"]]
        code = f"import sys; sys.stdout.write({''.join(prefix + x + chr(10) for x in lines)!r})"
        subprocess.run([sys.executable, "-c", code])
        raise RuntimeError("Engine core initialization failed. See root cause above.")
    ev("engine_init_end", seconds=0.0)
    ev("timed_start")
    t0 = time.perf_counter()
    time.sleep(float(args.get("fake_sleep_s", 0.01)))
    timed = time.perf_counter() - t0
    ev("timed_end", seconds=timed)
    n, out = wl["num_prompts"], wl["num_prompts"] * wl["output_len"]
    tok_s = float(args.get("fake_tok_s", 1000.0))
    per_prompt = wl["input_len"]
    if args.get("fake_vllm_prompt_tokens") and "/vllm-bench" in spec["run_dir"]:
        per_prompt = int(args["fake_vllm_prompt_tokens"])
    result = {"metrics": {"throughput_tok_s": tok_s, "total_tok_s": tok_s},
              "work": {"num_seqs": n, "output_tokens": out, "prompt_tokens": n * per_prompt, "seed": wl["seed"]},
              "timing": {"timed_s": timed, "engine_init_s": 0.0}}
    (run_dir / "worker.json").write_text(json.dumps(result))
    ev("teardown_end")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
