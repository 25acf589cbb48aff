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


# --- what measures: a scenario and where its records go, leg envs, the package index ---------------

def scenario_study(p: argparse.ArgumentParser) -> None:
    """SCENARIO, --results and --study: the study folder a measuring verb writes its runs into."""
    from harness.core import paths

    p.add_argument("scenario", help="scenario name (scenarios/NAME.yaml) or path")
    p.add_argument("--results", type=Path, default=paths.RESULTS, help="results root (default: results/)")
    p.add_argument("--study", help="study folder under the results root (default: the scenario name)")


def offline(p: argparse.ArgumentParser) -> None:
    p.add_argument("--offline", action="store_true", help="resolve leg envs from uv's cache only")


def allow_dirty(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-dirty", action="store_true", help="measure despite guard findings (recorded)")


def release_index(p: argparse.ArgumentParser) -> None:
    """Where a search lists a package's releases from."""
    p.add_argument("--index-url", dest="index", help="package index to list releases from")
    p.add_argument("--pre", dest="include_pre", action="store_true", help="include pre-releases")


def lock_wait(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lock-wait", dest="lock_wait_s", type=float, default=3600,
                   help="seconds to wait for another sweep's node lock (default 3600)")
