"""The command surface (harness.cli): at most ten top-level verbs, an example at the end of every
verb's --help, the old verbs refused in one line that names their new command (the table of
docs/cli-renames.md), and a side-experiment added as one module plus one registry line
(harness.experiments) growing `harness check` by a subcommand, with its options and example, whose
summary the report and the notes pick up."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
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
    assert not set(verbs) & set(cli.RENAMED), "an old name is refused, not a verb"


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


# --- the old verbs, refused with their new name ----------------------------------------------------

RENAMES_DOC = paths.PROJ_ROOT / "docs" / "cli-renames.md"


def test_the_renames_table_in_docs_is_the_one_the_cli_refuses_with():
    rows = re.findall(r"^\| `harness ([a-z-]+)` \| `harness ([a-z -]+)` \|$", RENAMES_DOC.read_text(), re.M)
    assert dict(rows) == cli.RENAMED
    assert "docs/cli-renames.md" in (paths.PROJ_ROOT / "README.md").read_text()


@pytest.mark.parametrize("old", sorted(cli.RENAMED))
def test_an_old_verb_fails_in_one_line_naming_its_new_command(old, capsys):
    assert cli.main([old, "results/cpu-tiny"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"harness: error: '{old}' is now '{cli.RENAMED[old]}' (docs/cli-renames.md)\n"


@pytest.mark.parametrize("new", sorted(set(cli.RENAMED.values())))
def test_every_new_name_is_a_command(new):
    path = tuple(new.split())
    assert path in dict(_every_command()), new


def test_an_old_verb_fails_from_the_command_line_without_a_traceback():
    """The installed entry point (python -m harness): exit 2, one stderr line, as any unknown verb."""
    got = subprocess.run([sys.executable, "-m", "harness", "engine-reuse", str(paths.RESULTS / "cpu-engine-reuse")],
                         capture_output=True, text=True, cwd=paths.PROJ_ROOT, timeout=120)
    assert got.returncode == 2 and got.stdout == ""
    assert got.stderr == "harness: error: 'engine-reuse' is now 'check engine-reuse' (docs/cli-renames.md)\n"
    unknown = subprocess.run([sys.executable, "-m", "harness", "no-such-verb"], capture_output=True, text=True,
                             cwd=paths.PROJ_ROOT, timeout=120)
    assert unknown.returncode == 2 and "invalid choice: 'no-such-verb'" in unknown.stderr


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
