"""No verb deletes or replaces anything it did not create (issue 31, item 1; harness.schema.outdir).

Every writing verb pointed at a place it must not touch: an existing folder of someone else's files,
the study's parent, the study itself, a sibling study, a symlink, `/`, the user's home, a marked
folder without --replace. Each case: exit 2, one stderr line naming the path, no traceback, and the
tree unchanged. Then what may happen: --replace on the harness's own folder, the default folders
rewritten, a verb that fails half-way leaving no temporary folder and the old output intact.
Destructive cases run on copies of shipped studies (results/cpu-tiny, cpu-profile) in tmp_path.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness import cli
from harness.core import paths
from harness.core.errors import UserError
from harness.schema import output_marker
from harness.schema.outdir import FOLDER_MARKER, check_folder, output_dir, output_file
from tests.test_bad_input import harness, one_line_error, snapshot

TINY = paths.RESULTS / "cpu-tiny-serial"
PROFILE = paths.RESULTS / "cpu-profile"
PROFILE_ARGS = ["--model", "tiny-llama", "--workload", "mixed", "--legs", "cpu-0.27.1", "cpu-0.32.0"]


@pytest.fixture
def world(tmp_path: Path, monkeypatch) -> Path:
    """tmp_path/results/{study,sibling} (copies of cpu-tiny), someone's folder of files, a symlink to
    it, and a home folder (HOME) holding files."""
    results = tmp_path / "results"
    shutil.copytree(TINY, results / "study", symlinks=True)
    shutil.copytree(TINY, results / "sibling", symlinks=True, ignore=shutil.ignore_patterns("runs", "report"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.md").write_text("three years of work\n")
    (mine / "data").mkdir()
    (mine / "data" / "a.csv").write_text("1,2\n")
    (tmp_path / "link").symlink_to(mine, target_is_directory=True)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("export X=1\n")
    monkeypatch.setenv("HOME", str(home))
    return tmp_path


def _run(capsys, *args: str | Path) -> tuple[int, str]:
    capsys.readouterr()
    rc = cli.main([str(a) for a in args])
    return rc, capsys.readouterr().err


# Each folder-writing verb, as a function of its destination (in-process CLI arguments).
FOLDER_VERBS = {
    "publish": lambda w, d: ["publish", w / "results" / "study", d],
    "report": lambda w, d: ["report", w / "results" / "study", "--out", d, "--no-quarto"],
    "tables": lambda w, d: ["tables", w / "results" / "study", "--out", d],
    "tiny-model": lambda w, d: ["tiny-model", "--dest", d],
    "client-overhead": lambda w, d: ["check", "client-overhead", d, "--concurrency", "1", "--requests", "2"],
}
# Where each bad destination points, and what the one line says.
BAD_DESTS = {
    "existing-folder": (lambda w: w / "mine", "did not write"),
    "study-parent": (lambda w: w / "results", "did not write"),
    "study-itself": (lambda w: w / "results" / "study", "is a study folder"),
    "sibling-study": (lambda w: w / "results" / "sibling", "is a study folder"),
    "inside-study": (lambda w: w / "results" / "study" / "notes", "inside the study"),
    "symlink": (lambda w: w / "link", "symbolic link"),
    "root": (lambda w: Path("/"), "file system root"),
    "home": (lambda w: w / "home", "home folder"),
    "a-file": (lambda w: w / "mine" / "thesis.md", "a file"),
}


@pytest.mark.parametrize("where", sorted(BAD_DESTS))
@pytest.mark.parametrize("verb", sorted(FOLDER_VERBS))
def test_a_folder_verb_refuses_a_place_it_did_not_make(world, capsys, verb, where):
    dest_of, why = BAD_DESTS[where]
    dest = dest_of(world)
    before = snapshot(world)
    rc, err = _run(capsys, *FOLDER_VERBS[verb](world, dest))
    line = one_line_error(rc, err, [str(dest), why])
    assert "refused" in line
    assert snapshot(world) == before
    assert (world / "mine" / "thesis.md").read_text() == "three years of work\n"


@pytest.mark.parametrize("verb", sorted(FOLDER_VERBS))
def test_a_folder_the_harness_wrote_needs_replace(world, capsys, verb):
    dest = world / "out"
    with output_dir(dest, verb="tables") as tmp:     # an earlier harness output, marked
        (tmp / "old.md").write_text("old\n")
    before = snapshot(world)
    rc, err = _run(capsys, *FOLDER_VERBS[verb](world, dest))
    one_line_error(rc, err, [str(dest), "pass --replace"])
    assert snapshot(world) == before


FILE_VERBS = {
    "profile-diff": lambda w, d: ["compare", "profiles", w / "results" / "study", *PROFILE_ARGS, "--out", d],
    "compare-studies": lambda w, d: ["compare", "studies", w / "results" / "study", w / "results" / "sibling",
                                     "--out", d],
}
BAD_FILES = {
    "someone's-file": (lambda w: w / "mine" / "thesis.md", "did not write"),
    "a-folder": (lambda w: w / "mine", "is a folder"),
    "study-file": (lambda w: w / "results" / "study" / "study.yaml", "inside the study"),
    "study-itself": (lambda w: w / "results" / "study", "is a study folder"),
    "symlink": (lambda w: w / "link", "symbolic link"),
    "root": (lambda w: Path("/"), "file system root"),
    "home": (lambda w: w / "home", "home folder"),
}


@pytest.mark.parametrize("where", sorted(BAD_FILES))
@pytest.mark.parametrize("verb", sorted(FILE_VERBS))
def test_a_file_verb_refuses_a_file_it_did_not_write(world, capsys, verb, where):
    dest_of, why = BAD_FILES[where]
    dest = dest_of(world)
    before = snapshot(world)
    rc, err = _run(capsys, *FILE_VERBS[verb](world, dest))
    one_line_error(rc, err, [str(dest), why])
    assert snapshot(world) == before


def test_a_file_edited_since_the_harness_wrote_it_is_refused(world, capsys):
    dest = world / "cmp.md"
    with output_file(dest, verb="compare-studies") as tmp:
        tmp.write_text("# written\n")
    dest.write_text("# written, then annotated by hand\n")
    before = snapshot(world)
    rc, err = _run(capsys, *FILE_VERBS["compare-studies"](world, dest), "--replace")
    one_line_error(rc, err, [str(dest), "changed since"])
    assert snapshot(world) == before


def test_profile_diff_writes_a_new_file_then_replaces_it_only_when_asked(tmp_path, capsys):
    study = tmp_path / "cpu-profile"
    shutil.copytree(PROFILE, study)
    out = tmp_path / "diffs" / "d.md"
    rc, err = _run(capsys, "compare", "profiles", study, *PROFILE_ARGS, "--out", out)
    assert rc == 0, err
    assert out.read_text().strip() and output_marker.read(tmp_path / "diffs" / FOLDER_MARKER).verb == "profile-diff"
    rc, err = _run(capsys, "compare", "profiles", study, *PROFILE_ARGS, "--out", out)
    one_line_error(rc, err, [str(out), "pass --replace"])
    rc, err = _run(capsys, "compare", "profiles", study, *PROFILE_ARGS, "--out", out, "--replace")
    assert rc == 0, err
    # The default place, inside the study's marked derived/, is rewritten without --replace.
    default = study / "derived" / "profile-diff" / "tiny-llama__mixed__cpu-0.27.1__cpu-0.32.0.md"
    for _ in range(2):
        rc, err = _run(capsys, "compare", "profiles", study, *PROFILE_ARGS)
        assert rc == 0, err
    assert default.read_text() == out.read_text()


# --- what may be replaced, and how ------------------------------------------------------------------

def test_replace_replaces_a_marked_folder_whole(world, capsys):
    study, dest = world / "results" / "study", world / "derived-copy"
    assert _run(capsys, "tables", study, "--out", dest)[0] == 0
    (dest / "stale.md").write_text("from an older run\n")
    first = output_marker.read(dest / FOLDER_MARKER)
    rc, err = _run(capsys, "tables", study, "--out", dest, "--replace")
    assert rc == 0, err
    assert (dest / "CANONICAL.md").is_file() and not (dest / "stale.md").exists()
    assert output_marker.read(dest / FOLDER_MARKER).verb == "tables" and first.verb == "tables"
    assert not [p for p in world.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_replace_never_replaces_an_unmarked_folder(world, capsys):
    before = snapshot(world)
    rc, err = _run(capsys, "tables", world / "results" / "study", "--out", world / "mine", "--replace")
    one_line_error(rc, err, [str(world / "mine"), "did not write"])
    assert snapshot(world) == before


def test_an_empty_folder_may_be_written(world, capsys):
    (world / "empty").mkdir()
    rc, err = _run(capsys, "tables", world / "results" / "study", "--out", world / "empty")
    assert rc == 0, err
    assert (world / "empty" / "export" / "canonical.csv").is_file() and (world / "empty" / FOLDER_MARKER).is_file()


def test_the_default_folders_are_rewritten_and_keep_profile_diff(world, capsys):
    study = world / "results" / "study"
    for _ in range(2):
        rc, err = _run(capsys, "tables", study)
        assert rc == 0, err
    (study / "derived" / "profile-diff").mkdir()
    (study / "derived" / "profile-diff" / "x.md").write_text("a profile diff\n")
    rc, err = _run(capsys, "tables", study)
    assert rc == 0, err
    assert (study / "derived" / "profile-diff" / "x.md").read_text() == "a profile diff\n"
    assert (study / "derived" / "export" / "canonical.csv").is_file()   # the export, rewritten with derived/


def test_an_unmarked_default_folder_is_refused_and_says_what_to_do(world, capsys):
    study = world / "results" / "study"
    (study / "report" / FOLDER_MARKER).unlink()
    before = snapshot(world)
    rc, err = _run(capsys, "report", study, "--no-quarto")
    line = one_line_error(rc, err, [str(study / "report"), "did not write"])
    assert "move the folder aside" in line
    assert snapshot(world) == before


def test_publish_replaces_its_own_bundle_and_refuses_a_study_moved_into_it(world, capsys):
    study, dest = world / "results" / "study", world / "bundle"
    assert _run(capsys, "publish", study, dest)[0] == 0
    assert output_marker.read(dest / FOLDER_MARKER).studies == ["results"]   # the bundle's own copy
    rc, err = _run(capsys, "publish", study, dest, "--replace")
    assert rc == 0, err
    shutil.copytree(world / "results" / "sibling", dest / "someone-else")
    before = snapshot(world)
    rc, err = _run(capsys, "publish", study, dest, "--replace")
    one_line_error(rc, err, [str(dest), "holds a study the harness did not write"])
    assert snapshot(world) == before


def test_tiny_model_force_rebuilds_only_its_own_folder(tmp_path, capsys):
    dest = tmp_path / "m"
    with output_dir(dest, verb="tiny-model") as tmp:   # FAKE model folder: a marked stand-in, no weights
        (tmp / "config.json").write_text("{}")
    assert _run(capsys, "tiny-model", "--dest", dest)[0] == 0       # complete: reused, nothing written
    assert (dest / "config.json").read_text() == "{}"
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "config.json").write_text("{}")
    (tmp_path / "theirs" / "weights.bin").write_text("x")
    before = snapshot(tmp_path)
    rc, err = _run(capsys, "tiny-model", "--dest", tmp_path / "theirs", "--replace")
    one_line_error(rc, err, [str(tmp_path / "theirs"), "did not write"])
    assert snapshot(tmp_path) == before


# --- a verb that fails half-way ------------------------------------------------------------------------

def _boom(*a, **k):
    raise RuntimeError("FAKE failure half-way through")


@pytest.mark.parametrize("verb, target", [("tables", "harness.analyze.derive.write_equivalence"),
                                          ("publish", "harness.publish.bundle._logs_tar"),
                                          ("report", "harness.publish.render._render_kernel")])
def test_a_verb_failing_half_way_leaves_the_old_output_and_no_temporary_folder(world, capsys, monkeypatch,
                                                                               verb, target):
    study, dest = world / "results" / "study", world / "out"
    with output_dir(dest, verb=verb) as tmp:
        (tmp / "REPORT.md").write_text("the old output\n")
    before = snapshot(world)
    monkeypatch.setattr(target, _boom)
    args = {"tables": ["tables", study, "--out", dest], "publish": ["publish", study, dest],
            "report": ["report", study, "--out", dest, "--no-quarto"]}[verb]
    with pytest.raises(RuntimeError, match="FAKE"):   # a bug, not a user error: it propagates
        cli.main([str(a) for a in [*args, "--replace"]])
    assert snapshot(world) == before
    assert (dest / "REPORT.md").read_text() == "the old output\n"


def test_a_new_destination_s_parents_go_again_when_the_verb_fails(world, monkeypatch):
    monkeypatch.setattr("harness.analyze.derive.write_equivalence", _boom)
    before = snapshot(world)
    with pytest.raises(RuntimeError):
        cli.main(["tables", str(world / "results" / "study"), "--out", str(world / "new" / "deep" / "out")])
    assert snapshot(world) == before


# --- views and record folders --------------------------------------------------------------------------

def test_crosscheck_view_never_replaces_a_hand_written_summary(tmp_path):
    from harness.core.errors import UserError
    from harness.experiments import crosscheck as cc

    study = tmp_path / "cpu-tiny"
    shutil.copytree(TINY, study)
    cc.write_views(study)            # the shipped views carry their markers: rewritten
    (study / "crosscheck.md").write_text("my own notes on the crosscheck\n")
    before = snapshot(tmp_path)
    with pytest.raises(UserError, match="changed since"):
        cc.write_views(study)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("verb", ["bisect", "window"])
def test_record_folders_refuse_a_study_and_a_symlink(world, capsys, verb):
    base = {"bisect": ["search", "bisect", "--scenario", "cpu-tiny", "--good", "cpu-0.27.1", "--bad", "cpu-0.32.0"],
            "window": ["search", "window", "transformers", "--probe", "print(1)"]}[verb]
    before = snapshot(world)
    for dest, why in ((world / "results" / "study", "is a study folder"), (world / "link", "symbolic link")):
        rc, err = _run(capsys, *base, "--results", dest)
        one_line_error(rc, err, [str(dest), why])
    assert snapshot(world) == before


# --- end to end ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("verb, where", [("publish", "study-parent"), ("tables", "existing-folder"),
                                         ("tiny-model", "study-itself")])
def test_refusals_end_to_end(world, verb, where):
    dest = BAD_DESTS[where][0](world)
    before = snapshot(world)
    proc = harness(*FOLDER_VERBS[verb](world, dest), cwd=world)
    one_line_error(proc.returncode, proc.stderr, [str(dest), BAD_DESTS[where][1]])
    assert snapshot(world) == before


def test_publish_into_a_new_folder_end_to_end(world):
    proc = harness("publish", world / "results" / "study", world / "bundle", cwd=world)
    assert proc.returncode == 0, proc.stderr
    marker = json.loads((world / "bundle" / FOLDER_MARKER).read_text())
    assert marker["verb"] == "publish" and marker["kind"] == "harness-output"
    assert (world / "bundle" / "REPORT.md").is_file()


def test_exported_files_are_readable_by_others_not_owner_only(tmp_path):
    """The export writes through mkstemp (0600); what it leaves is 0644, as every other output."""
    from harness.analyze.export import export
    from harness.publish.study import load_study

    st = load_study(paths.RESULTS / "cpu-tiny")
    for p in export(st.canon, tmp_path / "export"):
        assert p.stat().st_mode & 0o777 == 0o644, p.name


def test_a_runs_folder_beside_the_checkout_does_not_lock_the_project(tmp_path, monkeypatch):
    """A checkout cloned into a folder that also holds a `runs/` of its own (someone's logs): the
    project's folders stay writable (fails before: every verb writing inside the checkout, the tiny
    model's cache included, was refused as "inside the study" above it). A study outside the
    checkout still protects what lies inside it."""
    above = tmp_path / "work"
    (above / "runs").mkdir(parents=True)
    (above / "runs" / "make.log").write_text("someone's log\n")
    proj = above / "checkout"
    (proj / "results").mkdir(parents=True)
    monkeypatch.setattr(paths, "PROJ_ROOT", proj)
    monkeypatch.setattr(paths, "RESULTS", proj / "results")
    assert check_folder(proj / ".cache" / "models" / "m", verb="tiny-model") == proj / ".cache" / "models" / "m"
    with pytest.raises(UserError, match="inside the study"):
        check_folder(above / "elsewhere" / "out", verb="tables")
