"""The loader: a study folder -> one tidy table, bad files reported by path and left out.

The study folders here are FAKE (tests/studygen.py): records in the harness's format with made-up
values."""

from __future__ import annotations

import json

import pytest

from harness.schema import record
from harness.analyze.dataset import columns, load, read_record
from harness.core.errors import UserError
from studygen import LEGS, record_dict, simple_study, write_run, write_study_yaml


def test_one_row_per_record_with_every_column(tmp_path):
    simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [10.0, 12.0], ("0.26", "m", "mixed"): [20.0],
                                  ("0.18", "m", "single-request"): [3.5]})
    ds = load(tmp_path / "s")
    df = ds.records
    assert list(df.columns) == list(columns()) and len(ds) == 4 and ds.problems == ()
    row = df[(df["leg"] == "gpu-0.18.0") & (df["workload"] == "mixed") & (df["repeat"] == 2)].iloc[0]
    assert row["throughput_tok_s"] == 12.0 and row["kind"] == "throughput" and row["leg_label"] == "0.18"
    assert row["num_seqs"] == 100 and row["output_tokens"] == 51200 and row["vllm"] == "0.18.0"
    assert row["device"] == "8x FAKE-GPU" and row["run_dir"] == "runs/main/gpu-0.18.0/m/mixed/default/r2"
    assert df.loc[df["workload"] == "single-request", "ms_per_token"].iloc[0] == 3.5
    assert [x.label for x in ds.study.legs] == ["0.18", "0.26", "0.29"]


def test_a_failed_runs_kind_comes_from_its_workloads_other_records(tmp_path):
    # A failed run records no metric and (transcribed) no workload_spec: its kind is the workload's.
    d = simple_study(tmp_path / "s", {("0.26", "m", "mixed"): [20.0]})
    rec = record_dict(leg="gpu-0.18.0", model="m", workload="mixed", status="failed", workload_spec={})
    write_run(d, rec)
    df = load(d).records
    assert set(df["kind"]) == {"throughput"}


@pytest.mark.parametrize("content, what", [
    (b'{"schema_version": 2, "study": "s", "series": "ma', "truncated JSON"),
    (b'{"schema_version": 2,, "study": "s"}', "corrupt JSON"),
    (b"", "empty file"),
    (b'{"schema_version": 2, "study": "s\xff\xfe"}', "not UTF-8"),
    (b"[1, 2]", "not a JSON object"),
    (json.dumps({"schema_version": record.SCHEMA_VERSION + 1, "study": "s"}).encode(),
     f"schema_version {record.SCHEMA_VERSION + 1} is newer than this harness reads"),
    (json.dumps({"schema_version": 2, "study": "s"}).encode(), "not a valid run record"),
])
def test_a_bad_record_is_reported_by_path_and_the_rest_loads(tmp_path, content, what):
    d = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [10.0], ("0.26", "m", "mixed"): [20.0]})
    bad = d / "runs" / "main" / "gpu-0.29.0" / "m" / "mixed" / "default" / "r1"
    bad.mkdir(parents=True)
    (bad / "results.json").write_bytes(content)
    ds = load(d)
    assert len(ds) == 2
    assert len(ds.problems) == 1
    assert ds.problems[0].path == bad / "results.json" and what in ds.problems[0].what
    assert "\n" not in str(ds.problems[0])


def test_read_record_raises_one_line_user_error_naming_the_file(tmp_path):
    p = tmp_path / "results.json"
    p.write_text('{"schema_version": 2')
    with pytest.raises(UserError, match=r"results\.json: truncated JSON") as e:
        read_record(p)
    assert "\n" not in str(e.value)


def test_schema_1_hand_run_record_is_migrated(tmp_path):
    d = tmp_path / "s"
    write_study_yaml(d, LEGS)
    run = d / "runs" / "main" / "gpu-0.18.0" / "Llama" / "mixed" / "default" / "r1"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps({
        "version": "gpu-0.18.0", "model": "Llama", "workload": "mixed", "num_seqs": 1000,
        "vllm_output_tokens": 512000, "elapsed": 33.1, "tokens_per_second": 21943.0, "rc": 0}))
    ds = load(d)
    assert ds.problems == ()
    row = ds.records.iloc[0]
    assert (row["leg"], row["model"], row["workload"], row["status"]) == ("gpu-0.18.0", "Llama", "mixed", "ok")
    assert row["throughput_tok_s"] == 21943.0 and row["kind"] == "throughput"
    assert row["num_seqs"] == 1000 and row["output_tokens"] == 512000 and row["series"] == "main"


