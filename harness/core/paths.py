"""The project's paths, in one place. Everything else asks here."""

from __future__ import annotations

import os
from pathlib import Path

PROJ_ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = PROJ_ROOT / "scenarios"
ENVIRONMENT = PROJ_ROOT / "environment"
LEGS = ENVIRONMENT / "legs"
RESULTS = PROJ_ROOT / "results"
NOTEBOOKS = PROJ_ROOT / "notebooks"


def cache_dir() -> Path:
    """Project-local cache (leg venvs, models, vLLM's cache); HARNESS_CACHE moves it."""
    return Path(os.environ.get("HARNESS_CACHE", PROJ_ROOT / ".cache")).resolve()


def legs_dir() -> Path:
    return cache_dir() / "legs"


def lock_path() -> Path:
    """One lock per node: two sweeps must never measure at once, whichever checkout they run from."""
    return Path(os.environ.get("HARNESS_LOCK", Path.home() / ".cache" / "vllm-harness" / "measure.lock"))
