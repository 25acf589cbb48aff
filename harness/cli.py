"""`harness VERB ...`: thin wrappers over the package's functions (scenario → leg → run → record →
table → report). Expected failures print one line and exit 2; a sweep whose runs are all recorded
but not all ok exits 3."""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path

from harness import __version__
from harness.core.errors import UserError

# `harness sweep`: every planned run has a record, and at least one of them is not ok.
EXIT_RUNS_FAILED = 3


def cmd_sweep(a: argparse.Namespace) -> int:
    from harness.investigate.history import is_history, sweep_history
    from harness.investigate.until_decided import until_decided
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


def cmd_crosscheck(a: argparse.Namespace) -> int:
    from harness.investigate.crosscheck import (crosscheck, crosscheck_md, from_records, tokenization_cost,
                                                tokenization_md)
    from harness.measure.sweep import SweepArgs

    if a.tokenization:
        print(tokenization_md(tokenization_cost(SweepArgs.from_cli_args(a))), end="")
        return 0
    if a.from_records:
        problems: list = []
        summary = from_records(SweepArgs.from_cli_args(a), prefix_caching=a.prefix_caching, problems=problems)
        _print_problems(problems)
        print(crosscheck_md(summary), end="")
        return 0
    print(crosscheck_md(crosscheck(SweepArgs.from_cli_args(a), prefix_caching=a.prefix_caching)), end="")
    return 0


def cmd_serve_crosscheck(a: argparse.Namespace) -> int:
    from harness.investigate.serve_crosscheck import crosscheck_md, serve_crosscheck
    from harness.measure.sweep import SweepArgs

    if a.repeats < 1:
        raise UserError("--repeats should be at least 1")
    if a.retry_failed and not a.resume:
        raise UserError("--retry-failed goes with --resume")
    args = SweepArgs(scenario=a.scenario, results=a.results, study=a.study, legs=tuple(a.legs),
                     models=tuple(a.models), workloads=tuple(a.workloads), repeats=a.repeats,
                     resume=a.resume, retry_failed=a.retry_failed, supersede=a.supersede)
    res = serve_crosscheck(args)
    print(crosscheck_md(res.records), end="")
    for path in [*res.files, res.view]:
        print(f"serve-crosscheck: {path}", file=sys.stderr)
    return 0


def _print_problems(problems) -> None:  # type: ignore[no-untyped-def]
    """One stderr line per file a verb left out or kept (harness.analyze.dataset.Problem)."""
    for p in problems:
        print(f"warning: {p.path.resolve()}: {p.what}", file=sys.stderr)


def _load(study_dir: Path):  # type: ignore[no-untyped-def]
    """The study's Dataset, each file it could not use named on stderr (as `tables` does)."""
    from harness.analyze.dataset import load

    ds = load(study_dir)
    _print_problems(ds.problems)
    return ds


def _warn_problems(study_dir: Path, *, strict: bool) -> None:
    """Every file of the study that is not used in full, one stderr line each with its full path
    and the reason; under --strict the first of them is the error (exit 2) and nothing is written."""
    from harness.analyze.dataset import load

    problems = load(study_dir).problems
    if strict and problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UserError(f"{first.path.resolve()}: {first.what}{more}; --strict: nothing written")
    for p in problems:
        print(f"warning: {p.path.resolve()}: {p.what}", file=sys.stderr)


def _out_folder(a: argparse.Namespace, verb: str, default: str) -> None:
    """Refuse --out (or the study's default folder) before the study is read: schema.outdir's rules."""
    from harness.schema.outdir import check_folder

    if a.out is not None and a.out.is_file() and not a.out.is_symlink():
        raise UserError(f"{a.out}: --out names a file; refused: it must be a folder (or not exist yet)")
    check_folder(a.out or a.study_dir / default, verb=verb, replace=a.replace, default=a.out is None)


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
    return 0


def cmd_equivalence(a: argparse.Namespace) -> int:
    from harness.analyze.equivalence import compare_study, equivalence_md

    print(equivalence_md(compare_study(_load(a.study_dir), tuple(a.legs) if a.legs else None)), end="")
    return 0


