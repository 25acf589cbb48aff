"""The package index and uv locks: which releases a project has, and what a lock pins.

Releases come from the index's PEP 691 JSON project page, the same source uv and pip read; the index
is the one they are configured with (the project names none of its own). `harness.experiments.window` lists a package's releases around
its declared range, `harness.experiments.bisect` the vLLM releases between two legs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, canonicalize_name,
                             parse_sdist_filename, parse_wheel_filename)
from packaging.version import InvalidVersion, Version

from harness.core.errors import UserError

PEP691 = "application/vnd.pypi.simple.v1+json"
# Where uv and pip are told which index to use, in the order they are asked.
INDEX_VARS = ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL")


def _pip_config() -> str | None:
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    value = out.stdout.strip()
    return value if out.returncode == 0 and value else None


def index_url() -> str:
    """The index uv and pip are configured with: their environment variables, then pip's
    configuration. The project names no index of its own: with none configured, it says so."""
    for var in INDEX_VARS:
        if os.environ.get(var):
            return os.environ[var].rstrip("/")
    configured = _pip_config()
    if configured:
        return configured.rstrip("/")
    raise UserError("no package index configured: set UV_DEFAULT_INDEX (or PIP_INDEX_URL), "
                    "`pip config set global.index-url URL`, or pass --index-url")


def _file_version(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None  # eggs, .exe installers, odd names: not something uv would install


def parse_simple_json(page: dict, *, include_pre: bool = False) -> list[Version]:
    """Releases on a PEP 691 project page, ascending: versions with at least one file not yanked.

    A version whose every file is yanked is not a release anyone resolves to, so it is left out;
    pre-releases (and dev releases) only with `include_pre`.
    """
    if not isinstance(page, dict) or not isinstance(page.get("files"), list):
        raise ValueError("not a PEP 691 project page (no 'files' list)")
    found: set[Version] = set()
    for f in page["files"]:
        if not isinstance(f, dict) or f.get("yanked"):
            continue
        v = _file_version(str(f.get("filename", "")))
        if v is not None and (include_pre or not v.is_prerelease):
            found.add(v)
    return sorted(found)


def index_versions(project: str, *, index: str | None = None, include_pre: bool = False,
                   timeout_s: float = 60) -> list[Version]:
    base = (index or index_url()).rstrip("/")
    url = f"{base}/{canonicalize_name(project)}/"
    req = urllib.request.Request(url, headers={"Accept": PEP691})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            ctype = resp.headers.get("Content-Type", "")
            body = resp.read()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise UserError(f"{url}: no project {project!r} on the index") from None
        raise UserError(f"{url}: cannot list releases of {project}: HTTP {e.code}") from None
    except (urllib.error.URLError, OSError) as e:
        raise UserError(f"{url}: cannot list releases of {project}: {e}") from None
    if "json" not in ctype:
        raise UserError(f"{url}: the index answered {ctype or 'no content type'}, not PEP 691 JSON")
    try:
        return parse_simple_json(json.loads(body), include_pre=include_pre)
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"{url}: unreadable project page: {e}") from None


def resolver_versions_between(uv: str, project: str, lo: Version, hi: Version, *, limit: int = 50,
                              timeout_s: float = 120) -> list[Version]:
    """Every version of `project` strictly between `lo` and `hi` that uv's resolver can install here,
    ascending, asked of uv itself (`uv pip compile --no-deps --prerelease allow`): the index it is
    configured with, its default included, so this works where no index URL is set for `index_versions`
    to read. uv picks the highest version in the range; each answer becomes the next upper bound."""
    import tempfile

    found: list[Version] = []
    top = hi
    with tempfile.TemporaryDirectory(prefix="harness-between-") as tmp:
        while len(found) < limit:
            try:
                out = subprocess.run([uv, "pip", "compile", "--no-deps", "--prerelease", "allow", "--quiet",
                                      "--no-header", "-"], input=f"{project}>{lo},<{top}\n", capture_output=True,
                                     text=True, timeout=timeout_s, cwd=tmp)
            except (OSError, subprocess.SubprocessError) as e:
                raise UserError(f"uv pip compile {project}>{lo},<{top}: {e}") from None
            if out.returncode != 0:
                if "No solution found" in out.stderr or "no version of" in out.stderr.lower():
                    break   # nothing (more) between
                tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
                raise UserError(f"uv pip compile {project}>{lo},<{top} failed: {tail}")
            pin = next((ln.split("==", 1)[1].strip() for ln in out.stdout.splitlines()
                        if canonicalize_name(ln.split("==", 1)[0].strip()) == canonicalize_name(project)
                        and "==" in ln), None)
            if pin is None:
                break
            v = Version(pin)
            if not lo < v < top:
                break
            found.append(v)
            top = v
    return sorted(found)


def lock_versions(lock: str) -> dict[str, str]:
    """name -> version of every `name==version` line of a uv lock."""
    out = {}
    for line in lock.splitlines():
        req = line.split(";", 1)[0].strip()
        if "==" in req:
            name, ver = req.split("==", 1)
            out[canonicalize_name(name.split("[", 1)[0])] = ver.strip()
    return out
