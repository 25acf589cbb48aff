"""The device workflow offline: environment/device/pack.sh --test builds a stream of stand-in site
folders, feeds its parts (the first one corrupt) to machine.sh's unpacker here, with a temporary folder
for the machine's /root, and runs drive.sh on a plan of plain commands (stages in order, their exits
logged, none started once the budget is spent), then copies the results back as a watch call does.
The machine itself (an H200) is what cannot run here: this is its FAKE stand-in."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("zstd") is None, reason="zstd is what the lease's stream is compressed with")
def test_pack_unpack_and_the_plan_driver_offline():
    proc = subprocess.run(["bash", "environment/device/pack.sh", "--test"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "never: not started (the budget of 2 s is spent)" in proc.stdout
    assert proc.stdout.rstrip().endswith("the plan's stages and budget, copy back)")


def test_pack_refuses_without_a_plan():
    proc = subprocess.run(["bash", "environment/device/pack.sh"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "PLAN": ""})
    assert proc.returncode == 2 and proc.stderr.strip() == "pack.sh: PLAN=FILE names the lease's stages (docs/device.md)"
