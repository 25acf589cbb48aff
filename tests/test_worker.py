"""The real worker script, run by this Python (no vLLM needed for what is tested here)."""

from __future__ import annotations

import json
import subprocess
import sys

from harness.measure.run import WORKER
from harness.workloads.base import sha256_json as prompts_sha
from harness.workloads.text import token_ids as make_prompts


def test_an_image_workload_on_a_python_without_torchvision_is_refused_before_the_engine(tmp_path):
    # This test's Python has no torchvision: the image modality's preflight refuses with that as the
    # root cause, before vLLM is imported and before any prompt is built.
    spec = {"run_dir": str(tmp_path), "model_path": "x", "tp": 1, "engine_args": {},
            "workload": {"name": "image", "kind": "throughput", "modality": "image", "input_len": 8,
                         "output_len": 4, "num_prompts": 2, "seed": 0}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, str(WORKER), str(tmp_path / "spec.json")], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "torchvision" in proc.stderr and "declare it in the leg spec" in proc.stderr
    phases = [json.loads(x)["phase"] for x in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert phases == ["worker_start", "error"] and not (tmp_path / "worker.json").exists()


def test_prompts_are_deterministic_and_within_vocab():
    a, b = make_prompts(4, 16, 2048, seed=3), make_prompts(4, 16, 2048, seed=3)
    assert a == b and prompts_sha(a) == prompts_sha(b)
    assert prompts_sha(make_prompts(4, 16, 2048, seed=4)) != prompts_sha(a)
    assert all(10 <= t < 2047 for p in a for t in p) and all(len(p) == 16 for p in a)
