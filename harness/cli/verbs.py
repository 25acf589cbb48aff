"""The verbs that are one command each (sweep, tables, report, publish, explain, legs, tiny-model): for
each, its options (declared once, in one function, shared flags from `harness.core.flags`) and a thin
wrapper over the package's function."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.core import flags
from harness.core.errors import UserError

# `harness sweep`: every planned run has a record, and at least one of them is not ok.
EXIT_RUNS_FAILED = 3


@dataclass(frozen=True, kw_only=True)
class Verb:
    """One command: `add_args` declares its options, `func` runs it; `example` ends its --help."""
    name: str
    help: str
    example: str
    add_args: Callable[[argparse.ArgumentParser], None]
    func: Callable[[argparse.Namespace], int]
    description: Callable[[], str] | None = None   # --help's text above the options, when not `help`


def print_problems(problems) -> None:  # type: ignore[no-untyped-def]
    """One stderr line per file a verb left out or kept (harness.analyze.dataset.Problem)."""
    for p in problems:
        print(f"warning: {p.path.resolve()}: {p.what}", file=sys.stderr)


def load(study_dir: Path):  # type: ignore[no-untyped-def]
    """The study's Dataset, each file it could not use named on stderr (as `tables` does)."""
    from harness.analyze.dataset import load as load_dataset

    ds = load_dataset(study_dir)
    print_problems(ds.problems)
    return ds


def _warn_problems(study_dir: Path, *, strict: bool) -> None:
    """Every file of the study that is not used in full, one stderr line each with its full path
    and the reason; under --strict the first of them is the error (exit 2) and nothing is written."""
    from harness.analyze.dataset import load as load_dataset

    problems = load_dataset(study_dir).problems
    if strict and problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UserError(f"{first.path.resolve()}: {first.what}{more}; --strict: nothing written")
    print_problems(problems)


def _out_folder(a: argparse.Namespace, verb: str, default: str) -> None:
    """Refuse --out (or the study's default folder) before the study is read: schema.outdir's rules."""
    from harness.schema.outdir import check_folder

    if a.out is not None and a.out.is_file() and not a.out.is_symlink():
        raise UserError(f"{a.out}: --out names a file; refused: it must be a folder (or not exist yet)")
    check_folder(a.out or a.study_dir / default, verb=verb, replace=a.replace, default=a.out is None)


# --- sweep ----------------------------------------------------------------------------------------

def _sweep_args(p: argparse.ArgumentParser) -> None:
    from harness.measure.sweep import SweepArgs

    SweepArgs.add_cli_args(p)


def cmd_sweep(a: argparse.Namespace) -> int:
    from harness.analyze.until_decided import until_decided
    from harness.experiments.history import is_history, sweep_history
    from harness.measure.sweep import SweepArgs, sweep

    args = SweepArgs.from_cli_args(a)
    # A scenario with a `history:` key plans one leg per release (docs/history.md).
    res = (sweep_history if is_history(args.scenario) else sweep)(args, stop_rule=until_decided)
    if res.invocation_id != "dry-run":
        from harness.analyze.failure import record_class

        # The record keeps the root-cause class measured runs were attributed to (measure cannot attribute).
        for r in res.records:
            if r.status != "ok" and r.invocation_id == res.invocation_id:
                record_class(res.study_dir / "runs" / r.run_id)
        failed = sum(r.status != "ok" for r in res.records)
        print(f"{len(res.records)} runs ({res.measured} measured, {res.reused} reused, {failed} not ok); "
              f"records under {res.study_dir / 'runs'}; sweep index {res.index_path}")
        # Failed runs are recorded, not errors of the sweep; a script still needs to tell them apart.
        return EXIT_RUNS_FAILED if failed else 0
    return 0


# --- tables, report, publish ----------------------------------------------------------------------

def _tables_args(p: argparse.ArgumentParser) -> None:
    flags.study_dir(p)
    flags.out(p, "output folder (default: STUDY_DIR/derived)")
    flags.replace(p)
    flags.allow_reused(p)
    flags.strict(p)
    flags.allow_different_work(p)


def cmd_tables(a: argparse.Namespace) -> int:
    from harness.analyze.derive import write_study

    _out_folder(a, "tables", "derived")
    _warn_problems(a.study_dir, strict=a.strict)
    canon, written = write_study(a.study_dir, a.out, allow_reused=a.allow_reused,
                                 allow_different_work=a.allow_different_work, replace=a.replace)
    problems = canon.dataset.problems
    print(f"{len(canon.dataset)} records, {len(canon.cells)} canonical cells, {len(canon.exclusions)} runs "
          f"excluded, {len(problems)} files not usable; {len(written)} files under "
          f"{a.out or a.study_dir / 'derived'}")
    # Every step cell's verdict as the tables just written hold it: the study's one verdict object.
    from harness.analyze.verdicts import lines, study_verdicts

    for line in lines(study_verdicts(canon)):
        print(line)
    return 0


def _report_args(p: argparse.ArgumentParser) -> None:
    flags.study_dir(p)
    flags.out(p, "output folder (default: STUDY_DIR/report)")
    flags.replace(p)
    p.add_argument("--strict-claim", dest="strict_claims", action="append", default=[], metavar="ID",
                   help="fail the render if this claim (an id, fnmatch pattern, or 'all') does not hold "
                        "(repeatable; default: study.yaml's report.strict_claims)")
    flags.strict(p)
    flags.allow_reused(p)
    flags.allow_different_work(p, "the report's tables list")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quarto", dest="quarto", action="store_true", default=None, help="require quarto")
    g.add_argument("--no-quarto", dest="quarto", action="store_false",
                   help="use the Jupyter kernel even if quarto is installed")


