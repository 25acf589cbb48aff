"""Bad input, as a new user gives it: scenario files, leg files, the CLI and study folders.

Every case asserts the exit status, one stderr line that names the culprit (the file and the key,
or the path), no traceback, and that nothing was written or deleted outside where it should be
(the tree of the case's folder is the same before and after, except where a case says otherwise).
CLI cases run the CLI as a subprocess; leg cases run `harness.cli.main` in-process, because the legs
folder can only be moved by patching `harness.core.paths.LEGS`.
"""

from __future__ import annotations

import re

import errno
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from harness import cli
from harness.core import paths, yamlio
from harness.core.errors import UserError
from harness.schema import record

ROOT = paths.PROJ_ROOT
STUDY = ROOT / "results" / "cpu-tiny-serial"   # a shipped study, copied (never written) by the cases below

BASE = {
    "name": "t",
    "legs": ["cpu-0.27.1"],
    "models": [{"name": "m", "path": "tiny"}],
    "workloads": [{"name": "w", "kind": "throughput", "input_len": 8, "output_len": 4, "num_prompts": 2}],
}


# --- helpers --------------------------------------------------------------------------------------

def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns if p.is_file() else 0)
    return out


def harness(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("PYTHONPATH", None)
    e["HARNESS_LOCK"] = str(cwd / "measure.lock.never")
    e |= env or {}
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], cwd=cwd, env=e,
                          capture_output=True, text=True, timeout=300)


# Most cases call `harness.cli.main` in-process (an uncaught exception fails the test just as a
# traceback would); a subset of each group runs the real CLI as a subprocess, end to end.
SUBPROCESS = {"workload-climbs", "alias-bomb-engine-args", "study-climbs", "model-path-missing", "infinite",
              "unknown-leg-key"}


@pytest.fixture
def run_cli(capsys, tmp_path):
    def go(*args: str | Path, sub: bool) -> tuple[int, str]:
        if sub:
            proc = harness(*args, cwd=tmp_path)
            return proc.returncode, proc.stderr
        capsys.readouterr()
        rc = cli.main([str(a) for a in args])
        return rc, capsys.readouterr().err
    return go


def one_line_error(rc: int, stderr: str, culprit: str | list[str]) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert rc == 2, (rc, stderr)
    assert len(lines) == 1, stderr
    for c in [culprit] if isinstance(culprit, str) else culprit:
        assert c in lines[0], (c, lines[0])
    return lines[0]


def scenario_text(mutate) -> str:
    data = json.loads(json.dumps(BASE))
    mutate(data)
    return yaml.safe_dump(data, sort_keys=False)


def _set(path: str, value):
    """A mutation of BASE: `a.0.b` = value."""
    def go(d):
        *head, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        for p in head:
            d = d[p]
        d[last] = value
    return go


BOMB = "name: t\n" + "a0: &a0 [" + ", ".join(["lol"] * 9) + "]\n" + "".join(
    f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 10))

# The case: anchors inside a model's engine_args, which validate as a dict of lists.
ENGINE_BOMB = yaml.safe_dump(BASE, sort_keys=False).replace(
    "  path: tiny\n", "  path: tiny\n  engine_args:\n" + "".join(
        f"    {ln}\n" for ln in BOMB.splitlines()[1:]), 1)

# --- scenario files, through `harness sweep --dry-run` --------------------------------------------
# (id, scenario text, extra CLI args, what the one stderr line must name besides the file)

