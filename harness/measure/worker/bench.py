"""One run: start vLLM's offline engine, do the workload's work, time it, write what happened.

Usage (by the harness, with the leg's Python): python bench.py SPEC.json
Writes, in the spec's run directory: phases to run.jsonl (appended as they happen, so a crash
leaves the phases it reached) and worker.json with metrics, work and the runtime-stack manifest.
Throughput follows vLLM's own benchmarks/throughput.py (one generate() over all prompts,
ignore_eos, temperature 1.0); latency follows benchmarks/latency.py (batches of batch_size,
warmup iterations, then timed iterations).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stack  # noqa: E402


def die_with_group() -> None:
    """Take vLLM's engine processes along if this worker is told to stop.

    The harness starts the worker as the leader of its own process group, with a parent-death
    signal of SIGTERM: if the sweep dies (even by kill -9) or times the run out, the worker kills the
    whole group, EngineCore included, which a parent-death signal alone would not reach. A thread
    also watches for the parent's disappearance, in case vLLM replaces the signal handler.
    """
    import signal
    import threading

    def kill_group(*_: object) -> None:
        os.killpg(os.getpgrp(), signal.SIGKILL)

    signal.signal(signal.SIGTERM, kill_group)
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        kill_group()

    threading.Thread(target=watch, daemon=True, name="harness-parent-watch").start()


class Events:
    def __init__(self, path: Path):
        self.path = path

    def __call__(self, phase: str, **fields) -> None:
        rec = {"t": time.time(), "phase": phase, "pid": os.getpid(), **fields}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())


def make_prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """Random token ids, independent of any tokenizer: identical work on every leg."""
    rng = random.Random(seed)
    lo, hi = min(10, vocab // 4), vocab - 1
    return [[rng.randrange(lo, hi) for _ in range(length)] for _ in range(n)]


def prompts_sha(prompts: list[list[int]]) -> str:
    return hashlib.sha256(json.dumps(prompts).encode()).hexdigest()


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    run_dir = Path(spec["run_dir"])
    ev = Events(run_dir / "run.jsonl")
    wl = spec["workload"]
    if os.getpgrp() == os.getpid():  # only as a group leader: never kill a caller's group
        die_with_group()
    ev("worker_start", python=sys.executable)
    if wl.get("modality", "text") != "text":
        # Measuring a text prompt under an image/video/audio workload's name would be a wrong number.
        raise NotImplementedError(f"workload {wl['name']!r} has modality {wl['modality']!r}: this worker builds "
                                  "text prompts only")
    manifest = stack.capture(import_torch=True)
    # Written before vLLM is imported, so a run that dies at import still says what stack it had.
    (run_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    ev("env_ready", vllm=manifest.get("vllm"), torch=manifest.get("torch"))
    kwargs = dict(spec["engine_args"])
    kwargs.setdefault("seed", wl["seed"])
    kwargs["tensor_parallel_size"] = spec["tp"]
    if spec.get("dtype") and spec["dtype"] != "auto":
        kwargs["dtype"] = spec["dtype"]
    if spec.get("tokenizer"):
        kwargs["tokenizer"] = spec["tokenizer"]
    ev("engine_init_start", engine_args=kwargs)
    t0 = time.perf_counter()
    llm = LLM(model=spec["model_path"], **kwargs)
    init_s = time.perf_counter() - t0
    ev("engine_init_end", seconds=init_s)
    # Prompt ids are drawn from ids the *tokenizer* knows (as vLLM's random dataset does): a dummy-weight
    # model's vocabulary can be far larger than the small local tokenizer's, and ids the tokenizer
    # cannot decode send vLLM's output processing down a slower path that has nothing to do with
    # the engine being measured.
    vocab = llm.llm_engine.model_config.get_vocab_size()
    try:
        vocab = min(vocab, len(llm.get_tokenizer()))
    except Exception:  # noqa: BLE001 - skip_tokenizer_init and friends: the model's vocabulary it is
        pass

    sp = SamplingParams(n=1, temperature=1.0, top_p=1.0, ignore_eos=True, max_tokens=wl["output_len"])
    if wl["kind"] == "throughput":
        groups = [make_prompts(wl["num_prompts"], wl["input_len"], vocab, wl["seed"])]
    else:
        rng_seed = wl["seed"]
        groups = [make_prompts(wl["batch_size"], wl["input_len"], vocab, rng_seed + i)
                  for i in range(wl["iterations"])]
    all_prompts = [p for g in groups for p in g]

    ev("warmup_start", iterations=wl["warmup_iterations"])
    t0 = time.perf_counter()
    warm = make_prompts(min(wl.get("batch_size", 1), 8) if wl["kind"] == "latency" else 8,
                        wl["input_len"], vocab, wl["seed"] + 10_000)
    for _ in range(wl["warmup_iterations"]):
        llm.generate([TokensPrompt(prompt_token_ids=p) for p in warm], sp, use_tqdm=False)
    warm_s = time.perf_counter() - t0
    ev("warmup_end", seconds=warm_s)

    samples: list[float] = []
    out_tokens = 0
    ev("timed_start")
    t_timed = time.perf_counter()
    for group in groups:
        t0 = time.perf_counter()
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in group], sp, use_tqdm=False)
        dt = time.perf_counter() - t0
        n_out = sum(len(o.outputs[0].token_ids) for o in outs)
        out_tokens += n_out
        samples.append(dt * 1000 / n_out)
    timed_s = time.perf_counter() - t_timed
    ev("timed_end", seconds=timed_s)

    prompt_tokens = sum(len(p) for p in all_prompts)
    metrics: dict = {}
    if wl["kind"] == "throughput":
        metrics = {"total_tok_s": (prompt_tokens + out_tokens) / timed_s,
                   "output_tok_s": out_tokens / timed_s,
                   "requests_per_s": len(all_prompts) / timed_s}
        metrics["throughput_tok_s"] = metrics["total_tok_s"]
    else:
        metrics = {"ms_per_token": statistics.median(samples), "samples_ms_per_token": samples}
    result = {
        "metrics": metrics,
        "work": {"num_seqs": len(all_prompts), "prompt_tokens": prompt_tokens,
                 "output_tokens": out_tokens, "prompts_sha256": prompts_sha(all_prompts),
                 "seed": wl["seed"]},
        "timing": {"engine_init_s": init_s, "warmup_s": warm_s, "timed_s": timed_s},
    }
    tmp = run_dir / "worker.json.tmp"
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, run_dir / "worker.json")
    ev("teardown_start")
    del llm
    ev("teardown_end")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1]))
    except BaseException as exc:
        if not isinstance(exc, SystemExit):
            try:
                spec = json.loads(Path(sys.argv[1]).read_text())
                Events(Path(spec["run_dir"]) / "run.jsonl")("error", error=f"{type(exc).__name__}: {exc}"[:2000])
            except Exception:  # noqa: BLE001 - the traceback below is the record of last resort
                pass
        raise
