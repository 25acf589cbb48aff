"""One run: start vLLM's offline engine, do the workload's work, time it, write what happened.

Usage (by the harness, with the leg's Python): python bench.py SPEC.json
Writes, in the spec's run directory: phases to run.jsonl (appended as they happen, so a crash
leaves the phases it reached) and worker.json with metrics, work and the runtime-stack manifest.
Throughput follows vLLM's own benchmarks/throughput.py (one generate() over all prompts,
ignore_eos, temperature 1.0); latency follows benchmarks/latency.py (batches of batch_size,
warmup iterations, then timed iterations).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The workload plugins and the wire format are shared with the harness (standard library only).
sys.path.insert(1, str(Path(__file__).resolve().parents[3]))
import stack  # noqa: E402

from harness import workloads  # noqa: E402
from harness.measure.worker import kernel_trace as profiling  # noqa: E402
from harness.schema.wire import WorkerResult, WorkerSpec  # noqa: E402
from harness.workloads.base import Pass, Timed  # noqa: E402


def prompt_vocab(model_path: str, tokenizer: str | None) -> tuple[int | None, str]:
    """The id range prompts are drawn from, read from the model's files, never from the leg.

    Ids stay below both the model's vocabulary (config.json) and what the tokenizer file can decode
    (a dummy-weight model's vocabulary can be far larger than a small local tokenizer's, and ids the
    tokenizer cannot decode send vLLM's output processing down a slower path that has nothing to do
    with the engine being measured). Asking the loaded tokenizer instead would let each leg's
    transformers decide, so two legs could draw different prompts from one seed.
    """
    sizes, sources = [], []
    cfg = Path(model_path) / "config.json"
    try:
        c = json.loads(cfg.read_text(encoding="utf-8"))
        v = c.get("vocab_size") or (c.get("text_config") or {}).get("vocab_size")
        if isinstance(v, int) and v > 0:
            sizes.append(v)
            sources.append("config.json vocab_size")
    except (OSError, ValueError):
        pass
    tok = Path(tokenizer or model_path) / "tokenizer.json"
    try:
        t = json.loads(tok.read_text(encoding="utf-8"))
        ids = [int(i) for i in ((t.get("model") or {}).get("vocab") or {}).values()]
        ids += [int(a["id"]) for a in t.get("added_tokens") or [] if "id" in a]
        if ids:
            sizes.append(max(ids) + 1)
            sources.append("tokenizer.json ids")
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass
    return (min(sizes), " and ".join(sources)) if sizes else (None, "")


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


def _log_offset() -> int | None:
    # The run's log is this process's stdout (a regular file the harness opened for appending, shared
    # with vLLM's engine processes): its size now is where what follows begins.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        return os.fstat(1).st_size
    except (OSError, ValueError):
        return None


def _refuse(wl: dict, modality, model_path: str) -> None:
    if not getattr(modality, "SUPPORTED", True):
        # Measuring a text prompt under an image/video/audio workload's name would be a wrong number.
        raise NotImplementedError(f"workload {wl['name']!r} has modality {wl['modality']!r}: this worker builds "
                                  "text prompts only")
    # A modality that needs something the leg lacks (a processor's package) fails here, before the
    # engine starts, with that as the root cause.
    if hasattr(modality, "preflight"):
        modality.preflight(wl, {"model_path": model_path})


def _reset_prefix_cache(llm) -> None:
    # So that no pass and no workload is served from what an earlier one left in the cache.
    reset = getattr(llm, "reset_prefix_cache", None)
    if reset is not None:
        reset()


def start_engine(spec: WorkerSpec, gev: Events, items: list[dict], *, extra_args: dict | None = None):
    """The stack captured (manifest.json in every item's run folder), then vLLM's engine started;
    returns (llm, ctx, init_s). Shared by the one-shot mode below and the command mode (commands.py)."""
    group_dir = Path(spec.run_dir)
    first = items[0]["workload"]
    _refuse(first, workloads.modality(first.get("modality", "text")), spec.model_path)
    manifest = stack.capture(import_torch=True)
    # Written before vLLM is imported, so a run that dies at import still says what stack it had.
    for item in items:
        (Path(item["run_dir"]) / "manifest.json").write_text(json.dumps(manifest, indent=2))
    from vllm import LLM

    gev("env_ready", vllm=manifest.get("vllm"), torch=manifest.get("torch"))
    kwargs = dict(spec.engine_args) | (extra_args or {})
    kwargs.setdefault("seed", first["seed"])
    kwargs["tensor_parallel_size"] = spec.tp
    if spec.dtype and spec.dtype != "auto":
        kwargs["dtype"] = spec.dtype
    if spec.tokenizer:
        kwargs["tokenizer"] = spec.tokenizer
    # The engine's request stats give each request's time to first token and decode time (requests.json);
    # offline LLM turns them off unless asked.
    kwargs.setdefault("disable_log_stats", False)
    prof_settings = profiling.settings_from_env()
    profiler = None
    if prof_settings is not None:
        kwargs |= profiling.engine_kwargs(prof_settings, group_dir / profiling.TRACE_DIR)
        profiler = profiling.Profiler(prof_settings, group_dir / profiling.TRACE_DIR)
    gev("engine_init_start", engine_args=kwargs)
    t0 = time.perf_counter()
    llm = LLM(model=spec.model_path, **kwargs)
    init_s = time.perf_counter() - t0
    gev("engine_init_end", seconds=init_s)
    vocab, vocab_source = prompt_vocab(spec.model_path, spec.tokenizer)
    if vocab is None:
        # No model files on disk (a hub id): the model's own vocabulary, which its revision fixes.
        vocab, vocab_source = llm.llm_engine.model_config.get_vocab_size(), "engine model config"
    gev("prompt_vocab", size=vocab, source=vocab_source)
    ctx = {"vocab": vocab, "model_path": spec.model_path, "tokenizer_path": spec.tokenizer, "engine_args": kwargs,
           "profiler": profiler}
    return llm, ctx, init_s


def main(spec_path: str) -> int:
    """One engine for every workload in the spec, in order (one workload: the engine-per-run mode)."""
    spec = WorkerSpec.read(spec_path)
    group_dir = Path(spec.run_dir)
    gev = Events(group_dir / "run.jsonl")
    items = spec.runs or [{"run_dir": spec.run_dir, "workload": spec.workload}]
    if os.getpgrp() == os.getpid():  # only as a group leader: never kill a caller's group
        die_with_group()
    gev("worker_start", python=sys.executable, workloads=len(items))
    llm, ctx, init_s = start_engine(spec, gev, items)
    for position, item in enumerate(items, 1):
        run_dir = Path(item["run_dir"])
        ev = gev if run_dir == group_dir else Events(run_dir / "run.jsonl")
        gev("workload_start", run_dir=str(run_dir), position=position, log_offset=_log_offset())
        if ev is not gev:
            ev("workload_start", position=position, engine_init_s=init_s)
        measure_one(llm, item["workload"], run_dir, ev, ctx, init_s=init_s if position == 1 else 0.0)
        gev("workload_end", run_dir=str(run_dir), position=position, log_offset=_log_offset())
    gev("teardown_start")
    del llm
    gev("teardown_end")
    return 0


class Prepared:
    """A workload made ready on an engine: its kind, modality, sampling parameters and prompt groups
    (built once; every pass, in either mode, runs exactly these)."""

    def __init__(self, wl: dict, ctx: dict):
        from vllm import SamplingParams

        self.wl, self.ctx = wl, ctx
        self.kind, self.modality = workloads.kind(wl["kind"]), workloads.modality(wl.get("modality", "text"))
        _refuse(wl, self.modality, ctx["model_path"])
        sampling = {"n": 1, "temperature": 1.0, "top_p": 1.0, "ignore_eos": True, "max_tokens": wl["output_len"]}
        if hasattr(self.kind, "sampling"):  # a kind that decodes otherwise (greedy, log-probabilities) says how
            sampling = self.kind.sampling(wl)
        self.sp = SamplingParams(**sampling)
        self.groups = self.kind.prompt_groups(wl, self.build)
        self.all_prompts = [p for g in self.groups for p in g]

    def build(self, n: int, seed: int) -> list:
        return self.modality.build(n, seed, self.wl, self.ctx)

    def warmup(self, llm, ev: Events) -> float:
        """The kind's warm-up iterations, outside every timed region; returns their seconds."""
        ev("warmup_start", iterations=self.wl["warmup_iterations"])
        t0 = time.perf_counter()
        warm = self.kind.warmup_prompts(self.wl, self.build)
        for _ in range(self.wl["warmup_iterations"]):
            llm.generate(warm, self.sp, use_tqdm=False)
        warm_s = time.perf_counter() - t0
        ev("warmup_end", seconds=warm_s)
        return warm_s

    def timed_pass(self, llm, run_dir: Path, keep: list | None = None) -> Pass:
        """One pass over the prompt groups, each group on its own clock (the prefix cache is reset by
        the caller, outside it); the outputs go to `keep` when given."""
        prof = self.ctx.get("profiler")
        group_s: list[float] = []
        group_out: list[int] = []
        for group in self.groups:
            profiled = prof is not None and prof.wants()
            if profiled and not prof.active:
                prof.start(llm)  # outside the call's own clock, as is the stop below
            t0 = time.perf_counter()
            outs = llm.generate(group, self.sp, use_tqdm=False)
            group_s.append(time.perf_counter() - t0)
            group_out.append(sum(len(o.outputs[0].token_ids) for o in outs))
            if profiled:
                prof.counted(group_s[-1], group_out[-1])
                if not prof.wants():
                    prof.stop(llm, run_dir, "/".join(run_dir.parts[-6:]))
            if keep is not None:
                keep += outs
        return Pass(seconds=sum(group_s), group_seconds=group_s, group_output_tokens=group_out)

    def inputs(self, timed_outs: list) -> dict:
        # The timed outputs go along: a multimodal prompt's token count is what the engine made of it.
        return self.modality.describe(self.all_prompts, self.ctx | {"outputs": timed_outs})

    def timed(self, passes: list[Pass], inputs: dict) -> Timed:
        first = passes[0]
        return Timed(seconds=first.seconds, group_seconds=first.group_seconds,
                     group_output_tokens=first.group_output_tokens, prompt_tokens=inputs["prompt_tokens"],
                     output_tokens=sum(first.group_output_tokens), num_seqs=len(self.all_prompts), passes=passes)

    def write_result(self, run_dir: Path, ev: Events, passes: list[Pass], timed_outs: list, *, timing: dict) -> None:
        """worker.json (metrics over every pass, the work, the clocks) and requests.json (the first pass's)."""
        split = profiling.write_requests(run_dir, timed_outs,
                                         stats_on=not self.ctx["engine_args"].get("disable_log_stats"))
        if split:
            ev("phases", **{k: v for k, v in split.items() if k != "source"})
        inputs = self.inputs(timed_outs)
        timed = self.timed(passes, inputs)
        work = {"num_seqs": len(self.all_prompts), "prompt_tokens": inputs["prompt_tokens"],
                "output_tokens": timed.output_tokens, "prompts_sha256": inputs["prompts_sha256"],
                "seed": self.wl["seed"],
                **{k: v for k, v in inputs.items() if k not in ("prompt_tokens", "prompts_sha256")}}
        if hasattr(self.kind, "collect"):  # what a kind keeps of the outputs themselves (files in run_dir)
            work["outputs"] = self.kind.collect(timed_outs, self.wl, run_dir, self.ctx)
        if len(passes) > 1:
            work["passes"] = len(passes)
        WorkerResult(metrics=self.kind.metrics(timed), work=work, timing=timing).write(run_dir)


def measure_one(llm, wl: dict, run_dir: Path, ev: Events, ctx: dict, *, init_s: float) -> None:
    """Warm up, then the timed region: the kind's prompt groups, pass after pass over the same
    prompts until `min_passes` and `min_timed_s` are both reached (one pass by default)."""
    prep = Prepared(wl, ctx)
    _reset_prefix_cache(llm)
    warm_s = prep.warmup(llm, ev)
    prof = ctx.get("profiler")
    if prof is not None:
        prof.reset()
    min_passes, min_timed_s = int(wl.get("min_passes") or 1), float(wl.get("min_timed_s") or 0.0)
    passes: list[Pass] = []
    timed_outs: list = []
    ev("timed_start")
    t_timed = time.perf_counter()
    while len(passes) < min_passes or time.perf_counter() - t_timed < min_timed_s:
        if passes:
            _reset_prefix_cache(llm)  # outside the pass's own clock
        passes.append(prep.timed_pass(llm, run_dir, keep=None if passes else timed_outs))
    if prof is not None and prof.active:  # fewer timed calls than the profile asked for
        prof.stop(llm, run_dir, "/".join(run_dir.parts[-6:]))
    timed_s = time.perf_counter() - t_timed
    ev("timed_end", seconds=timed_s, passes=len(passes))
    # Every pass's own clock goes along, one pass too: the metrics are computed from these, and
    # timed_s also holds the bookkeeping between calls, so it cannot be used to re-derive them.
    timing = {"engine_init_s": init_s, "warmup_s": warm_s, "timed_s": timed_s, "passes_s": [x.seconds for x in passes]}
    prep.write_result(run_dir, ev, passes, timed_outs, timing=timing)


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
