"""`harness VERB ...`: thin wrappers over the package's functions (scenario → leg → run → record →
table → report). Expected failures print one line and exit 2; a sweep whose runs are all recorded
but not all ok exits 3."""

from __future__ import annotations

import argparse
import errno
import sys

from harness import __version__
from harness.cli.verbs import EXIT_RUNS_FAILED, EXPLAIN, LEGS, PUBLISH, REPORT, SWEEP, TABLES, TINY_MODEL, Verb
from harness.core.errors import UserError

__all__ = ["EXIT_RUNS_FAILED", "RENAMED", "build_parser", "main"]

# The verbs before the command surface was grouped no longer run; for one release an old name is
# refused in one line that names its new command (docs/cli-renames.md holds the same table), where
# argparse alone would print its usage and the list of verbs without saying where the old one went.
RENAMED: dict[str, str] = {
    "crosscheck": "check crosscheck",
    "serve-crosscheck": "check serve",
    "client-overhead": "check client-overhead",
    "equivalence": "check equivalence",
    "engine-reuse": "check engine-reuse",
    "bisect": "search bisect",
    "window": "search window",
    "compare-studies": "compare studies",
    "profile-diff": "compare profiles",
    "export": "tables",
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


_EXPECTED_OS_ERRORS = (PermissionError, FileExistsError, NotADirectoryError, IsADirectoryError, FileNotFoundError)
_EXPECTED_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in RENAMED:
        # The exit status argparse gives any unknown verb (2), with the new name instead of the usage.
        print(f"harness: error: '{argv[0]}' is now '{RENAMED[argv[0]]}' (docs/cli-renames.md)", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
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
