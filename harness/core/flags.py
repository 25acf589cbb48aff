"""Command-line flags that several verbs share, each declared once here so that its name, default and
help read the same wherever it appears (`harness tables`, `report`, `check client-overhead`, ...)."""

from __future__ import annotations

import argparse
from pathlib import Path


def study_dir(p: argparse.ArgumentParser, help: str = "study folder (results/<study>)") -> None:
    p.add_argument("study_dir", type=Path, help=help)


def out(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--out", type=Path, help=help)


def replace(p: argparse.ArgumentParser, what: str = "folder") -> None:
    p.add_argument("--replace", action="store_true",
                   help=f"replace an existing output {what} that the harness wrote (never anything else)")


def allow_reused(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-reused", action="store_true", default=None,
                   help="let runs reused by --resume be canonical (default: as study.yaml declares)")


def allow_different_work(p: argparse.ArgumentParser, where: str = "CANONICAL.md lists") -> None:
    p.add_argument("--allow-different-work", action="store_true", default=None,
                   help=f"compare legs whose runs did different work (prompts, token or sequence counts); "
                        f"{where} the differences (default: as study.yaml declares, else refused)")


def strict(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strict", action="store_true",
                   help="any unusable or excluded record is an error (exit 2), not a warning")