def test_a_non_utf8_log_is_reported_and_left_out_of_attribution(tmp_path):
    d = simple_study(tmp_path / "s", {("0.26", "m", "mixed"): [20.0]})
    rec = record_dict(leg="gpu-0.18.0", model="m", workload="mixed", status="failed",
                      reason="exit code 1")
    log = b"Traceback (most recent call last):\n\xff\xfe garbage\nCUDA out of memory\n"
    run = write_run(d, rec, log=log)
    ds = load(d)
    assert len(ds) == 2
    assert [p.path for p in ds.problems] == [run / "run.log"]
    assert "not UTF-8" in ds.problems[0].what and "record loaded" in ds.problems[0].what
    failed = ds.records[ds.records["status"] == "failed"].iloc[0]
    # The log would have said out-of-memory; left out, the record alone says nothing known.
    assert failed["failure_signature"] == "unknown"


def test_a_failed_runs_log_is_attributed_at_load(tmp_path):
    d = simple_study(tmp_path / "s", {("0.26", "m", "mixed"): [20.0]})
    rec = record_dict(leg="gpu-0.18.0", model="m", workload="mixed", status="failed", reason="exit code 1")
    write_run(d, rec, log="(EngineCore_DP0 pid=7) ERROR 11-29 23:58:00 [core.py:1] torch.OutOfMemoryError: "
                          "CUDA out of memory. Tried to allocate 2.00 GiB\n")
    failed = load(d).records.query("status == 'failed'").iloc[0]
    assert failed["failure_signature"] == "cuda-oom"
    assert failed["failure_error"].startswith("torch.OutOfMemoryError")


def test_reused_comes_from_the_latest_sweep_index_that_lists_the_run(tmp_path):
    d = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [10.0], ("0.26", "m", "mixed"): [20.0],
                                      ("0.29", "m", "mixed"): [30.0]})
    (d / "sweeps").mkdir()
    a, b, c = (f"main/{leg}/m/mixed/default/r1" for leg, _ in LEGS)
    (d / "sweeps" / "20260101T000000-aaaaaa.json").write_text(json.dumps({
        "invocation_id": "20260101T000000-aaaaaa",
        "runs": [{"run_id": a, "reused": False}, {"run_id": b, "reused": False}]}))
    (d / "sweeps" / "20260102T000000-bbbbbb.json").write_text(json.dumps({
        "invocation_id": "20260102T000000-bbbbbb", "runs": [{"run_id": b, "reused": True}]}))
    (d / "sweeps" / "20260103T000000-cccccc.json").write_text("{ not json")
    ds = load(d)
    reused = dict(zip(ds.records["leg"], ds.records["reused"]))
    assert reused["gpu-0.18.0"] is False or reused["gpu-0.18.0"] == False  # noqa: E712
    assert reused["gpu-0.26.0"] == True  # noqa: E712
    assert reused["gpu-0.29.0"] is None  # listed by no sweep
    assert ds.records.set_index("leg").loc["gpu-0.26.0", "reused_by"] == "20260102T000000-bbbbbb"
    assert [p.path.name for p in ds.problems] == ["20260103T000000-cccccc.json"]
    assert ds.sweep_order == (("m", "mixed"),)


def test_without_study_yaml_legs_come_from_the_records(tmp_path):
    d = tmp_path / "s"
    write_run(d, record_dict(leg="gpu-0.26.0", leg_label="0.26"))
    write_run(d, record_dict(leg="gpu-0.18.0", leg_label="0.18"))
    ds = load(d)
    assert {x.name: x.label for x in ds.study.legs} == {"gpu-0.18.0": "0.18", "gpu-0.26.0": "0.26"}
    assert ds.study.main_series == "main"


def test_not_a_study_folder_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no such study folder"):
        load(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="not a study folder"):
        load(tmp_path / "empty")


def test_a_broken_study_yaml_is_a_user_error_naming_it(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    (d / "study.yaml").write_text("legs: [unclosed\n")
    with pytest.raises(UserError, match=r"study\.yaml"):
        load(d)
    (d / "study.yaml").write_text("legs: 3\n")
    with pytest.raises(UserError, match=r"study\.yaml: line 1: legs"):
        load(d)


def test_a_run_folder_without_a_record_is_listed_as_unfinished_and_named_in_the_limitations(tmp_path):
    from harness.publish.sections.limitations import limitations
    from harness.publish.study import load_study

    simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [10.0, 12.0], ("0.26", "m", "mixed"): [20.0, 21.0]})
    cut = tmp_path / "s" / "runs" / "main" / "gpu-0.26.0" / "m" / "mixed" / "default" / "r3"
    cut.mkdir(parents=True)
    (cut / "spec.json").write_text("{}")  # a run that started (its spec written) and was cut off
    group = cut.parent.parent / "engine-default-r3-1"  # a group engine's folder is no run
    group.mkdir()
    (group / "spec.json").write_text("{}")
    ds = load(tmp_path / "s")
    assert ds.unfinished == ("runs/main/gpu-0.26.0/m/mixed/default/r3",) and len(ds) == 4
    (said,) = [x for x in limitations(load_study(tmp_path / "s")) if x.startswith("**Runs started but never")]
    assert "`runs/main/gpu-0.26.0/m/mixed/default/r3`" in said
