"""`make lab`: JupyterLab on the project's venv and kernel, serving the diagnostic notebooks. Started
headless on 127.0.0.1 with a token, asked over its REST API, then stopped with its process group."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from harness.core import paths


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


def test_make_lab_serves_the_notebooks_with_the_project_kernel(tmp_path):
    port, token = _free_port(), secrets.token_hex(16)
    args = f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token={token}"
    if os.geteuid() == 0:
        args += " --allow-root"          # containers and CI run as root; JupyterLab refuses that unasked
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path / "runtime")
    log = open(tmp_path / "lab.log", "w+")
    proc = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS={args}"], cwd=paths.PROJ_ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        status = 0
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, _ = _get(f"{base}/api/status?token={token}")
                if status == 200:
                    break
            except OSError:
                pass
            time.sleep(1)
        log.seek(0)
        assert status == 200, f"JupyterLab did not serve: {log.read()[-2000:]}"
        assert _get(f"{base}/api/status")[0] == 403                          # the token is required
        code, lab = _get(f"{base}/lab/tree/notebooks?token={token}")
        assert code == 200 and b"JupyterLab" in lab
        specs = json.loads(_get(f"{base}/api/kernelspecs?token={token}")[1])
        argv0 = Path(specs["kernelspecs"]["python3"]["spec"]["argv"][0])
        assert argv0 == Path(sys.executable), argv0                       # the project's venv python
        listing = json.loads(_get(f"{base}/api/contents/notebooks?token={token}")[1])
        names = {c["name"] for c in listing["content"]}
        assert {"235b_repeat.ipynb", "moe_backend.ipynb", "cutlass_falsification.ipynb", "dispersion.ipynb"} <= names
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