def cmd_report(a: argparse.Namespace) -> int:
    from harness.publish.render import main_summary, render

    _out_folder(a, "report", "report")
    _warn_problems(a.study_dir, strict=a.strict)
    strict = a.strict_claims if a.strict_claims else None
    print(main_summary(render(a.study_dir, a.out, strict_claims=strict, quarto=a.quarto,
                              allow_reused=a.allow_reused, allow_different_work=a.allow_different_work,
                              replace=a.replace)))
    return 0


def _publish_args(p: argparse.ArgumentParser) -> None:
    flags.study_dir(p, "a rendered study folder (results/<study>)")
    p.add_argument("dest", type=Path, help="the bundle's folder")
    flags.replace(p)


def cmd_publish(a: argparse.Namespace) -> int:
    from harness.publish.bundle import bundle_summary, publish

    print(bundle_summary(publish(a.study_dir, a.dest, replace=a.replace)))
    return 0


# --- explain, legs, tiny-model --------------------------------------------------------------------

def _explain_args(p: argparse.ArgumentParser) -> None:
    from harness.core.logs import READ_BOUND

    p.add_argument("logs", nargs="+", metavar="LOG",
                   help=f"a run folder, its results.json, a log file, or - for an excerpt on stdin ({READ_BOUND})")
    p.add_argument("--json", action="store_true", help="one JSON object per log, with its class")


def cmd_explain(a: argparse.Namespace) -> int:
    from harness.analyze.failure import explain_logs

    text, unusable = explain_logs(a.logs, as_json=a.json)
    print(text, end="")
    # One line per argument that is not a log to explain (empty, binary, missing); an error of the
    # command only when none was.
    for line in unusable:
        print(f"error: {line}", file=sys.stderr)
    return 2 if unusable and not text else 0


def _legs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("legs", nargs="*", help="leg names (default: every leg)")
    p.add_argument("--build", action="store_true", help="build each resolved leg's env (reused when it exists)")
    flags.offline(p)


def cmd_legs(a: argparse.Namespace) -> int:
    from harness.measure import leg

    # Every leg is listed, resolved or not: a leg that cannot be had on this machine (a GPU leg on a
    # CPU host) is listed with the reason and is an error only when the user named it. A bad leg file
    # is reported (one line naming the file) and the rest go on.
    bad = 0
    for st in leg.survey(a.legs or leg.known_legs(), offline=a.offline):
        try:
            if st.error is not None:
                raise st.error
            if st.env is None:
                if a.legs:
                    raise UserError(f"{leg.leg_path(st.name)}: leg {st.name}: cannot be resolved here: {st.unresolved}")
                print(f"{st.name}: described only (not buildable here)" if st.described_only
                      else f"{st.name}: unresolved here: {st.unresolved}")
            elif a.build:
                rep = leg.ensure(st.env)
                print(f"{st.name}: {st.env.root} ({'reused' if rep.reused else 'built'} in {rep.seconds:.1f} s)")
            else:
                print(f"{st.name}: compat id {st.env.compat_id} -> {st.env.root}")
        except UserError as e:
            bad += 1
            print(f"error: {e}", file=sys.stderr)
    return 2 if bad else 0


def _tiny_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", choices=("llama", "qwen2-vl", "whisper"), default="llama")
    p.add_argument("--dest", type=Path)
    p.add_argument("--force", "--replace", dest="force", action="store_true",
                   help="rebuild DEST even if complete (only a folder an earlier tiny-model wrote)")


def cmd_tiny_model(a: argparse.Namespace) -> int:
    from harness.measure.tinymm import build_tiny_mm_model
    from harness.measure.tinymodel import build_tiny_model

    print(build_tiny_model(a.dest, force=a.force) if a.family == "llama"
          else build_tiny_mm_model(a.family, a.dest, force=a.force))
    return 0


def _explain_description() -> str:
    from harness.core.logs import READ_BOUND

    return f"Why a vLLM run failed. Bounded: {READ_BOUND}."


SWEEP = Verb(name="sweep", help="measure a scenario, one run at a time (exit 3: finished, some runs not ok)",
             example="harness sweep cpu-tiny --repeats 3", add_args=_sweep_args, func=cmd_sweep)
TABLES = Verb(name="tables", help="CANONICAL.md, MANIFEST.md, tables/, compare/ and export/ (Parquet + CSV + data "
                                  "dictionary) from a study folder",
              example="harness tables results/cpu-tiny", add_args=_tables_args, func=cmd_tables)
REPORT = Verb(name="report", help="REPORT.md, the HTML page and the dataset card (quarto if installed, else "
                                  "index.qmd's cells through a Jupyter kernel)",
              example="harness report results/cpu-tiny --no-quarto", add_args=_report_args, func=cmd_report)
PUBLISH = Verb(name="publish", help="a citable bundle of a rendered study: card, report, records, logs.tar.gz, "
                                    "patches/, compare/, and the command that regenerates it",
               example="harness publish results/cpu-tiny /tmp/cpu-tiny-bundle", add_args=_publish_args,
               func=cmd_publish)
EXPLAIN = Verb(name="explain", help="why a vLLM run failed: root-cause class, signature, evidence line, fix",
               example="harness explain results/cpu-tiny/runs/RUN_ID", add_args=_explain_args, func=cmd_explain,
               description=_explain_description)
LEGS = Verb(name="legs", help="resolve (and with --build, build) leg envs", example="harness legs cpu-0.32.0 --build",
            add_args=_legs_args, func=cmd_legs)
TINY_MODEL = Verb(name="tiny-model", help="build a tiny random-weight model (no hub): Llama, Qwen2-VL-style "
                                          "(image, video) or Whisper-style (audio)",
                  example="harness tiny-model --family qwen2-vl", add_args=_tiny_model_args, func=cmd_tiny_model)
