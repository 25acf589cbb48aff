"""The verbs with subcommands: `check` and `search` (the side-experiments of `harness.experiments`, one
subcommand each, built from its registry, and the read-only checks of a study), and `compare` (two
studies, or two legs' profiles)."""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from types import ModuleType

from harness.cli.verbs import Verb, load, print_problems
from harness.core import flags
from harness.core.errors import UserError


@functools.cache
def experiment_verb(mod: ModuleType) -> Verb:
    """An experiment as a subcommand: its Args declare the options; run, then its summary as text on
    stdout and each file it wrote on stderr. One Verb per module, however often the parser is built."""
    def func(a: argparse.Namespace) -> int:
        ran = mod.run(mod.Args.from_cli_args(a))
        print(mod.summary_md(mod.summary(ran.record)), end="")
        for path in ran.files:
            print(f"{mod.NAME}: {path}", file=sys.stderr)
        return 0
    return Verb(name=mod.NAME, help=mod.HELP, example=mod.EXAMPLE, add_args=mod.Args.add_cli_args, func=func)


# --- checks of a study that measure nothing -------------------------------------------------------

def _equivalence_args(p: argparse.ArgumentParser) -> None:
    flags.study_dir(p)
    p.add_argument("--legs", nargs=2, metavar=("A", "B"),
                   help="the two legs (names or labels), A the reference (default: each pair of consecutive legs)")


def cmd_equivalence(a: argparse.Namespace) -> int:
    from harness.analyze.equivalence import compare_study, equivalence_md

    print(equivalence_md(compare_study(load(a.study_dir), tuple(a.legs) if a.legs else None)), end="")
    return 0


def _engine_reuse_args(p: argparse.ArgumentParser) -> None:
    flags.study_dir(p, "study folder (results/<study>) holding both series")
    p.add_argument("--per-run", default="per-run", metavar="SERIES", help="series measured one engine per run")
    p.add_argument("--per-group", default="per-group", metavar="SERIES", help="series measured one engine per group")


def cmd_engine_reuse(a: argparse.Namespace) -> int:
    from harness.analyze.studies.engine_reuse import reuse_md, reuse_table

    if a.per_run == a.per_group:
        raise UserError(f"{a.study_dir}: --per-run and --per-group name the same series ({a.per_run!r}); a series "
                        f"compared with itself says nothing")
    rows = reuse_table(load(a.study_dir), per_run=a.per_run, per_group=a.per_group)
    if not rows:
        raise UserError(f"{a.study_dir}: no (leg, model, workload) measured in both series "
                        f"{a.per_run!r} and {a.per_group!r}")
    print(reuse_md(rows), end="")
    return 0


EQUIVALENCE = Verb(name="equivalence", help="do two legs' equivalence runs give the same greedy outputs (same "
                                            "answers, numerical drift, different answers)",
                   example="harness check equivalence results/cpu-equivalence", add_args=_equivalence_args,
                   func=cmd_equivalence)
ENGINE_REUSE = Verb(name="engine-reuse", help="does one engine serving a group's workloads change any number: "
                                              "per-group ÷ per-run per (leg, model, workload), with its interval",
                    example="harness check engine-reuse results/cpu-engine-reuse", add_args=_engine_reuse_args,
                    func=cmd_engine_reuse)


# --- compare --------------------------------------------------------------------------------------

def _studies_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("study_a", type=Path)
    p.add_argument("study_b", type=Path)
    p.add_argument("--band", type=float, default=0.05, help="flat band around 1.00x (default 0.05)")
    p.add_argument("--all", action="store_true", help="also list cells only one study has")
    flags.out(p, "write the markdown to this file instead of stdout")
    flags.replace(p, "file")


def cmd_compare_studies(a: argparse.Namespace) -> int:
    from harness.analyze.compare_studies import compare_studies
    from harness.publish.compare_studies import compare_studies_md
    from harness.schema.outdir import check_file, output_file

    if a.out is not None:
        check_file(a.out, verb="compare-studies", replace=a.replace)   # before the studies are read
    comparison = compare_studies(a.study_a, a.study_b, band=a.band)
    print_problems(comparison.problems)
    md = compare_studies_md(comparison, one_sided=a.all)
    if a.out is not None:
        with output_file(a.out, verb="compare-studies", replace=a.replace) as tmp:
            tmp.write_text(md, encoding="utf-8")
        print(f"compare-studies: {a.out}")
    else:
        print(md, end="")
    return 0


def _profiles_args(p: argparse.ArgumentParser) -> None:
    flags.study_dir(p)
    p.add_argument("--model", required=True)
    p.add_argument("--workload", required=True)
    p.add_argument("--legs", nargs=2, required=True, metavar=("OLD", "NEW"))
    p.add_argument("--arm", help="only this arm's profiled runs (default: every profiled run)")
    flags.out(p, "markdown file (default: STUDY/derived/profile-diff/...)")
    flags.replace(p, "file")


def cmd_profile_diff(a: argparse.Namespace) -> int:
    from harness.analyze.profile import profile_diff

    if a.legs[0] == a.legs[1]:
        raise UserError(f"{a.study_dir}: profile-diff --legs names {a.legs[0]!r} twice; a leg compared with itself "
                        f"says nothing")
    load(a.study_dir)   # each file of the study it cannot use, named on stderr before the diff
    md, path = profile_diff(a.study_dir, model=a.model, workload=a.workload, legs=a.legs, arm=a.arm, out=a.out,
                            replace=a.replace)
    print(md, end="")
    print(f"profile-diff: {path}", file=sys.stderr)
    return 0


STUDIES = Verb(name="studies", help="the same (model, workload, step) of two studies side by side: does it transfer?",
               example="harness compare studies results/h200-reference results/b200-reference",
               add_args=_studies_args, func=cmd_compare_studies)
PROFILES = Verb(name="profiles", help="where the time went: two legs' profiled runs of one (model, workload), per "
                                      "family and operator, per output token, and each one's share of the gap",
                example="harness compare profiles results/cpu-profile --model tiny-llama --workload mixed "
                        "--legs cpu-0.27.1 cpu-0.32.0",
                add_args=_profiles_args, func=cmd_profile_diff)


def groups() -> dict[str, tuple[str, str, list[Verb]]]:
    """name -> (help, example, subcommands), in --help order; check and search from the registry."""
    from harness.experiments import GROUPS, all_experiments

    check = [experiment_verb(m) for m in all_experiments("check")] + [EQUIVALENCE, ENGINE_REUSE]
    search = [experiment_verb(m) for m in all_experiments("search")]
    return {
        "check": (GROUPS["check"], check[0].example, check),
        "search": (GROUPS["search"], search[0].example, search),
        "compare": ("two studies, or two legs' profiles of one (model, workload)", STUDIES.example,
                    [STUDIES, PROFILES]),
    }