SCENARIO_CASES = [
    ("workload-climbs", scenario_text(_set("workloads.0.name", "../../etc")), [], "workloads[0].name"),
    ("workload-absolute", scenario_text(_set("workloads.0.name", "/tmp/x")), [], "workloads[0].name"),
    ("workload-empty", scenario_text(_set("workloads.0.name", "")), [], "workloads[0].name"),
    ("workload-hidden", scenario_text(_set("workloads.0.name", ".w")), [], "workloads[0].name"),
    ("arm-climbs", scenario_text(_set("arms", [{"name": "../../../../../../x"}])), [], "arms[0].name"),
    ("arm-slash", scenario_text(_set("arms", [{"name": "a/b"}])), [], "arms[0].name"),
    ("series-climbs", scenario_text(_set("series", "../../s")), [], "series"),
    ("name-climbs", scenario_text(_set("name", "../evil")), [], "name"),
    ("leg-climbs", scenario_text(_set("legs", ["../../etc/passwd"])), [], "legs[0]"),
    ("leg-unknown", scenario_text(_set("legs", ["cpu-9.9.9"])), [], "legs[0]"),
    ("model-dotdot", scenario_text(_set("models.0.name", "..")), [], "models[0].name"),
    ("model-newline", scenario_text(_set("models.0.name", "a\nb")), [], "models[0].name"),
    ("model-path-missing", scenario_text(_set("models.0.path", "/nonexistent/model-dir")), [], "models[0].path"),
    ("unknown-key", scenario_text(_set("bogus", 1)), [], "bogus"),
    ("repeats-zero", scenario_text(_set("repeats", 0)), [], "repeats"),
    ("repeats-text", scenario_text(_set("repeats", "three")), [], "repeats"),
    ("timeout-zero", scenario_text(_set("timeout_s", 0)), [], "timeout_s"),
    ("input-len-negative", scenario_text(_set("workloads.0.input_len", -1)), [], "workloads[0].input_len"),
    ("kind-unknown", scenario_text(_set("workloads.0.kind", "nope")), [], "kind"),
    ("workload-duplicate", scenario_text(lambda d: d["workloads"].append(dict(d["workloads"][0]))), [], "duplicate"),
    ("model-workload-unknown", scenario_text(_set("models.0.workloads", ["x"])), [], "models[0].workloads[0]"),
    ("model-two-sources", scenario_text(_set("models.0.architecture", "a.json")), [], "path or architecture"),
    ("alias-bomb", BOMB, [], "alias"),
    ("alias-bomb-engine-args", ENGINE_BOMB, [], "alias"),
    ("not-yaml", "name: [unclosed\n", [], "line 2"),
    ("top-level-list", "- a\n- b\n", [], "mapping"),
    ("empty-file", "", [], "mapping"),
    ("deeply-nested", "a: " + "[" * 20000 + "]" * 20000 + "\n", [], "YAML"),
    ("study-climbs", scenario_text(lambda d: None), ["--study", "../../x"], "--study"),
    ("study-absolute", scenario_text(lambda d: None), ["--study", "/tmp/x"], "--study"),
    ("repeats-flag-zero", scenario_text(lambda d: None), ["--repeats", "0"], "--repeats"),
    ("timeout-flag-negative", scenario_text(lambda d: None), ["--timeout", "-1"], "--timeout"),
    ("workload-flag-unknown", scenario_text(lambda d: None), ["--workload", "nope"], "'nope'"),
]


@pytest.mark.parametrize("case", SCENARIO_CASES, ids=[c[0] for c in SCENARIO_CASES])
def test_bad_scenario_is_one_line_and_writes_nothing(tmp_path, run_cli, case):
    name, text, extra, culprit = case
    sc = tmp_path / "t.yaml"
    sc.write_text(text)
    results = tmp_path / "a" / "b" / "results"
    results.mkdir(parents=True)
    before = snapshot(tmp_path)
    rc, err = run_cli("sweep", sc, "--results", results, "--dry-run", *extra, sub=name in SUBPROCESS)
    one_line_error(rc, err, [culprit] if culprit.startswith("--") else [str(sc), culprit])
    assert snapshot(tmp_path) == before


def test_model_path_that_is_a_file(tmp_path, run_cli):
    (tmp_path / "weights.bin").write_text("x")
    sc = tmp_path / "t.yaml"
    sc.write_text(scenario_text(_set("models.0.path", str(tmp_path / "weights.bin"))))
    before = snapshot(tmp_path)
    rc, err = run_cli("sweep", sc, "--results", tmp_path / "results", "--dry-run", sub=False)
    one_line_error(rc, err, [str(sc), "models[0].path", "is a file"])
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("what", ["missing", "folder", "not-utf8", "too-big"])
def test_unreadable_scenario_files(tmp_path, run_cli, what):
    sc = tmp_path / "t.yaml"
    culprit = {"missing": "no such file", "folder": "is a folder", "not-utf8": "cannot read",
               "too-big": "1 MiB"}[what]
    if what == "folder":
        sc.mkdir()
    elif what == "not-utf8":
        sc.write_bytes(b"name: \xff\xfe\n")
    elif what == "too-big":
        sc.write_text(scenario_text(lambda d: None) + "# " + "x" * (50 << 20) + "\n")
    before = snapshot(tmp_path)
    rc, err = run_cli("sweep", sc, "--results", tmp_path / "results", "--dry-run", sub=what == "too-big")
    one_line_error(rc, err, [str(sc), culprit])
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("text", [BOMB, "name: t\n# " + "x" * (50 << 20) + "\n"], ids=["billion-laughs", "50-MB"])
def test_yaml_is_refused_before_it_is_expanded(tmp_path, text):
    import time

    path = tmp_path / "x.yaml"
    path.write_text(text)
    t0 = time.perf_counter()
    with pytest.raises(UserError):
        yamlio.read_yaml(path)
    # Refused by its size or its aliases before expanding: well under a second alone. The bound is loose
    # because the suite shares the cores with an engine; unguarded, either file takes minutes or the memory.
    assert time.perf_counter() - t0 < 10.0


