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
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[3]))
import stack  # noqa: E402
import transport  # noqa: E402
from bench import Events, die_with_group  # noqa: E402

from harness import workloads  # noqa: E402
from harness.schema.wire import WorkerResult  # noqa: E402


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
    from vllm.benchmarks.throughput import add_cli_args
    from vllm.benchmarks.throughput import main as bench_main

    ev("env_ready", vllm=manifest.get("vllm"))
    out_json = run_dir / "vllm_bench.json"
    engine_args = dict(spec["engine_args"])
    engine_args.setdefault("seed", wl["seed"])
    if spec.get("dtype") and spec["dtype"] != "auto":
        engine_args["dtype"] = spec["dtype"]
    if spec.get("tokenizer"):
        engine_args["tokenizer"] = spec["tokenizer"]
    try:
        # Any existing path for datasets that insist on one (random-mm: docs/defects.md); never read.
        dataset = workloads.vllm_dataset_args(wl.get("modality") or "text", wl, str(run_dir))
    except workloads.NotComparable as e:
        raise SystemExit(f"vLLM's throughput benchmark cannot do this workload's work: {e}") from None
    asked = dataset[dataset.index("--dataset-name") + 1]
    argv = ["--model", spec["model_path"], *dataset, "--num-prompts", str(wl["num_prompts"]),
            "--tensor-parallel-size", str(spec["tp"]), "--output-json", str(out_json),
            *_flags(engine_args)]
    parser = _parser()
    add_cli_args(parser)
    # The harness warms the engine before its timed region; where this vLLM's benchmark can do the
    # same, it does, so both time a warm engine (its own default is no warm-up at all).
    if wl.get("warmup_iterations") and any("--num-warmups" in a.option_strings for a in parser._actions):
        argv += ["--num-warmups", str(8 * wl["warmup_iterations"])]
    args = parser.parse_args(argv)
    ev("timed_start", argv=argv)  # vLLM's benchmark times its own region; this brackets the whole call
    t0 = time.perf_counter()
    printed = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, printed)):
        bench_main(args)
    whole_s = time.perf_counter() - t0
    ev("timed_end", seconds=whole_s)
    if args.dataset_name != asked:
        # validate_args rewrites the dataset name in place (random-mm without a path became `random`
        # in 0.24.0-0.32.0): what it timed is not what was asked, so there is no measurement.
        raise SystemExit(f"vLLM's benchmark ran its {args.dataset_name!r} dataset where {asked!r} was asked: "
                         "it timed other work")
    res = json.loads(out_json.read_text())
    elapsed = res["elapsed_time"]
    total = res["total_num_tokens"]
    counted = _counts(printed.getvalue())
    # vLLM's own count from its request outputs (placeholder tokens included with the chat backend);
    # the planned count only where this release prints none.
    out_tokens = counted.get("output", wl["num_prompts"] * wl["output_len"])
    prompt_tokens = counted.get("prompt", total - out_tokens)
    inputs: dict = {"vllm_dataset": asked, "counted_by": "vLLM's printed totals" if counted else "planned"}
    if asked == "random-mm":
        inputs["transport"] = transport.measure(wl, dataset)
    result = {
        "metrics": {"throughput_tok_s": res["tokens_per_second"], "total_tok_s": res["tokens_per_second"],
                    "output_tok_s": out_tokens / elapsed, "requests_per_s": res["requests_per_second"]},
        "work": {"num_seqs": res["num_requests"], "prompt_tokens": prompt_tokens,
                 "output_tokens": out_tokens, "seed": wl["seed"], "inputs": inputs},
        "timing": {"timed_s": elapsed, "engine_init_s": whole_s - elapsed},
    }
    WorkerResult(**result).write(run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
