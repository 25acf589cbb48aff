"""The project's paths, in one place. Everything else asks here."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from harness.core.errors import UserError

PROJ_ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = PROJ_ROOT / "scenarios"
ENVIRONMENT = PROJ_ROOT / "environment"
LEGS = ENVIRONMENT / "legs"
RESULTS = PROJ_ROOT / "results"
NOTEBOOKS = PROJ_ROOT / "notebooks"


def cache_dir() -> Path:
    """Project-local cache (leg venvs, models, vLLM's cache); HARNESS_CACHE moves it."""
    return Path(os.environ.get("HARNESS_CACHE", PROJ_ROOT / ".cache")).resolve()


def build_lock(dest: Path):
    """A lock for building one cache entry (a leg venv, a tiny model) at `dest`: two processes that
    want the same entry at once (two sweeps, two test workers) build it once, the second one waiting
    and then reusing it. The lock file sits beside `dest`, in the cache folder the harness owns."""
    from filelock import FileLock

    dest.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(dest.with_name(f".{dest.name}.build-lock")))


def legs_dir() -> Path:
    return cache_dir() / "legs"


def lock_path() -> Path:
    """One lock per node: two sweeps must never measure at once, whichever checkout they run from."""
    return Path(os.environ.get("HARNESS_LOCK", Path.home() / ".cache" / "vllm-harness" / "measure.lock"))


# A name that becomes one path component (study, series, leg, workload, arm): letters, digits and
# `._+-`, starting with a letter or digit, so it can be neither `..` nor hidden nor absolute.
SAFE_NAME = r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}"
_SAFE = re.compile(SAFE_NAME)


def unsafe_name(name: str, *, slashes: bool = False) -> str | None:
    """Why `name` cannot be a path component (None if it can). `slashes`: a model name such as
    `org/model` may hold several components, each of which must be safe."""
    if not isinstance(name, str):
        return f"{name!r} is not a string"
    parts = name.split("/") if slashes else [name]
    for part in parts:
        if not _SAFE.fullmatch(part):
            return (f"{name!r} cannot name a folder: use letters, digits and ._+- "
                    f"(starting with a letter or digit, at most 128 characters"
                    f"{', / between parts' if slashes else ''})")
    return None


def inside(root: Path | str, *parts: str) -> Path:
    """`root / parts`, refused (UserError) if it resolves anywhere but inside `root`.

    Names are validated on load; this is the second line, where paths are built, so that a name
    that slipped past validation (a record read back, a CLI argument) still cannot climb out.
    """
    base = Path(root).resolve()
    target = base.joinpath(*parts).resolve()
    if target != base and base not in target.parents:
        raise UserError(f"{Path(root).joinpath(*parts)}: resolves to {target}, outside {base}; refused")
    return Path(root).joinpath(*parts)


def unclobbered(path: Path, settings: dict, existing: Callable[[Path], dict | None]) -> Path:
    """`path`, or a sibling named by the settings' hash when `path` already holds a record of
    different settings: a later, different measurement never replaces an earlier one. `existing`
    reads the settings of the record at a path (None if it cannot)."""
    import hashlib
    import json

    if not path.exists() or existing(path) == settings:
        return path
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return path.with_name(f"{path.stem}--{digest}{path.suffix}")
