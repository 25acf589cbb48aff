"""Every reader of a run record goes through the schema's one check (harness.schema.checks): a bad
record (an impossible number, or a file that is not a record) is left out and named in one stderr
line by tables, crosscheck --from-records, engine-reuse, equivalence and compare-studies; a comparison
of a thing with itself is refused in one line; study.yaml's booleans are true or false only; a
main_series that names no series is said, not turned into empty tables.

Studies are FAKE (tests.studygen) or temporary copies of shipped ones; crosscheck records come from
the FAKE bench (tests.fakes.fake_bench). Each CLI case asserts the exit status, the one stderr line
naming the culprit, no traceback, and the file tree unchanged outside what the verb may create.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness import cli
from harness.core import paths
from harness.schema import checks
from tests.studygen import record_dict, simple_study, write_run, write_study_yaml
from tests.test_bad_input import one_line_error, snapshot

RESULTS = paths.PROJ_ROOT / "results"


def _metric(value):  # noqa: ANN001, ANN202
    def go(path: Path) -> None:
        d = json.loads(path.read_text())
        key = "total_tok_s" if "total_tok_s" in d["metrics"] else "throughput_tok_s"
        d["metrics"][key] = value
        if key == "total_tok_s":
            d["metrics"]["throughput_tok_s"] = value
        path.write_text(json.dumps(d))
    return go


def _bytes(data: bytes):  # noqa: ANN001, ANN202
    def go(path: Path) -> None:
        if data == b"TRUNCATE":
            path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
        else:
            path.write_bytes(data)
    return go


# (id, how the record is spoiled, what the one line says about it)
BAD = [
    ("negative", _metric(-5.0), "is negative (-5)"),
    ("zero", _metric(0.0), "is zero"),
    ("nan", _metric(float("nan")), "is NaN"),
    ("inf", _metric(float("inf")), "is infinite"),
    ("string", _metric("fast"), "valid number"),
    ("truncated", _bytes(b"TRUNCATE"), "truncated JSON"),
    ("empty", _bytes(b""), "empty file"),
    ("binary", _bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe"), "not UTF-8"),
]
IDS = [b[0] for b in BAD]


def _run(capsys, *args: str | Path) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _warned(rc: int, err: str, culprit: Path, what: str) -> None:
    """Exit 0, no traceback, and exactly one stderr line naming the culprit file and what is wrong."""
    assert "Traceback" not in err, err
    assert rc == 0, (rc, err)
    mine = [ln for ln in err.splitlines() if str(culprit.resolve()) in ln]
    assert len(mine) == 1 and mine[0].startswith("warning: ") and what in mine[0], err


def _without(snap: dict, *prefixes: str) -> dict:
    return {k: v for k, v in snap.items() if not k.startswith(prefixes)}


def _reuse_study(root: Path) -> Path:
    """FAKE: two series of one (leg, model, workload), three repeats each."""
    write_study_yaml(root, [("gpu-0.26.0", "0.26")], main_series="per-run")
    for series, base in (("per-run", 100.0), ("per-group", 101.0)):
        for rep in (1, 2, 3):
            write_run(root, record_dict(leg="gpu-0.26.0", leg_label="0.26", series=series, repeat=rep,
                                        value=base + rep))
    return root


def _record(root: Path, series: str = "main") -> Path:
    return next(p for p in sorted((root / "runs").rglob("results.json")) if f"/{series}/" in str(p))


# --- the one check --------------------------------------------------------------------------------

@pytest.mark.parametrize("name,spoil,what", BAD, ids=IDS)
def test_the_schema_check_names_the_file_and_the_number(tmp_path, name, spoil, what):
    run = write_run(tmp_path, record_dict())
    spoil(run / "results.json")
    with pytest.raises(Exception) as e:
        checks.read_measured(run / "results.json")
    assert str(run / "results.json") in str(e.value) and what in str(e.value)
    assert type(e.value).__name__ == "InvalidFileError"


def test_zero_is_refused_only_where_the_kinds_metric_must_be_positive(tmp_path, monkeypatch):
    import dataclasses

    from harness.workloads import throughput

    run = write_run(tmp_path, record_dict())
    _metric(0.0)(run / "results.json")
    assert "zero" in checks.metric_problem(checks.read(run / "results.json"))
    # FAKE: a throughput kind whose metric may be zero or negative (a difference): then only NaN and
    # infinities are refused. The rule comes from the kind's Metric, not from the field's name.
    monkeypatch.setattr(throughput, "METRIC", dataclasses.replace(throughput.METRIC, positive=False))
    assert checks.metric_problem(checks.read(run / "results.json")) is None
    _metric(-3.0)(run / "results.json")
    assert checks.metric_problem(checks.read(run / "results.json")) is None
    _metric(float("nan"))(run / "results.json")
    assert "NaN" in checks.metric_problem(checks.read(run / "results.json"))


# --- tables ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,spoil,what", BAD, ids=IDS)
def test_tables_strict_refuses_the_bad_record_in_one_line_and_writes_nothing(tmp_path, capsys, name, spoil, what):
    study = simple_study(tmp_path / "s", {(lb, "m", "mixed"): [1000.0, 1010.0, 990.0] for _, lb in
                                          [("gpu-0.18.0", "0.18"), ("gpu-0.26.0", "0.26")]},
                         legs=[("gpu-0.18.0", "0.18"), ("gpu-0.26.0", "0.26")])
    bad = _record(study)
    spoil(bad)
    before = snapshot(tmp_path)
    rc, _, err = _run(capsys, "tables", study, "--strict")
    one_line_error(rc, err, [str(bad.resolve()), what, "--strict"])
    assert snapshot(tmp_path) == before


def test_tables_warns_and_leaves_the_record_out(tmp_path, capsys):
    study = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [1000.0, 1010.0], ("0.26", "m", "mixed"): [990.0]},
                         legs=[("gpu-0.18.0", "0.18"), ("gpu-0.26.0", "0.26")])
    bad = _record(study)
    _metric(float("nan"))(bad)
    before = snapshot(tmp_path)
    rc, _, err = _run(capsys, "tables", study)
    _warned(rc, err, bad, "is NaN")
    assert _without(snapshot(tmp_path), "s/derived") == _without(before, "s/derived")
    canonical = (study / "derived" / "CANONICAL.md").read_text()
    assert "Records excluded from every table" in canonical and "is NaN" in canonical


# --- crosscheck --from-records --------------------------------------------------------------------

@pytest.fixture
def crosschecked(tmp_path, fake_sweep, monkeypatch):
    """A crosscheck measured with the FAKE bench on both sides, its summary written."""
    from harness.experiments import crosscheck as cc
    from harness.measure.sweep import SweepArgs
    from tests.conftest import FAKE_BENCH
    from tests.test_crosscheck import SCENARIO, write_scenario

    monkeypatch.setattr(cc, "VLLM_BENCH", FAKE_BENCH)
    scenario = write_scenario(tmp_path, SCENARIO)
    cc.crosscheck(SweepArgs(scenario=str(scenario), results=tmp_path / "r"))
    runs = tmp_path / "r" / "t" / "runs" / "t" / "cpu-0.32.0" / "m" / "thr"
    return scenario, tmp_path / "r", runs


@pytest.mark.parametrize("name,spoil,what", BAD, ids=IDS)
def test_crosscheck_from_records_names_the_bad_record_and_keeps_the_earlier_summary(crosschecked, capsys, name,
                                                                                     spoil, what):
    scenario, results, runs = crosschecked
    bad = runs / "vllm-bench-no-prefix-cache" / "r1" / "results.json"
    spoil(bad)
    kept = {p: p.read_bytes() for p in (results / "t" / "crosscheck").glob("*.json")}
    before = snapshot(results)
    rc, out, err = _run(capsys, "check", "crosscheck", scenario, "--results", results, "--from-records")
    _warned(rc, err, bad, what)
    assert "kept as it was" in err and "nan" not in out.lower()
    assert {p: p.read_bytes() for p in kept} == kept            # the earlier summary is not rewritten
    after = snapshot(results)
    # Only the study's crosscheck views may be written again (from the records kept); nothing else moves.
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert all(Path(k).parent == Path("t") and "crosscheck" in Path(k).name for k in changed), changed


def test_crosscheck_from_records_with_every_record_bad_is_one_line(crosschecked, capsys):
    scenario, results, runs = crosschecked
    for p in runs.rglob("results.json"):
        _metric(-1.0)(p)
    before = snapshot(results)
    rc, _, err = _run(capsys, "check", "crosscheck", scenario, "--results", results, "--from-records")
    one_line_error(rc, err, ["results.json", "is negative", "nothing written"])
    assert snapshot(results) == before


# --- engine-reuse, equivalence, compare-studies ---------------------------------------------------

@pytest.mark.parametrize("name,spoil,what", [BAD[0], BAD[5]], ids=["negative", "truncated"])
def test_engine_reuse_names_the_bad_record(tmp_path, capsys, name, spoil, what):
    study = _reuse_study(tmp_path / "s")
    bad = _record(study, "per-group")
    spoil(bad)
    before = snapshot(tmp_path)
    rc, out, err = _run(capsys, "check", "engine-reuse", study)
    _warned(rc, err, bad, what)
    assert "| 3 / 2 |" in out           # the bad repeat is not among the per-group samples
    assert snapshot(tmp_path) == before


def test_equivalence_names_the_bad_record(tmp_path, capsys):
    study = tmp_path / "cpu-equivalence"
    shutil.copytree(RESULTS / "cpu-equivalence", study)
    bad = sorted((study / "runs").rglob("results.json"))[0]
    _bytes(b"TRUNCATE")(bad)
    before = snapshot(tmp_path)
    rc, _, err = _run(capsys, "check", "equivalence", study)
    _warned(rc, err, bad, "truncated JSON")
    assert snapshot(tmp_path) == before


def test_compare_studies_names_the_bad_record(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(RESULTS / "cpu-tiny-serial", a)
    shutil.copytree(RESULTS / "cpu-tiny-serial", b)
    bad = next(p for p in sorted((b / "runs").rglob("results.json"))
               if json.loads(p.read_text())["metrics"].get("throughput_tok_s"))
    _metric(float("inf"))(bad)
    before = snapshot(tmp_path)
    rc, out, err = _run(capsys, "compare", "studies", a, b)
    _warned(rc, err, bad, "is infinite")
    assert "inf" not in out.replace("infinite", "") and "nan" not in out.lower()
    assert snapshot(tmp_path) == before


# --- a thing compared with itself, or with nothing ------------------------------------------------

def test_engine_reuse_of_a_series_with_itself(tmp_path, capsys):
    study = _reuse_study(tmp_path / "s")
    before = snapshot(tmp_path)
    rc, _, err = _run(capsys, "check", "engine-reuse", study, "--per-run", "per-run", "--per-group", "per-run")
    one_line_error(rc, err, [str(study), "'per-run'", "same series"])
    assert snapshot(tmp_path) == before


def test_profile_diff_of_a_leg_with_itself(tmp_path, capsys):
    study = tmp_path / "p"
    shutil.copytree(RESULTS / "cpu-profile", study)
    before = snapshot(tmp_path)
    rc, _, err = _run(capsys, "compare", "profiles", study, "--model", "m", "--workload", "w", "--legs", "cpu-0.32.0",
                      "cpu-0.32.0")
    one_line_error(rc, err, [str(study), "'cpu-0.32.0' twice"])
    assert snapshot(tmp_path) == before


def test_equivalence_of_a_leg_with_itself_by_name_and_label(tmp_path, capsys):
    study = tmp_path / "e"
    shutil.copytree(RESULTS / "cpu-equivalence", study)
    before = snapshot(tmp_path)
    rc, _, err = _run(capsys, "check", "equivalence", study, "--legs", "cpu-0.32.0", "0.32")
    one_line_error(rc, err, [str(study), "same leg"])
    assert snapshot(tmp_path) == before


def test_compare_studies_of_one_folder_spelt_two_ways(tmp_path, capsys):
    study = tmp_path / "a"
    shutil.copytree(RESULTS / "cpu-tiny-serial", study)
    before = snapshot(tmp_path)
    rc, _, err = _run(capsys, "compare", "studies", study, tmp_path / "x" / ".." / "a")
    one_line_error(rc, err, [str(study.resolve()), "same study twice"])
    assert snapshot(tmp_path) == before


def test_compare_studies_sharing_no_cell(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(RESULTS / "cpu-tiny-serial", a)
    shutil.copytree(RESULTS / "cpu-tiny-mm", b)
    before = snapshot(tmp_path)
    rc, out, err = _run(capsys, "compare", "studies", a, b)
    one_line_error(rc, err, [str(b.resolve()), "shares no (model, workload)"])
    assert out == "" and snapshot(tmp_path) == before


def test_bisect_of_a_leg_with_itself(tmp_path, capsys):
    before = snapshot(tmp_path)
    rc, _, err = _run(capsys, "search", "bisect", "--scenario", "cpu-tiny", "--good", "cpu-0.32.0", "--bad", "cpu-0.32.0",
                      "--results", tmp_path / "bisect")
    one_line_error(rc, err, ["--good and --bad", "'cpu-0.32.0'"])
    assert snapshot(tmp_path) == before


# --- study.yaml -----------------------------------------------------------------------------------

@pytest.mark.parametrize("key,value", [("allow_different_work", '"no"'), ("allow_reused", "'yes'"),
                                       ("allow_different_work", "0")])
def test_study_yaml_booleans_are_true_or_false_only(tmp_path, capsys, key, value):
    study = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [1000.0], ("0.26", "m", "mixed"): [990.0]},
                         legs=[("gpu-0.18.0", "0.18"), ("gpu-0.26.0", "0.26")])
    text = (study / "study.yaml").read_text()
    (study / "study.yaml").write_text(text + f"{key}: {value}\n")
    line = len(text.splitlines()) + 1
    before = snapshot(tmp_path)
    rc, _, err = _run(capsys, "tables", study)
    one_line_error(rc, err, [str(study / "study.yaml"), f"line {line}", key, "true or false"])
    assert snapshot(tmp_path) == before


def test_main_series_naming_no_series_is_said_and_strict_refuses(tmp_path, capsys):
    study = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [1000.0], ("0.26", "m", "mixed"): [990.0]},
                         legs=[("gpu-0.18.0", "0.18"), ("gpu-0.26.0", "0.26")])
    yml = study / "study.yaml"
    yml.write_text(yml.read_text().replace("main_series: main", "main_series: mian"))
    before = snapshot(tmp_path)
    rc, _, err = _run(capsys, "tables", study, "--strict")
    one_line_error(rc, err, [str(yml.resolve()), "main_series (line 4)", "'mian'", "series: main"])
    assert snapshot(tmp_path) == before
    rc, _, err = _run(capsys, "tables", study)
    _warned(rc, err, yml, "'mian' names no series")
    assert "names no series" in (study / "derived" / "CANONICAL.md").read_text()
