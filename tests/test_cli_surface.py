"""The command surface (harness.cli): at most ten top-level verbs, an example at the end of every
verb's --help, the old verbs still running for one release as aliases that name their new command, and
a side-experiment added as one module plus one registry line (harness.experiments) growing `harness
check` by a subcommand, with its options and example, whose summary the report and the notes pick up."""

from __future__ import annotations

import argparse
import shutil
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import cli, experiments
from harness.core import paths
from harness.core.errors import UserError
from harness.experiments import Ran


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subs[0].choices) if subs else {}


def _every_command() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    out = []
    for name, p in _subparsers(cli.build_parser()).items():
        out.append(((name,), p))
        out += [((name, sub), sp) for sub, sp in _subparsers(p).items()]
    return out


def test_at_most_ten_top_level_verbs():
    verbs = _subparsers(cli.build_parser())
    assert len(verbs) <= 10, sorted(verbs)
    assert {"sweep", "tables", "report", "check", "search"} <= set(verbs)
    assert "export" not in verbs, "tables writes export/; the old verb is only an alias"


@pytest.mark.parametrize("path", [c for c, _ in _every_command()], ids=" ".join)
def test_every_help_ends_with_an_example_of_itself(path):
    p = dict(_every_command())[path]
    last = p.format_help().rstrip().splitlines()
    assert last[-2].strip() == "example:"
    example = last[-1].strip()
    # A group's example runs one of its subcommands; a command's example runs that command.
    assert example.startswith("harness " + " ".join(path)), example


def test_no_option_is_declared_twice_in_one_command():
    for path, p in _every_command():
        flags = [o for a in p._actions for o in a.option_strings]
        assert len(flags) == len(set(flags)), path


# --- the old verbs, kept as aliases ---------------------------------------------------------------

ALIAS_ARGS = {
    "crosscheck": ["cpu-crosscheck", "--repeats", "2"],
    "serve-crosscheck": ["cpu-serve", "--leg", "cpu-0.32.0"],
    "client-overhead": ["/tmp/x", "--requests", "5"],
    "equivalence": ["results/cpu-equivalence"],
    "engine-reuse": ["results/cpu-engine-reuse"],
    "bisect": ["--scenario", "cpu-tiny", "--good", "cpu-0.27.1", "--bad", "cpu-0.32.0"],
    "window": ["transformers", "--probe", "print(1)"],
    "compare-studies": ["results/h200-reference", "results/b200-reference"],
    "profile-diff": ["results/cpu-profile", "--model", "m", "--workload", "w", "--legs", "a", "b"],
}


def test_every_old_verb_has_an_alias():
    old = {"crosscheck", "serve-crosscheck", "client-overhead", "equivalence", "engine-reuse", "bisect", "window",
           "compare-studies", "profile-diff", "export"}
    assert set(cli.ALIASES) == old
    assert set(ALIAS_ARGS) == old - {"export"}


@pytest.mark.parametrize("old", sorted(ALIAS_ARGS))
def test_an_old_verb_names_its_new_command_and_runs_it_with_the_same_arguments(old, capsys):
    """The alias parses into exactly what the new command parses into, the function it runs included."""
    new = cli.ALIASES[old]
    via_alias = cli._parse([old, *ALIAS_ARGS[old]])
    err = capsys.readouterr().err
    assert err == f"note: 'harness {old}' is now 'harness {' '.join(new)}'\n"
    direct = cli._parse([*new, *ALIAS_ARGS[old]])
    assert vars(via_alias) == vars(direct) and via_alias.func is direct.func