def cmd_engine_reuse(a: argparse.Namespace) -> int:
    from harness.investigate.engine_reuse import reuse_md, reuse_table

    if a.per_run == a.per_group:
        raise UserError(f"{a.study_dir}: --per-run and --per-group name the same series ({a.per_run!r}); a series "
                        f"compared with itself says nothing")
    rows = reuse_table(_load(a.study_dir), per_run=a.per_run, per_group=a.per_group)
    if not rows:
        raise UserError(f"{a.study_dir}: no (leg, model, workload) measured in both series "
                        f"{a.per_run!r} and {a.per_group!r}")
    print(reuse_md(rows), end="")
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    from harness.analyze.canonical import canonicalize
    from harness.analyze.dataset import load
    from harness.analyze.export import export_study
    from harness.schema.outdir import check_folder

    out = a.out or a.study_dir / "derived" / "export"
    check_folder(out, verb="export", replace=a.replace, default=a.out is None)  # before the study is read
    for path in export_study(canonicalize(load(a.study_dir), allow_reused=a.allow_reused), out,
                             replace=a.replace, default=a.out is None):
        print(path)
    return 0


def cmd_tiny_model(a: argparse.Namespace) -> int:
    from harness.measure.tinymm import build_tiny_mm_model
    from harness.measure.tinymodel import build_tiny_model

    print(build_tiny_model(a.dest, force=a.force) if a.family == "llama"
          else build_tiny_mm_model(a.family, a.dest, force=a.force))
    return 0


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


def cmd_bisect(a: argparse.Namespace) -> int:
    from harness.investigate.bisect import BisectArgs, bisect, bisect_section_md

    rec, path = bisect(BisectArgs.from_cli_args(a))
    if path is None:
        print(rec.conclusion.text)
        return 0
    print(bisect_section_md(rec))
    print(f"bisect record {path}")
    return 0


def cmd_window(a: argparse.Namespace) -> int:
    from harness.investigate.window import WindowArgs, window, window_section_md

    rec, path = window(WindowArgs(package=a.package, probe=a.probe, leg=a.leg, releases=tuple(a.releases),
                                  limit=a.limit, below=a.below, include_pre=a.include_pre, timeout_s=a.timeout_s,
                                  index=a.index, offline=a.offline, keep_envs=a.keep_envs, results=a.results,
                                  lock_wait_s=a.lock_wait_s))
    print(window_section_md(rec))
    print(f"window record {path}")
    return 0


def cmd_explain(a: argparse.Namespace) -> int:
    from harness.analyze.failure import explain_logs

    text, unusable = explain_logs(a.logs, as_json=a.json)
    print(text, end="")
    # One line per argument that is not a log to explain (empty, binary, missing); an error of the
    # command only when none was.
    for line in unusable:
        print(f"error: {line}", file=sys.stderr)
    return 2 if unusable and not text else 0


def cmd_report(a: argparse.Namespace) -> int:
    from harness.publish.render import main_summary, render

    _out_folder(a, "report", "report")
    _warn_problems(a.study_dir, strict=a.strict)
    strict = a.strict_claims if a.strict_claims else None
    print(main_summary(render(a.study_dir, a.out, strict_claims=strict, quarto=a.quarto,
                              allow_reused=a.allow_reused, allow_different_work=a.allow_different_work,
                              replace=a.replace)))
    return 0


def cmd_compare_studies(a: argparse.Namespace) -> int:
    from harness.publish.compare_studies import compare_studies, compare_studies_md

    from harness.schema.outdir import check_file, output_file

    if a.out is not None:
        check_file(a.out, verb="compare-studies", replace=a.replace)   # before the studies are read
    comparison = compare_studies(a.study_a, a.study_b, band=a.band)
    _print_problems(comparison.problems)
    md = compare_studies_md(comparison, one_sided=a.all)
    if a.out is not None:
        with output_file(a.out, verb="compare-studies", replace=a.replace) as tmp:
            tmp.write_text(md, encoding="utf-8")
        print(f"compare-studies: {a.out}")
    else:
        print(md, end="")
    return 0


