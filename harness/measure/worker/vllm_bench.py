"""vLLM's own throughput benchmark (vllm.benchmarks.throughput), run as a harness run.

Same spec, same files as bench.py, so the harness can set vLLM's number beside its own: same venv,
model, engine arguments, prompt count and lengths (vLLM's random dataset draws its own token ids, so
the prompts differ, the amount of work does not).
Usage (by the harness, with the leg's Python): python vllm_bench.py SPEC.json
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[3]))
import handover  # noqa: E402
import stack  # noqa: E402
import transport  # noqa: E402
from bench import Events, die_with_group  # noqa: E402

from harness import workloads  # noqa: E402
from harness.schema.wire import WorkerResult  # noqa: E402

SCRIPT = Path(__file__).name  # what a command-mode item names as its `worker` (commands.py)


def _flags(engine_args: dict) -> list[str]:
    out: list[str] = []
    for key, value in engine_args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False:
            out.append("--no-" + key.replace("_", "-"))  # vLLM's boolean flags are BooleanOptionalAction
        elif value is None:
            continue
        elif isinstance(value, (dict, list)):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


class _Tee(io.TextIOBase):
    """Standard output that is also kept: vLLM's benchmark prints its token counts, not to its JSON."""

    def __init__(self, *streams: Any) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for s in self.streams:
            s.write(text)
        return len(text)

    def flush(self) -> None:
        for s in self.streams:
            s.flush()


def _counts(printed: str) -> dict[str, int]:
    """"Total num prompt tokens:  N" / "Total num output tokens:  N", as 0.24.0-0.32.0 print them."""
    found = {k: int(v) for k, v in re.findall(r"Total num (prompt|output) tokens:\s+(\d+)", printed)}
    return found


def _parser():
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older vLLM
        from vllm.utils import FlexibleArgumentParser
    return FlexibleArgumentParser()


def bench_args(*, model_path: str, tp: int, engine_args: dict, dtype: str | None, tokenizer: str | None,
               wl: dict, run_dir: Path, out_json: Path):
    """vLLM's benchmark's parsed arguments for this workload's work on this engine, and the dataset
    name asked (validate_args may rewrite it: main() checks)."""
    from vllm.benchmarks.throughput import add_cli_args

    engine_args = dict(engine_args)
    engine_args.setdefault("seed", wl["seed"])
    if dtype and dtype != "auto":
        engine_args["dtype"] = dtype
    if tokenizer:
        engine_args["tokenizer"] = tokenizer
    try:
        # Any existing path for datasets that insist on one (random-mm: docs/defects.md); never read.
        dataset = workloads.vllm_dataset_args(wl.get("modality") or "text", wl, str(run_dir))
    except workloads.NotComparable as e:
        raise SystemExit(f"vLLM's throughput benchmark cannot do this workload's work: {e}") from None
    asked = dataset[dataset.index("--dataset-name") + 1]
    argv = ["--model", model_path, *dataset, "--num-prompts", str(wl["num_prompts"]),
            "--tensor-parallel-size", str(tp), "--output-json", str(out_json), *_flags(engine_args)]
    parser = _parser()
    add_cli_args(parser)
    # The harness warms the engine before its timed region; where this vLLM's benchmark can do the
    # same, it does, so both time a warm engine (its own default is no warm-up at all).
    if wl.get("warmup_iterations") and any("--num-warmups" in a.option_strings for a in parser._actions):
        argv += ["--num-warmups", str(8 * wl["warmup_iterations"])]
    return parser.parse_args(argv), asked, argv, dataset


def run_bench(args, asked: str, wl: dict, out_json: Path) -> dict:
    """vLLM's benchmark main() once; what it timed, counted and printed, or SystemExit when it ran
    other work than asked."""
    from vllm.benchmarks.throughput import main as bench_main

    printed = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, printed)):
        bench_main(args)
    if args.dataset_name != asked:
        # validate_args rewrites the dataset name in place (random-mm without a path became `random`
        # in 0.24.0-0.32.0): what it timed is not what was asked, so there is no measurement.
        raise SystemExit(f"vLLM's benchmark ran its {args.dataset_name!r} dataset where {asked!r} was asked: "
                         "it timed other work")
    res = json.loads(out_json.read_text())
    counted = _counts(printed.getvalue())
    # vLLM's own count from its request outputs (placeholder tokens included with the chat backend);
    # the planned count only where this release prints none.
    out_tokens = counted.get("output", wl["num_prompts"] * wl["output_len"])
    return {"elapsed": res["elapsed_time"], "total": res["total_num_tokens"], "tok_s": res["tokens_per_second"],
            "req_s": res["requests_per_second"], "num_requests": res["num_requests"], "output_tokens": out_tokens,
            "prompt_tokens": counted.get("prompt", res["total_num_tokens"] - out_tokens),
            "counted_by": "vLLM's printed totals" if counted else "planned"}


def result(wl: dict, asked: str, runs: list[dict], dataset: list[str], *, engine_init_s: float,
           lent: bool = False) -> WorkerResult:
    """worker.json of vLLM's side: its figures (the median over its calls where there were several),
    its own token counts, the transport measured apart."""
    first = runs[0]
    inputs: dict = {"vllm_dataset": asked, "counted_by": first["counted_by"]}
    if lent:
        # Every call of vLLM's main() on one resident engine, its engine construction lent that engine.
        inputs["lent_engine"] = True
        differ = sorted({(r["prompt_tokens"], r["output_tokens"]) for r in runs})
        if len(differ) > 1:
            inputs["counts_per_call"] = [list(d) for d in differ]
    if asked == "random-mm":
        inputs["transport"] = transport.measure(wl, dataset)
    elapsed = [r["elapsed"] for r in runs]
    metrics = {"throughput_tok_s": statistics.median(r["tok_s"] for r in runs),
               "total_tok_s": statistics.median(r["tok_s"] for r in runs),
               "output_tok_s": statistics.median(r["output_tokens"] / r["elapsed"] for r in runs),
               "requests_per_s": statistics.median(r["req_s"] for r in runs)}
    work = {"num_seqs": first["num_requests"], "prompt_tokens": first["prompt_tokens"],
            "output_tokens": first["output_tokens"], "seed": wl["seed"], "inputs": inputs}
    if len(runs) > 1:
        work["passes"] = len(runs)
    timing = {"timed_s": sum(elapsed), "engine_init_s": engine_init_s}
    if len(runs) > 1:
        timing["passes_s"] = elapsed
    return WorkerResult(metrics=metrics, work=work, timing=timing)


