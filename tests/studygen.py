"""FAKE study folders for the analysis tests: records written in the harness's own format, with
made-up values. Nothing here is a measurement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from harness.schema import record


def record_dict(*, leg: str = "gpu-0.18.0", leg_label: str = "0.18", model: str = "m", workload: str = "mixed",
                kind: str = "throughput", value: float | None = 1000.0, repeat: int = 1, series: str = "main",
                arm: str = "default", status: str = "ok", study: str = "s", tp: int = 1,
                manifest: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """One valid schema-2 record as JSON data; `kw` overrides any top-level field."""
    metrics: dict[str, Any] = {}
    if status == "ok" and value is not None:
        metrics = {"throughput_tok_s": value} if kind == "throughput" else {"ms_per_token": value}
    run_id = f"{series}/{leg}/{model}/{workload}/{arm}/r{repeat}"
    rec = {
        "schema_version": record.SCHEMA_VERSION, "study": study, "series": series, "run_id": run_id,
        "fingerprint": f"fp-{abs(hash(run_id)) % 10**8}", "harness_version": "0.1.0", "invocation_id": "inv-1",
        "node": "node-a", "leg": leg, "leg_label": leg_label, "compat_id": f"cid-{leg}", "model": model, "tp": tp,
        "workload": workload, "workload_spec": {"kind": kind}, "arm": arm, "repeat": repeat, "status": status,
        "metrics": metrics, "work": {"num_seqs": 100, "output_tokens": 51200},
        "manifest": {"vllm": leg_label + ".0", "torch": "2.10.0", "torch_cuda": "12.8", "transformers": "4.57.6",
                     "device": "8x FAKE-GPU", "host": "node-a"} | (manifest or {}),
        "failure": None if status == "ok" else {"exit_code": 1, "reason": kw.pop("reason", "RuntimeError: boom")},
    }
    return rec | kw


def write_run(study_dir: Path, rec: dict[str, Any], *, log: str | bytes | None = None) -> Path:
    run_dir = Path(study_dir) / "runs" / rec["run_id"]
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "results.json").write_text(json.dumps(rec))
    if log is not None:
        (run_dir / "run.log").write_bytes(log if isinstance(log, bytes) else log.encode())
    return run_dir


def write_study_yaml(study_dir: Path, legs: list[tuple[str, str]], **extra: Any) -> None:
    study_dir.mkdir(parents=True, exist_ok=True)
    meta = {"name": study_dir.name, "title": "FAKE study", "provenance": "measured", "main_series": "main",
            "legs": [{"name": n, "label": lb} for n, lb in legs]} | extra
    (study_dir / "study.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))


LEGS = [("gpu-0.18.0", "0.18"), ("gpu-0.26.0", "0.26"), ("gpu-0.29.0", "0.29")]


def simple_study(study_dir: Path, values: dict[tuple[str, str, str], list[float] | None],
                 *, legs: list[tuple[str, str]] = LEGS, tp: int = 1, **extra: Any) -> Path:
    """A study with one record per (leg label, model, workload) and repeat: `values[(label, model,
    workload)]` lists the repeats' values (None: one failed run). Workloads starting "single" or
    "fixed" are latency workloads."""
    write_study_yaml(study_dir, legs, **extra)
    by_label = {lb: n for n, lb in legs}
    for (label, model, workload), vals in values.items():
        kind = "latency" if workload.startswith(("single", "fixed")) else "throughput"
        if vals is None:
            write_run(study_dir, record_dict(leg=by_label[label], leg_label=label, model=model, workload=workload,
                                             kind=kind, status="failed", tp=tp))
            continue
        for i, v in enumerate(vals, start=1):
            write_run(study_dir, record_dict(leg=by_label[label], leg_label=label, model=model, workload=workload,
                                             kind=kind, value=v, repeat=i, tp=tp))
    return study_dir
