"""The real worker script, run by this Python (no vLLM needed for what is tested here)."""

from __future__ import annotations

import json
import os
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


def test_manifest_records_each_gpus_clocks_power_and_temperature_and_skips_fields_the_driver_refuses(
        tmp_path, monkeypatch):
    """FAKE nvidia-smi (this machine has no GPU): two cards; the driver refuses one state field, and so
    any query that names it."""
    from harness.measure.worker import stack

    fake = tmp_path / "nvidia-smi"
    fake.write_text("""#!/bin/sh
case "$1" in
  --query-gpu=index,*) printf '0, NVIDIA H100 80GB HBM3, 580.1, 81559 MiB, GPU-a\\n1, NVIDIA H100 80GB HBM3, 580.1, 81559 MiB, GPU-b\\n' ;;
  --query-compute-apps=*) ;;
  --query-gpu=*clocks_event_reasons.active*) echo 'Field "clocks_event_reasons.active" is not a valid field to query.' >&2; exit 2 ;;
  --query-gpu=clocks.sm) printf '1980 MHz\\n1755 MHz\\n' ;;
  --query-gpu=*) v="${1#--query-gpu=}"; printf '%s-0\\n%s-1\\n' "$v" "$v" ;;
esac
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    smi = stack._nvidia_smi()
    assert [g["uuid"] for g in smi["gpus"]] == ["GPU-a", "GPU-b"]
    assert [s["clocks.sm"] for s in smi["state"]] == ["1980 MHz", "1755 MHz"]
    assert smi["state"][1]["power.limit"] == "power.limit-1"
    assert all("clocks_event_reasons.active" not in s for s in smi["state"])
    assert set(smi["state"][0]) == set(stack.GPU_STATE) - {"clocks_event_reasons.active"}


def test_gpu_state_is_one_query_where_the_driver_knows_every_field(tmp_path, monkeypatch):
    """FAKE nvidia-smi (this machine has no GPU): one card, every field known; each call is logged."""
    from harness.measure.worker import stack

    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"""#!/bin/sh
echo "$1" >> {tmp_path}/calls
v="${{1#--query-gpu=}}"; echo "$v" | tr ',' '\\n' | sed 's/$/=x/' | paste -sd, | sed 's/,/, /g'
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert stack._gpu_state(str(fake)) == [{f: f"{f}=x" for f in stack.GPU_STATE}]
    assert len((tmp_path / "calls").read_text().splitlines()) == 1
