"""`harness VERB ...`: thin wrappers over the package's functions (scenario → leg → run → record →
table → report). Expected failures print one line and exit 2."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import __version__, paths
from harness.errors import UserError


def cmd_sweep(a: argparse.Namespace) -> int:
    from harness.sweep import SweepArgs, sweep

    res = sweep(SweepArgs.from_cli_args(a))
    if res.invocation_id != "dry-run":
        failed = sum(r.status != "ok" for r in res.records)
        print(f"{len(res.records)} runs ({res.measured} measured, {res.reused} reused, {failed} not ok); "
              f"records under {res.study_dir / 'runs'}; sweep index {res.index_path}")
    return 0


def cmd_tiny_model(a: argparse.Namespace) -> int:
    from harness.tinymodel import build_tiny_model

    print(build_tiny_model(a.dest, force=a.force))
    return 0


def cmd_legs(a: argparse.Namespace) -> int:
    from harness import leg

    for name in a.legs or leg.known_legs():
        spec = leg.load_leg(name)
        if not spec.buildable:
            print(f"{name}: described only (not buildable here)")
            continue
        env = leg.resolve(spec, offline=a.offline)
        if a.build:
            rep = leg.ensure(env)
            print(f"{name}: {env.root} ({'reused' if rep.reused else 'built'} in {rep.seconds:.1f} s)")
        else:
            print(f"{name}: compat id {env.compat_id} -> {env.root}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from harness.sweep import SweepArgs

    p = argparse.ArgumentParser(prog="harness", description=__doc__)
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="verb", required=True)

    s = sub.add_parser("sweep", help="measure a scenario, one run at a time")
    SweepArgs.add_cli_args(s)
    s.set_defaults(func=cmd_sweep)

    s = sub.add_parser("tiny-model", help="build the tiny random-weight Llama (no hub)")
    s.add_argument("--dest", type=Path)
    s.add_argument("--force", action="store_true")
    s.set_defaults(func=cmd_tiny_model)

    s = sub.add_parser("legs", help="resolve (and with --build, build) leg envs")
    s.add_argument("legs", nargs="*")
    s.add_argument("--build", action="store_true")
    s.add_argument("--offline", action="store_true")
    s.set_defaults(func=cmd_legs)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
