from __future__ import annotations

import json

import pytest

from harness.schema import record
from harness.core.errors import UserError
from harness.measure.run import failure_reason, strip_prefix, tracebacks


def _rec(**kw) -> record.RunRecord:
    base = dict(study="s", series="main", run_id="x", fingerprint="f", harness_version="0", leg="l",
                leg_label="L", model="m", tp=1, workload="w", status="ok")
    return record.RunRecord(**(base | kw))


def test_roundtrip(tmp_path):
    rec = _rec(metrics={"throughput_tok_s": 1.5})
    record.write(rec, tmp_path)
    assert record.read(tmp_path / "results.json") == rec


def test_records_are_frozen():
    with pytest.raises(Exception):
        _rec().status = "failed"


def test_migrates_the_hand_run_format(tmp_path):
    d = tmp_path / "study" / "runs" / "run1"
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps({
        "version": "0.18.0", "model": "Llama", "workload": "mixed", "num_seqs": 1000,
        "vllm_output_tokens": 512000, "elapsed": 10.0, "tokens_per_second": 21943.0, "rc": 0}))
    rec = record.read(d / "results.json")
    assert rec.schema_version == record.SCHEMA_VERSION and rec.leg == "0.18.0" and rec.metrics.throughput_tok_s == 21943.0
    assert rec.work.output_tokens == 512000 and rec.status == "ok"


def test_newer_schema_is_refused(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"schema_version": record.SCHEMA_VERSION + 1}))
    with pytest.raises(UserError, match="newer than this harness reads"):
        record.read(tmp_path / "results.json")


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "x.json"
    with pytest.raises(TypeError):
        record.write_json_atomic(target, {"bad": object()})
    assert not target.exists() and list(tmp_path.iterdir()) == []


VLLM_LOG = """\
(MainProcess pid=1) INFO 11-29 23:57:00 [llm.py:1] starting
(Worker pid=2936) ERROR 11-29 23:58:00 [multiproc_executor.py:1063] Traceback (most recent call last):
(Worker pid=2936) ERROR 11-29 23:58:00 [multiproc_executor.py:1063]   File "cpu_attn.py", line 5, in f
(Worker pid=2936) ERROR 11-29 23:58:00 [multiproc_executor.py:1063]     raise RuntimeError(msg)
(EngineCore pid=2924) ERROR 11-29 23:58:00 [core.py:1512] Traceback (most recent call last):
(Worker pid=2936) ERROR 11-29 23:58:00 [multiproc_executor.py:1063] RuntimeError: Unsupported CPU attention configuration: head_dim=16
(EngineCore pid=2924) ERROR 11-29 23:58:00 [core.py:1512]   File "core.py", line 9, in run
(EngineCore pid=2924) ERROR 11-29 23:58:00 [core.py:1512] RuntimeError: Worker failed with error 'Unsupported', please check the stack trace above for the root cause
Traceback (most recent call last):
  File "bench.py", line 3, in main
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""


def test_tracebacks_of_every_process_and_root_cause():
    tbs = tracebacks(VLLM_LOG)
    assert len(tbs) == 3
    assert tbs[0].splitlines()[-1] == "RuntimeError: Unsupported CPU attention configuration: head_dim=16"
    assert failure_reason(tbs) == "RuntimeError: Unsupported CPU attention configuration: head_dim=16"
    assert strip_prefix("(EngineCore_DP0 pid=12) ERROR 11-29 23:58:00 [core.py:1] boom") == ("EngineCore_DP0:12", "boom")
