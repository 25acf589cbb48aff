"""Does a vLLM release's engine start and generate on the device machine? One child process per site
folder (`/root/site-<version>`), each on a share of the GPU: the engine with dummy weights,
eager (no compile, no CUDA graphs: the point is that the release's wheels load and its kernels run,
not its speed), sleep mode on; eight greedy requests, a sleep and a wake, eight more. One version after
the other (two engines profiling memory at once can read each other's allocations as their own). One JSON line per
version on stdout: what ran, the seconds each step took, or the error's last lines.

    python3 environment/device/smoke_engine.py MODEL_DIR VERSION...
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

CHILD = r'''
import json, sys, time
t0 = time.monotonic()
import vllm
from vllm import LLM, SamplingParams
t1 = time.monotonic()
llm = LLM(model=sys.argv[1], load_format="dummy", enforce_eager=True, max_model_len=8192,
          gpu_memory_utilization=0.4, enable_sleep_mode=True, mm_processor_cache_gb=0,
          mm_processor_kwargs={"max_pixels": 1003520}, limit_mm_per_prompt={"image": 1, "video": 0})
t2 = time.monotonic()
sp = SamplingParams(max_tokens=16, ignore_eos=True, temperature=0.0)
first = sum(len(o.outputs[0].token_ids) for o in llm.generate(["a b c d"] * 8, sp))
t3 = time.monotonic()
llm.sleep(level=1)
t4 = time.monotonic()
llm.wake_up()
t5 = time.monotonic()
second = sum(len(o.outputs[0].token_ids) for o in llm.generate(["a b c d"] * 8, sp))
print(json.dumps({"vllm": vllm.__version__, "import_s": t1 - t0, "init_s": t2 - t1, "generate_tokens": first,
                  "sleep_s": t4 - t3, "wake_s": t5 - t4, "after_wake_tokens": second}))
'''


def run_one(cmd: list[str], env: dict[str, str], timeout_s: float, log_path: str) -> tuple[int | None, str]:
    """Run `cmd` in a process group of its own, stderr to `log_path`; on timeout end the whole group.
    vLLM's engine core is a child of the child and inherits its stdout: killing the child alone leaves
    the pipe open and the read waits for ever (the first smoke lease lost its second release so)."""
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, _ = p.communicate()
            log.write(f"\nsmoke: stopped after {timeout_s:g} s\n")
    return p.returncode, out or ""


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: smoke_engine.py MODEL_DIR VERSION...", file=sys.stderr)
        return 2
    model, versions = argv[0], argv[1:]
    env = {**os.environ, "VLLM_USE_FLASHINFER_SAMPLER": "0", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    rc = 0
    for v in versions:
        t0 = time.monotonic()
        code, out = run_one([sys.executable, "-c", CHILD, model], {**env, "PYTHONPATH": f"/root/site-{v}"},
                            float(os.environ.get("SMOKE_TIMEOUT_S", "120")), f"smoke-{v}.log")
        line = next((x for x in reversed(out.splitlines()) if x.startswith("{")), None)
        res = json.loads(line) if line else {}
        if not line:
            rc = 1
            with open(f"smoke-{v}.log") as f:
                res = {"error": f.read()[-1500:]}
        print(json.dumps({"version": v, "rc": code, "wall_s": round(time.monotonic() - t0, 1), **res}), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