class Lent:
    """vllm.LLM while vLLM's benchmark runs on a resident engine: building one returns that engine and
    keeps the engine arguments the benchmark asked for, which `mismatch` compares with the engine's."""

    def __init__(self, llm: Any) -> None:
        self.llm, self.asked = llm, {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # LLM(model=..., **engine_args)
        self.asked = dict(kwargs)
        return self.llm

    def from_engine_args(self, engine_args: Any, *args: Any, **kwargs: Any) -> Any:
        import dataclasses

        self.asked = dataclasses.asdict(engine_args)
        return self.llm

    def mismatch(self, model_path: str, resident: dict) -> list[str]:
        """Each setting the resident engine was started with that the benchmark asked otherwise."""
        want = {"model": model_path, **resident}
        out = []
        for key, value in want.items():
            got = self.asked.get(key, "(not asked)")
            same = got == value or (isinstance(value, (int, float)) and not isinstance(value, bool)
                                    and isinstance(got, (int, float)) and float(got) == float(value))
            if not same and key not in ("disable_log_stats",):
                out.append(f"{key}: engine {value!r}, benchmark {got!r}")
        return out


class LentSide:
    """vLLM's side of a same-engine crosscheck (the command mode's item whose worker is this script):
    each pass is one call of vLLM's own benchmark main(), unchanged but for its engine, which is the
    resident one; its warm-ups (--num-warmups) run inside that call, before its own clock."""

    def __init__(self, item: dict, spec: Any, ctx: dict) -> None:
        self.item, self.spec, self.ctx = item, spec, ctx
        self.wl, self.run_dir = item["workload"], Path(item["run_dir"])
        self.ev = Events(self.run_dir / "run.jsonl")
        self.runs: list[dict] = []
        self.asked, self.dataset = "", []

    def warmup(self, llm: Any) -> float:
        return 0.0  # vLLM's benchmark warms up inside each call, outside its timed region

    def one_pass(self, llm: Any, round_: int) -> dict:
        import vllm

        n = len(self.runs) + 1
        out_json = self.run_dir / f"vllm_bench-p{n}.json"
        resident = self.ctx["engine_args"]  # what the engine was started with, the harness's additions included
        # The same flags as the one-shot run's; the lent engine is then checked against them below.
        args, self.asked, argv, self.dataset = bench_args(
            model_path=self.spec.model_path, tp=self.spec.tp, engine_args=self.spec.engine_args,
            dtype=self.spec.dtype, tokenizer=self.spec.tokenizer, wl=self.wl, run_dir=self.run_dir, out_json=out_json)
        lent, real = Lent(llm), vllm.LLM
        vllm.LLM = lent
        self.ev("pass_start", round=round_, n=n, argv=argv)
        started = time.time()
        try:
            with handover.Clock(llm) as clock:
                ran = run_bench(args, self.asked, self.wl, out_json)
        finally:
            vllm.LLM = real
        ended = time.time()
        wrong = lent.mismatch(self.spec.model_path, resident)
        if wrong:
            # Timed on an engine other than the one it asked for: not its measurement.
            raise SystemExit("vLLM's benchmark asked for another engine than the resident one: " + "; ".join(wrong))
        self.ev("pass_end", round=round_, seconds=ran["elapsed"])
        self.runs.append(ran)
        return {"seconds": ran["elapsed"], "started_at": started, "ended_at": ended,
                "output_tokens": ran["output_tokens"], "value": ran["tok_s"],
                # its warm-up calls come first inside main(), its timed call last
                "handover": clock.summary(last_only=True)}

    def finish(self) -> None:
        if self.runs:
            result(self.wl, self.asked, self.runs, self.dataset, engine_init_s=0.0, lent=True).write(self.run_dir)


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    run_dir = Path(spec["run_dir"])
    ev = Events(run_dir / "run.jsonl")
    wl = spec["workload"]
    if os.getpgrp() == os.getpid():
        die_with_group()
    if not workloads.traits_of(wl["kind"]).vllm_throughput_bench:
        raise SystemExit(f"vLLM's throughput benchmark does not measure {wl['kind']} workloads")
    ev("worker_start", python=sys.executable)
    manifest = stack.capture(import_torch=True)
    (run_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    ev("env_ready", vllm=manifest.get("vllm"))
    out_json = run_dir / "vllm_bench.json"
    args, asked, argv, dataset = bench_args(
        model_path=spec["model_path"], tp=spec["tp"], engine_args=spec["engine_args"], dtype=spec.get("dtype"),
        tokenizer=spec.get("tokenizer"), wl=wl, run_dir=run_dir, out_json=out_json)
    ev("timed_start", argv=argv)  # vLLM's benchmark times its own region; this brackets the whole call
    t0 = time.perf_counter()
    ran = run_bench(args, asked, wl, out_json)
    whole_s = time.perf_counter() - t0
    ev("timed_end", seconds=whole_s)
    result(wl, asked, [ran], dataset, engine_init_s=whole_s - ran["elapsed"]).write(run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