def cmd_profile_diff(a: argparse.Namespace) -> int:
    from harness.analyze.profile import profile_diff

    if a.legs[0] == a.legs[1]:
        raise UserError(f"{a.study_dir}: profile-diff --legs names {a.legs[0]!r} twice; a leg compared with itself "
                        f"says nothing")
    _load(a.study_dir)   # each file of the study it cannot use, named on stderr before the diff
    md, path = profile_diff(a.study_dir, model=a.model, workload=a.workload, legs=a.legs, arm=a.arm, out=a.out,
                            replace=a.replace)
    print(md, end="")
    print(f"profile-diff: {path}", file=sys.stderr)
    return 0


def cmd_client_overhead(a: argparse.Namespace) -> int:
    from harness.investigate.client_overhead import MD_NAME, run_and_write

    path = run_and_write(a.out_dir, concurrencies=tuple(a.concurrency), requests=a.requests,
                         output_tokens=a.output_tokens, replace=a.replace)
    print((path.parent / MD_NAME).read_text(encoding="utf-8"), end="")
    return 0


def cmd_publish(a: argparse.Namespace) -> int:
    from harness.publish.bundle import bundle_summary, publish

    print(bundle_summary(publish(a.study_dir, a.dest, replace=a.replace)))
    return 0


def _replace_flag(s: argparse.ArgumentParser, what: str = "folder") -> None:
    s.add_argument("--replace", action="store_true",
                   help=f"replace an existing output {what} that the harness wrote (never anything else)")