def test_anchors_within_bounds_still_load(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("base: &b {a: 1, b: 2}\nmodels: [*b, *b]\n")
    assert yamlio.read_yaml(path) == {"base": {"a": 1, "b": 2}, "models": [{"a": 1, "b": 2}] * 2}


# --- leg files, through `harness legs` (in-process: the legs folder is patched) ------------------

GOOD_LEG = {"name": "ok-leg", "label": "ok", "device": "cuda", "vllm_version": "0.18.0", "buildable": False}


@pytest.fixture
def legs_dir(tmp_path, monkeypatch):
    d = tmp_path / "legs"
    d.mkdir()
    monkeypatch.setattr(paths, "LEGS", d)
    (d / "ok-leg.yaml").write_text(yaml.safe_dump(GOOD_LEG))
    return d


def _legs(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(["legs", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


LEG_CASES = [
    ("unknown-key", GOOD_LEG | {"name": "bad", "bogus": 1}, "bogus"),
    ("no-device", {k: v for k, v in GOOD_LEG.items() if k != "device"} | {"name": "bad"}, "device"),
    ("name-mismatch", GOOD_LEG | {"name": "other"}, "does not match"),
    ("patch-missing", GOOD_LEG | {"name": "bad", "patches": ["nope.diff"]}, "patches"),
    ("patch-climbs", GOOD_LEG | {"name": "bad", "patches": ["../../x.diff"]}, "patches"),
    ("not-yaml", "name: [unclosed\n", "line"),
]


@pytest.mark.parametrize("case", LEG_CASES, ids=[c[0] for c in LEG_CASES])
def test_bad_leg_file_names_the_file(legs_dir, capsys, case):
    _, body, culprit = case
    path = legs_dir / "bad.yaml"
    path.write_text(body if isinstance(body, str) else yaml.safe_dump(body))
    before = snapshot(legs_dir.parent)
    rc, out, err = _legs(capsys, "bad")
    one_line_error(rc, err, [str(path), culprit])
    assert snapshot(legs_dir.parent) == before


def test_legs_reports_every_bad_leg_and_goes_on(legs_dir, capsys):
    (legs_dir / "bad1.yaml").write_text(yaml.safe_dump(GOOD_LEG | {"name": "bad1", "bogus": 1}))
    (legs_dir / "bad2.yaml").write_text("name: [unclosed\n")
    rc, out, err = _legs(capsys)
    assert rc == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and str(legs_dir / "bad1.yaml") in lines[0] and str(legs_dir / "bad2.yaml") in lines[1]
    assert "ok-leg: described only" in out   # the good leg after the first bad one was still reported


@pytest.mark.parametrize("name, culprit", [("../../etc", "cannot name a folder"), ("nope", "unknown leg")])
def test_leg_names_on_the_command_line(legs_dir, capsys, name, culprit):
    rc, out, err = _legs(capsys, name)
    one_line_error(rc, err, culprit)


# --- study folders, through `harness tables` / `harness report` -----------------------------------

@pytest.fixture
def study(tmp_path) -> Path:
    d = tmp_path / "s"
    shutil.copytree(STUDY, d, ignore=shutil.ignore_patterns("derived", "report"))
    return d


def _records(study_dir: Path) -> list[Path]:
    return sorted(study_dir.rglob("results.json"))


def _canonical_record(study_dir: Path) -> Path:
    """A record that is canonical in the shipped study (default arm, main series, status ok)."""
    for p in _records(study_dir):
        d = json.loads(p.read_text())
        if d["arm"] == "default" and d["status"] == "ok" and d["metrics"].get("throughput_tok_s"):
            return p
    raise AssertionError("no canonical throughput record in the study")


def _poke(path: Path, key: str, value) -> None:
    d = json.loads(path.read_text())
    d["metrics"][key] = value
    path.write_text(json.dumps(d))


IMPOSSIBLE = [("infinite", float("inf"), "infinite"), ("negative", -5.0, "negative"),
              ("nan", float("nan"), "NaN"), ("zero", 0.0, "zero"),
              ("text", "fast", "valid number"), ("bool", True, "valid number"), ("null", None, "missing (null)")]


@pytest.mark.parametrize("case", IMPOSSIBLE, ids=[c[0] for c in IMPOSSIBLE])
def test_impossible_metric_under_strict_is_an_error_and_writes_nothing(tmp_path, study, run_cli, case):
    name, value, reason = case
    rec = _canonical_record(study)
    _poke(rec, "throughput_tok_s", value)
    before = snapshot(tmp_path)
    rc, err = run_cli("tables", study, "--strict", sub=name in SUBPROCESS)
    one_line_error(rc, err, [str(rec.resolve()), reason, "--strict"])
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("case", IMPOSSIBLE[:4], ids=[c[0] for c in IMPOSSIBLE[:4]])
def test_impossible_metric_is_excluded_with_a_warning_naming_it(study, case):
    from harness.analyze.canonical import canonical_md, canonicalize
    from harness.analyze.dataset import load

    _, value, reason = case
    rec = _canonical_record(study)
    _poke(rec, "throughput_tok_s", value)
    canon = canonicalize(load(study))
    rel = str(rec.parent.relative_to(study))
    assert all(rel not in dirs for dirs in canon.cells["run_dirs"])
    assert all(math.isfinite(v) and v > 0 for s in canon.cells["samples"] for v in s)
    md = canonical_md(canon)
    assert "Records excluded from every table" in md and reason in md.split(str(rec.relative_to(study)))[1].splitlines()[0]


def test_tables_warns_on_stderr_with_the_full_path(tmp_path, study):
    rec = _canonical_record(study)
    _poke(rec, "throughput_tok_s", -1.0)
    proc = harness("tables", study, cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines == [f"warning: {rec.resolve()}: impossible metric: metrics.throughput_tok_s is negative (-1); "
                     "record excluded"]
    assert "negative" in (study / "derived" / "CANONICAL.md").read_text()


def test_duplicated_run_id_is_excluded_and_the_original_kept(tmp_path, study, run_cli):
    from harness.analyze.canonical import canonicalize
    from harness.analyze.dataset import load

    rec = _canonical_record(study)
    n = len(canonicalize(load(study)).runs)
    for i in range(10):
        shutil.copytree(rec.parent, study / "runs" / f"copy{i}")
    canon = canonicalize(load(study))
    assert len(canon.runs) == n   # none of the ten copies counts
    assert sum("duplicate run id" in p.what for p in canon.dataset.problems) == 10
    before = snapshot(tmp_path)
    rc, err = run_cli("tables", study, "--strict", sub=False)
    one_line_error(rc, err, ["duplicate run id", "and 9 more"])
    assert snapshot(tmp_path) == before


def test_report_warns_and_strict_refuses(tmp_path, study):
    rec = _canonical_record(study)
    _poke(rec, "throughput_tok_s", float("inf"))
    before = snapshot(tmp_path)
    proc = harness("report", study, "--strict", "--out", tmp_path / "rep", cwd=tmp_path)
    one_line_error(proc.returncode, proc.stderr, [str(rec.resolve()), "infinite"])
    assert snapshot(tmp_path) == before


STUDY_CASES = [
    ("missing", lambda d: d / "nope", "no such study folder"),
    ("a-file", lambda d: (d / "f").write_text("x") and d / "f", "is a file, not a study folder"),
    ("empty-folder", lambda d: (d / "e").mkdir() or d / "e", "not a study folder"),
]


@pytest.mark.parametrize("case", STUDY_CASES, ids=[c[0] for c in STUDY_CASES])
@pytest.mark.parametrize("verb", ["tables", "report"])
def test_not_a_study(tmp_path, run_cli, case, verb):
    _, make, culprit = case
    target = make(tmp_path)
    before = snapshot(tmp_path)
    rc, err = run_cli(verb, target, sub=verb == "tables")
    one_line_error(rc, err, [str(target), culprit])
    assert snapshot(tmp_path) == before


STUDY_YAML_CASES = [
    ("unknown-leg-key", "name: s\nlegs:\n  - name: a\n    bogus: 1\n", ["line 4", "legs[0].bogus"]),
    ("not-yaml", "name: s\nlegs: [unclosed\n", ["line 3"]),
    ("too-new", "name: s\nschema_version: 99\n", ["line 2", "schema_version"]),
    ("alias-bomb", BOMB.replace("name: t", "name: s"), ["alias"]),
    ("not-a-mapping", "- a\n", ["mapping"]),
]


@pytest.mark.parametrize("case", STUDY_YAML_CASES, ids=[c[0] for c in STUDY_YAML_CASES])
def test_bad_study_yaml_has_a_line_number(tmp_path, study, run_cli, case):
    name, text, culprits = case
    (study / "study.yaml").write_text(text)
    before = snapshot(tmp_path)
    rc, err = run_cli("tables", study, sub=name in SUBPROCESS)
    one_line_error(rc, err, [str(study / "study.yaml"), *culprits])
    assert snapshot(tmp_path) == before


def test_out_naming_a_file(tmp_path, study, run_cli):
    (tmp_path / "out").write_text("keep me")
    before = snapshot(tmp_path)
    for verb in ("tables", "report"):
        rc, err = run_cli(verb, study, "--out", tmp_path / "out", sub=verb == "tables")
        one_line_error(rc, err, [str(tmp_path / "out"), "--out"])
    assert snapshot(tmp_path) == before and (tmp_path / "out").read_text() == "keep me"


def test_read_only_study_as_a_non_root_user(tmp_path_factory):
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root to drop to another user (setpriv)")
    base = Path(tmp_path_factory.mktemp("ro"))
    d = base / "s"
    shutil.copytree(STUDY, d, ignore=shutil.ignore_patterns("derived", "report"))
    for p in [base, *base.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    for p in [base.parent, base.parent.parent]:
        p.chmod(p.stat().st_mode | 0o005)
    before = snapshot(base)
    e = dict(os.environ, HOME=str(base), HARNESS_CACHE=str(base / "cache"), MPLCONFIGDIR=str(base / "mpl"))
    e.pop("PYTHONPATH", None)
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                           "harness", "tables", str(d)], env=e, capture_output=True, text=True, cwd=base, timeout=300)
    if "Permission denied" in proc.stderr and str(d) not in proc.stderr:
        pytest.skip(f"the project itself is not readable by another user here: {proc.stderr[-200:]}")
    one_line_error(proc.returncode, proc.stderr, [str(d), "Permission denied"])
    assert snapshot(base) == before


def test_permission_error_anywhere_is_one_line(monkeypatch, capsys, study):
    from harness.analyze import derive

    def refuse(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied", str(study / "derived"))

    monkeypatch.setattr(derive, "write_study", refuse)
    rc = cli.main(["tables", str(study)])
    one_line_error(rc, capsys.readouterr().err, [str(study / "derived"), "Permission denied"])


def test_full_disk_while_writing_a_record_keeps_the_previous_one(tmp_path, monkeypatch):
    path = tmp_path / "run" / "results.json"
    record.write_json_atomic(path, {"v": 1})
    before = path.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(record.os, "fsync", full)
    with pytest.raises(UserError, match=r"results\.json: cannot write \(No space left on device\); the previous"):
        record.write_json_atomic(path, {"v": 2})
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["results.json"]   # no temporary file left


def test_full_disk_through_the_cli_is_one_line(monkeypatch, capsys, study):
    from harness.analyze import derive

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(study / "derived" / "CANONICAL.md"))

    monkeypatch.setattr(derive, "write_study", full)
    rc = cli.main(["tables", str(study)])
    one_line_error(rc, capsys.readouterr().err, ["CANONICAL.md", "No space left on device"])


# --- where paths are built --------------------------------------------------------------------------

def test_inside_refuses_climbing_and_symlinks_out(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "root" / "link").symlink_to(tmp_path / "outside")
    assert paths.inside(tmp_path / "root", "a", "b") == tmp_path / "root" / "a" / "b"
    for parts in (("..", "x"), ("a", "..", "..", "x"), ("/etc",), ("link", "x")):
        with pytest.raises(UserError, match="outside"):
            paths.inside(tmp_path / "root", *parts)


def test_a_run_never_deletes_outside_its_folder(tmp_path):
    from harness.measure.run import check_run_dir

    victim = tmp_path / "results.json"
    victim.write_text("a record")
    spec = SimpleNamespace(run_id="s/leg/m/../../../../r1")
    with pytest.raises(UserError, match="refused before anything was deleted"):
        check_run_dir(spec, tmp_path / "a" / "b" / "runs" / "s" / "leg" / "m" / ".." / ".." / ".." / ".." / "r1")
    assert victim.read_text() == "a record"


def test_no_index_configured_is_one_line(monkeypatch):
    from harness.measure import index

    for var in index.INDEX_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(index, "_pip_config", lambda: None)
    with pytest.raises(UserError, match="no package index configured"):
        index.index_url()
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.invalid/simple/")
    assert index.index_url() == "https://mirror.invalid/simple"


def test_make_main_measures_into_a_new_study_folder(tmp_path):
    proc = subprocess.run(["make", "-n", "main", "MAIN_STUDY=local-test-x"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    out = proc.stdout
    assert "sweep cpu-tiny --study local-test-x" in out and "tables results/local-test-x" in out
    # The shipped study is only read (pooled into the time-to-decide lines), never a writer's target.
    flat = " ".join(out.split())
    assert "harness report results/local-test-x" in flat and "--study cpu-tiny " not in flat
    cmds = [c for c in re.split(r"[;\n]", out) if "results/cpu-tiny" in c]
    assert cmds and all("engine_variance time-to-decide results/local-test-x" in c for c in cmds), cmds
    assert "--pool results/cpu-tiny results/cpu-tiny-run1" in flat


# --- a second crosscheck keeps the first ------------------------------------------------------------

CROSS = """
name: t
legs: [cpu-0.32.0]
repeats: 1
models:
  - {name: m, path: tiny, engine_args: {fake_tok_s: 100.0}}
workloads:
  - {name: mixed, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}
  - {name: long, kind: throughput, input_len: 16, output_len: 4, num_prompts: 2}
"""


def test_a_second_crosscheck_keeps_the_first(tmp_path, fake_sweep, monkeypatch):
    import dataclasses

    from harness.experiments import crosscheck as cc
    from harness.measure.sweep import SweepArgs
    from tests.conftest import FAKE_BENCH, write_scenario

    monkeypatch.setattr(cc, "VLLM_BENCH", FAKE_BENCH)
    args = SweepArgs(scenario=str(write_scenario(tmp_path, CROSS)), results=tmp_path / "r")
    cc.crosscheck(dataclasses.replace(args, workloads=("mixed",)))
    cc.crosscheck(dataclasses.replace(args, workloads=("long",)))
    study = tmp_path / "r" / "t"
    kept = cc.load_all(study)
    assert sorted(r["rows"][0]["workload"] for r in kept) == ["long", "mixed"]
    assert sorted(r["workload"] for r in cc.load(study)["rows"]) == ["long", "mixed"]
    md = (study / "crosscheck.md").read_text()
    assert "| mixed |" in md and "| long |" in md


def test_a_sweep_refuses_a_folder_that_is_not_a_study_and_a_folder_inside_one(tmp_path, fake_sweep):
    """The study folder gets runs/, sweeps/ and study.yaml: never a user's non-empty folder, never a
    folder inside a study (a results root that is a study or its runs/)."""
    from harness.core.errors import UserError
    from harness.measure.sweep import SweepArgs, sweep
    from tests.conftest import write_scenario

    scenario = write_scenario(tmp_path, "name: s\nlegs: [cpu-0.32.0]\nmodels:\n  - {name: m, path: tiny}\n"
                                        "workloads:\n  - {name: w, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(UserError, match="an existing folder that is not a study"):
        sweep(SweepArgs(scenario=str(scenario), results=tmp_path, study="mine"))
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    study = tmp_path / "r" / "s"
    sweep(SweepArgs(scenario=str(scenario), results=tmp_path / "r"))
    for results, name in ((study, "x"), (study / "runs", "y")):
        with pytest.raises(UserError, match="inside the study"):
            sweep(SweepArgs(scenario=str(scenario), results=results, study=name))
