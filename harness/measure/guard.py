"""Contamination guards: one measuring sweep per node, no foreign vLLM plugins, no busy GPU.

The study's first round was void because a plugin (vllm-omni) rode along in one leg and all jobs ran
concurrently. Each guard refuses to measure; `--allow-dirty` measures anyway and every record then
carries what was found, so canonical selection can leave it out.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from harness.core import paths
from harness.core.errors import NodeBusyError, UserError


@contextlib.contextmanager
def node_lock(path: Path | None = None) -> Iterator[Path]:
    path = path or paths.lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = path.with_suffix(".holder")
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        who = holder.read_text().strip() if holder.exists() else "unknown"
        raise NodeBusyError(path, who) from None
    try:
        holder.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
        yield path
    finally:
        holder.unlink(missing_ok=True)
        lock.release()


def gpu_processes() -> list[str]:
    """Compute processes on the visible GPUs; [] where there is no NVIDIA GPU."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]


def check(findings: list[str], allow_dirty: bool, what: str) -> list[str]:
    """Refuse on findings unless allowed; returns what the record must keep."""
    if findings and not allow_dirty:
        raise UserError(f"refusing to measure: {what}: {'; '.join(findings)} (use --allow-dirty to measure "
                        "anyway; the records will say so)")
    return [f"{what}: {f}" for f in findings]