def build_parser() -> argparse.ArgumentParser:
    from harness.core import paths
    from harness.measure.sweep import SweepArgs

    p = argparse.ArgumentParser(prog="harness", description=__doc__)
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="verb", required=True)

    s = sub.add_parser("sweep", help="measure a scenario, one run at a time (exit 3: finished, some runs not ok)")
    SweepArgs.add_cli_args(s)
    s.set_defaults(func=cmd_sweep)

    s = sub.add_parser("crosscheck", help="harness vs vLLM's own throughput benchmark, same venv and scenario")
    SweepArgs.add_cli_args(s)
    s.add_argument("--prefix-caching", action="store_true",
                   help="leave prefix caching on (vLLM's random prompts then share prefixes by chance)")
    s.add_argument("--tokenization", action="store_true",
                   help="measure only what vLLM's benchmark times and the harness does not: encoding the "
                        "workload's prompts as text with the leg's tokenizer (no engine)")
    s.add_argument("--from-records", action="store_true",
                   help="measure nothing: summarise the finished records in the study folder (a crosscheck cut "
                        "short), naming each planned repeat without one; needs no leg env")
    s.set_defaults(func=cmd_crosscheck)

    s = sub.add_parser("serve-crosscheck", help="harness serve numbers vs vLLM's own serve benchmark (`vllm bench "
                                                "serve`), the same server and settings, point by point")
    s.add_argument("scenario", help="scenario name (scenarios/NAME.yaml) or path")
    s.add_argument("--results", type=Path, default=paths.RESULTS, help="results root (default: results/)")
    s.add_argument("--study", help="study folder under the results root (default: the scenario name)")
    for name in ("legs", "models", "workloads"):
        s.add_argument(f"--{name[:-1]}", dest=name, action="append", default=[],
                       help=f"only this {name[:-1]} (repeatable; default: every one with a serve workload)")
    s.add_argument("--repeats", type=int, default=1, help="repeats, one server each (default 1)")
    again = s.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="an earlier record of the same settings: keep its repeats, measure only those it lacks")
    again.add_argument("--supersede", action="store_true",
                       help="an earlier record of the same settings: move it to superseded/<invocation>/, measure again")
    s.add_argument("--retry-failed", action="store_true", help="with --resume, measure its failed repeats again")
    s.set_defaults(func=cmd_serve_crosscheck)

    s = sub.add_parser("tables", help="CANONICAL.md, MANIFEST.md, tables/, compare/ and export/ from a study folder")
    s.add_argument("study_dir", type=Path, help="study folder (results/<study>)")
    s.add_argument("--out", type=Path, help="output folder (default: STUDY_DIR/derived)")
    _replace_flag(s)
    s.add_argument("--allow-reused", action="store_true", default=None,
                   help="let runs reused by --resume be canonical (default: as study.yaml declares)")
    s.add_argument("--strict", action="store_true",
                   help="any unusable or excluded record is an error (exit 2), not a warning")
    s.add_argument("--allow-different-work", action="store_true", default=None,
                   help="compare legs whose runs did different work (prompts, token or sequence counts); "
                        "CANONICAL.md lists the differences (default: as study.yaml declares, else refused)")
    s.set_defaults(func=cmd_tables)

    s = sub.add_parser("equivalence", help="do two legs' equivalence runs give the same greedy outputs "
                                           "(same answers, numerical drift, different answers)")
    s.add_argument("study_dir", type=Path, help="study folder (results/<study>)")
    s.add_argument("--legs", nargs=2, metavar=("A", "B"),
                   help="the two legs (names or labels), A the reference (default: each pair of consecutive legs)")
    s.set_defaults(func=cmd_equivalence)

    s = sub.add_parser("engine-reuse", help="does one engine serving a group's workloads change any number: "
                                            "per-group ÷ per-run per (leg, model, workload), with its interval")
    s.add_argument("study_dir", type=Path, help="study folder (results/<study>) holding both series")
    s.add_argument("--per-run", default="per-run", metavar="SERIES", help="series measured one engine per run")
    s.add_argument("--per-group", default="per-group", metavar="SERIES", help="series measured one engine per group")
    s.set_defaults(func=cmd_engine_reuse)

    s = sub.add_parser("export", help="the canonical runs as Parquet + CSV + data dictionary")
    s.add_argument("study_dir", type=Path, help="study folder (results/<study>)")
    s.add_argument("--out", type=Path, help="output folder (default: STUDY_DIR/derived/export)")
    _replace_flag(s)
    s.add_argument("--allow-reused", action="store_true", default=None,
                   help="let runs reused by --resume be canonical (default: as study.yaml declares)")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("report", help="REPORT.md, the HTML page and the dataset card (quarto if installed, "
                                      "else index.qmd's cells through a Jupyter kernel)")
    s.add_argument("study_dir", type=Path, help="study folder (results/<study>)")
    s.add_argument("--out", type=Path, help="output folder (default: STUDY_DIR/report)")
    _replace_flag(s)
    s.add_argument("--strict-claim", dest="strict_claims", action="append", default=[], metavar="ID",
                   help="fail the render if this claim (an id, fnmatch pattern, or 'all') does not hold "
                        "(repeatable; default: study.yaml's report.strict_claims)")
    s.add_argument("--strict", action="store_true",
                   help="any unusable or excluded record is an error (exit 2), not a warning")
    s.add_argument("--allow-reused", action="store_true", default=None,
                   help="let runs reused by --resume be canonical (default: as study.yaml declares)")
    s.add_argument("--allow-different-work", action="store_true", default=None,
                   help="compare legs whose runs did different work; the report's tables list the "
                        "differences (default: as study.yaml declares, else refused)")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--quarto", dest="quarto", action="store_true", default=None, help="require quarto")
    g.add_argument("--no-quarto", dest="quarto", action="store_false",
                   help="use the Jupyter kernel even if quarto is installed")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("compare-studies", help="the same (model, workload, step) of two studies side by side: "
                                               "does it transfer?")
    s.add_argument("study_a", type=Path)
    s.add_argument("study_b", type=Path)
    s.add_argument("--band", type=float, default=0.05, help="flat band around 1.00x (default 0.05)")
    s.add_argument("--all", action="store_true", help="also list cells only one study has")
    s.add_argument("--out", type=Path, help="write the markdown to this file instead of stdout")
    _replace_flag(s, "file")
    s.set_defaults(func=cmd_compare_studies)

    s = sub.add_parser("client-overhead", help="the serving client's own CPU share and highest request rate "
                                               "against a trivial local endpoint (no model)")
    s.add_argument("out_dir", type=Path, help="folder for client-overhead.json / .md")
    _replace_flag(s)
    s.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    s.add_argument("--requests", type=int, default=2000, help="requests per point")
    s.add_argument("--output-tokens", type=int, default=64, help="streamed tokens per request")
    s.set_defaults(func=cmd_client_overhead)

    s = sub.add_parser("publish", help="a citable bundle of a rendered study: card, report, records, logs.tar.gz, "
                                       "patches/, compare/, and the command that regenerates it")
    s.add_argument("study_dir", type=Path)
    s.add_argument("dest", type=Path)
    _replace_flag(s)
    s.set_defaults(func=cmd_publish)

    from harness.core.logs import READ_BOUND as EXPLAIN_BOUND
    s = sub.add_parser("explain", help="why a vLLM run failed: root-cause class, signature, evidence line, fix",
                       description=f"Why a vLLM run failed. Bounded: {EXPLAIN_BOUND}.")
    s.add_argument("logs", nargs="+", metavar="LOG",
                   help=f"a run folder, its results.json, a log file, or - for an excerpt on stdin ({EXPLAIN_BOUND})")
    s.add_argument("--json", action="store_true", help="one JSON object per log, with its class")
    s.set_defaults(func=cmd_explain)

    s = sub.add_parser("tiny-model", help="build a tiny random-weight model (no hub): Llama, "
                       "Qwen2-VL-style (image, video) or Whisper-style (audio)")
    s.add_argument("--family", choices=("llama", "qwen2-vl", "whisper"), default="llama")
    s.add_argument("--dest", type=Path)
    s.add_argument("--force", "--replace", dest="force", action="store_true",
                   help="rebuild DEST even if complete (only a folder an earlier tiny-model wrote)")
    s.set_defaults(func=cmd_tiny_model)

    s = sub.add_parser("legs", help="resolve (and with --build, build) leg envs")
    s.add_argument("legs", nargs="*")
    s.add_argument("--build", action="store_true")
    s.add_argument("--offline", action="store_true")
    s.set_defaults(func=cmd_legs)

    s = sub.add_parser("bisect", help="find the first release between two legs whose metric differs")
    from harness.investigate.bisect import BisectArgs
    BisectArgs.add_cli_args(s)
    s.set_defaults(func=cmd_bisect)

    s = sub.add_parser("window", help="probe releases of a dependency in scratch envs of a leg")
    s.add_argument("package")
    s.add_argument("--probe", required=True,
                   help="Python code run by each scratch env's python; exit 0 means it works "
                        "(HARNESS_TINY_MODEL holds the tiny model's path if the code names it)")
    s.add_argument("--leg", help="leg whose lock and declared range are used (default: the newest buildable)")
    s.add_argument("--release", dest="releases", action="append", default=[], help="test this release (repeatable)")
    s.add_argument("--limit", type=int, default=8, help="releases to test when none are named (default 8)")
    s.add_argument("--below", type=int, default=2, help="releases under the declared range to include (default 2)")
    s.add_argument("--pre", dest="include_pre", action="store_true", help="include pre-releases")
    s.add_argument("--timeout", dest="timeout_s", type=float, default=600, help="probe timeout in seconds")
    s.add_argument("--index-url", dest="index", help="package index to list releases from")
    s.add_argument("--offline", action="store_true", help="resolve from uv's cache only")
    s.add_argument("--keep-envs", action="store_true", help="keep the scratch envs")
    s.add_argument("--lock-wait", dest="lock_wait_s", type=float, default=3600,
                   help="seconds to wait for another sweep's node lock (default 3600)")
    from harness.investigate.window import RESULTS_DIR as WINDOW_DIR
    s.add_argument("--results", type=Path, default=WINDOW_DIR, help="where the record goes")
    s.set_defaults(func=cmd_window)

    s = sub.add_parser("profile-diff", help="where the time went: two legs' profiled runs of one (model, workload), "
                                            "per family and operator, per output token, and each one's share of the gap")
    s.add_argument("study_dir", type=Path)
    s.add_argument("--model", required=True)
    s.add_argument("--workload", required=True)
    s.add_argument("--legs", nargs=2, required=True, metavar=("OLD", "NEW"))
    s.add_argument("--arm", help="only this arm's profiled runs (default: every profiled run)")
    s.add_argument("--out", type=Path, help="markdown file (default: STUDY/derived/profile-diff/...)")
    _replace_flag(s, "file")
    s.set_defaults(func=cmd_profile_diff)
    return p


_EXPECTED_OS_ERRORS = (PermissionError, FileExistsError, NotADirectoryError, IsADirectoryError, FileNotFoundError)
_EXPECTED_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
