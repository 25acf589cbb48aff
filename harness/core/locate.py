"""Study folders as the report names them: resolved from the project root, shown relative to it."""

from __future__ import annotations

from pathlib import Path

from harness.core import paths


def resolve(study: Path | str) -> Path:
    p = Path(study)
    if not p.is_absolute() and not p.exists() and (paths.PROJ_ROOT / p).exists():
        p = paths.PROJ_ROOT / p
    return p.resolve()


def rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(paths.PROJ_ROOT))
    except ValueError:
        return path.name
