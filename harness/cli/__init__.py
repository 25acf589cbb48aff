"""`harness VERB ...`: thin wrappers over the package's functions (scenario → leg → run → record →
table → report). Expected failures print one line and exit 2; a sweep whose runs are all recorded
but not all ok exits 3."""

from __future__ import annotations

import argparse
import errno
import sys

from harness import __version__
from harness.cli.verbs import (EXIT_RUNS_FAILED, EXPLAIN, LEGS, PUBLISH, REPORT, SWEEP, TABLES, TINY_MODEL, Verb,
                               cmd_export, export_args)
from harness.core.errors import UserError

__all__ = ["ALIASES", "EXIT_RUNS_FAILED", "build_parser", "main"]

# The verbs before the command surface was grouped, kept for one release: each prints one line naming
# its new command on stderr, then runs it with the same arguments.
ALIASES: dict[str, tuple[str, ...]] = {
    "crosscheck": ("check", "crosscheck"),
    "serve-crosscheck": ("check", "serve"),
    "client-overhead": ("check", "client-overhead"),
    "equivalence": ("check", "equivalence"),
    "engine-reuse": ("check", "engine-reuse"),
    "bisect": ("search", "bisect"),
    "window": ("search", "window"),
    "compare-studies": ("compare", "studies"),
    "profile-diff": ("compare", "profiles"),
    "export": ("tables",),
}


class _Help(argparse.RawDescriptionHelpFormatter):
    """Keeps the example at the end of --help on its own line, as written."""


def _add(sub: argparse._SubParsersAction, v: Verb) -> None:
    s = sub.add_parser(v.name, help=v.help, description=v.description() if v.description else v.help,
                       epilog=f"example:\n  {v.example}", formatter_class=_Help)
    v.add_args(s)
    s.set_defaults(func=v.func)


def build_parser() -> argparse.ArgumentParser:
    from harness.cli.groups import groups

    p = argparse.ArgumentParser(prog="harness", description=__doc__, epilog=f"example:\n  {SWEEP.example}",
                                formatter_class=_Help)
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="verb", required=True)
    for v in (SWEEP, TABLES, REPORT, PUBLISH):
        _add(sub, v)
    for name, (help_, example, verbs) in groups().items():
        g = sub.add_parser(name, help=help_, description=help_, epilog=f"example:\n  {example}",
                           formatter_class=_Help)
        gsub = g.add_subparsers(dest="subverb", required=True)
        for v in verbs:
            _add(gsub, v)
    for v in (EXPLAIN, LEGS, TINY_MODEL):
        _add(sub, v)
    return p


def _export_parser() -> argparse.ArgumentParser:
    """`harness export`: its own options for this release (`tables` writes derived/export/ itself)."""
    p = argparse.ArgumentParser(prog="harness export", description="the canonical runs as Parquet + CSV + data "
                                "dictionary (now written by `harness tables` under derived/export/)",
                                epilog="example:\n  harness tables results/cpu-tiny", formatter_class=_Help)
    export_args(p)
    p.set_defaults(func=cmd_export)
    return p


def _parse(argv: list[str]) -> argparse.Namespace:
    if argv and argv[0] in ALIASES:
        new = ALIASES[argv[0]]
        print(f"note: 'harness {argv[0]}' is now 'harness {' '.join(new)}'", file=sys.stderr)
        if argv[0] == "export":
            # Not the same arguments as `tables` (--out is the export folder itself): the old verb runs.
            return _export_parser().parse_args(argv[1:])
        argv = [*new, *argv[1:]]
    return build_parser().parse_args(argv)


_EXPECTED_OS_ERRORS = (PermissionError, FileExistsError, NotADirectoryError, IsADirectoryError, FileNotFoundError)
_EXPECTED_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG}


def main(argv: list[str] | None = None) -> int:
    args = _parse(list(sys.argv[1:] if argv is None else argv))
    try:
        return args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        # The file system said no (permissions, a file where a folder belongs, a full disk): an
        # expected failure, one line naming the file, not a traceback.
        if not isinstance(e, _EXPECTED_OS_ERRORS) and e.errno not in _EXPECTED_ERRNOS:
            raise
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