def test_an_old_verb_really_runs(capsys):
    """One alias run end to end (a read-only check on a shipped study): the note, then the output."""
    assert cli.main(["engine-reuse", str(paths.RESULTS / "cpu-engine-reuse")]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("note: 'harness engine-reuse' is now 'harness check engine-reuse'\n")
    assert out.strip()


def test_export_alias_still_writes_export_and_refuses_a_file(tmp_path, capsys):
    study = tmp_path / "cpu-tiny"
    shutil.copytree(paths.RESULTS / "cpu-tiny", study, ignore=shutil.ignore_patterns("report", "derived"))
    assert cli.main(["export", str(study)]) == 0
    out, err = capsys.readouterr()
    assert err == "note: 'harness export' is now 'harness tables'\n"
    assert (study / "derived" / "export" / "canonical.csv").is_file() and "canonical.csv" in out
    mine = tmp_path / "thesis.md"
    mine.write_text("mine\n")
    assert cli.main(["export", str(study), "--out", str(mine)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("note:") and err[1].startswith("error:") and "refused" in err[1] and len(err) == 2
    assert mine.read_text() == "mine\n"


# --- a side-experiment added as one module plus one registry line ---------------------------------

@dataclass(frozen=True)
class DummyRecord:
    size: int
    leg: str


def _dummy_module(calls: list) -> types.ModuleType:
    """A whole side-experiment, as a module would define it."""
    m = types.ModuleType("dummy_experiment")

    @dataclass(frozen=True, kw_only=True)
    class Args:
        size: int = 1

        @classmethod
        def add_cli_args(cls, p: argparse.ArgumentParser) -> None:
            p.add_argument("--size", type=int, default=1, help="how big the dummy is")

        @classmethod
        def from_cli_args(cls, a: argparse.Namespace) -> "Args":
            if a.size < 1:
                raise UserError("--size should be at least 1")
            return cls(size=a.size)

    @dataclass(frozen=True)
    class Summary:
        doubled: int

    def run(args: Args) -> Ran:
        calls.append(args)
        return Ran(record=DummyRecord(size=args.size, leg="cpu-0.32.0"), files=(Path("/nowhere/dummy.json"),))

    def study_records(study_dir: Path, legs: set[str], models: set[str]) -> list[DummyRecord]:
        return [DummyRecord(size=21, leg=leg) for leg in sorted(legs)[:1]]

    def quote(records, a: dict[str, str]) -> str:
        return str(records[0].size * int(a.get("times", "1")))

    m.__dict__.update(NAME="dummy", GROUP="check", HELP="a dummy check", SIDE_SECTION=True,
                      EXAMPLE="harness check dummy --size 3", Args=Args, run=run, Summary=Summary,
                      summary=lambda rec: Summary(doubled=2 * rec.size),
                      summary_md=lambda s: f"dummy doubled: {s.doubled}\n",
                      study_records=study_records, quote=quote)
    return m


@pytest.fixture()
def dummy(monkeypatch) -> list:
    calls: list = []
    monkeypatch.setitem(sys.modules, "dummy_experiment", _dummy_module(calls))
    monkeypatch.setitem(experiments.EXPERIMENTS, "dummy", "dummy_experiment")   # the one registry line
    return calls


def test_a_registered_experiment_is_a_check_subcommand_with_its_options_and_example(dummy, capsys):
    checks = _subparsers(_subparsers(cli.build_parser())["check"])
    assert "dummy" in checks
    help_ = checks["dummy"].format_help()
    assert "--size" in help_ and "how big the dummy is" in help_
    assert help_.rstrip().endswith("example:\n  harness check dummy --size 3")
    assert cli.main(["check", "dummy", "--size", "3"]) == 0
    assert [a.size for a in dummy] == [3]
    out, err = capsys.readouterr()
    assert out == "dummy doubled: 6\n" and "dummy: /nowhere/dummy.json" in err
    assert cli.main(["check", "dummy", "--size", "0"]) == 2 and len(dummy) == 1
    assert "search" in _subparsers(cli.build_parser()) and "dummy" not in _subparsers(
        _subparsers(cli.build_parser())["search"])


def test_the_report_and_the_notes_pick_up_a_registered_experiment(dummy, tmp_path):
    from harness.publish.notes import notes_md
    from harness.publish.sections.diagnostics import side_records_md
    from harness.publish.study import load_study

    d = tmp_path / "results" / "cpu-tiny"
    shutil.copytree(paths.RESULTS / "cpu-tiny-serial", d, ignore=shutil.ignore_patterns("report", "notes", "derived"))
    st = load_study(d)
    assert "dummy doubled: 42" in side_records_md(st)
    (d / "notes").mkdir()
    (d / "notes" / "n.md").write_text("---\ntitle: Dummy\nsection: answer\nprovenance: analysis\n---\n"
                                      "It read {{ dummy: times=2, expect=42 }} units.\n", encoding="utf-8")
    assert "It read 42 units." in notes_md(load_study(d), "answer")
    assert not dummy, "the report reads records; it runs nothing"
