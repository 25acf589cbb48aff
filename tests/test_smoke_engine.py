"""environment/device/smoke_engine.run_one: a timed-out child is ended with its whole process group, so
a grandchild holding the stdout pipe (as vLLM's engine core does) cannot hang the read. FAKE children:
plain Python processes, no engine."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("smoke_engine", ROOT / "environment/device/smoke_engine.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_timeout_ends_the_grandchild_that_holds_stdout(tmp_path: Path) -> None:
    # FAKE child: starts a grandchild that inherits stdout and sleeps, then sleeps itself.
    code = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            "print('started', flush=True); time.sleep(60)")
    t0 = time.monotonic()
    rc, out = _module().run_one([sys.executable, "-c", code], dict(os.environ), 1.0, str(tmp_path / "log"))
    assert time.monotonic() - t0 < 20
    assert rc is not None and rc < 0 and "started" in out
    assert "stopped after 1 s" in (tmp_path / "log").read_text()


def test_a_child_that_finishes_returns_its_output(tmp_path: Path) -> None:
    rc, out = _module().run_one([sys.executable, "-c", "print('{\"ok\": 1}')"], dict(os.environ), 20.0,
                                str(tmp_path / "log"))
    assert rc == 0 and out.strip() == '{"ok": 1}'
