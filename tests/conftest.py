from __future__ import annotations

import functools
import os
import sys
import textwrap
from pathlib import Path

import pytest

from harness.measure import leg as legmod
from harness.measure import run as runmod
from harness.measure import sweep as sweepmod

FAKE_BENCH = Path(__file__).parent / "fakes" / "fake_bench.py"


@pytest.fixture(autouse=True)
def _private_lock(tmp_path_factory, monkeypatch):
    # Each test gets its own node lock unless it asks for the shared one, so a developer's running
    # sweep does not make the suite fail (the lock itself is tested explicitly).
    monkeypatch.setenv("HARNESS_LOCK", str(tmp_path_factory.mktemp("lock") / "measure.lock"))


def write_scenario(dir_: Path, body: str, name: str = "t") -> Path:
    path = dir_ / f"{name}.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def fake_env(tmp: Path, leg_name: str = "cpu-0.32.0", spec: legmod.LegSpec | None = None) -> legmod.LegEnv:
    """FAKE leg env: the test's own Python stands in for a leg venv (no vLLM). `spec`: a leg without a
    file of its own (a history's derived leg)."""
    root = tmp / "legs" / f"{leg_name}-fake"
    (root / "bin").mkdir(parents=True, exist_ok=True)
    py = root / "bin" / "python"
    if not py.exists():
        py.symlink_to(sys.executable)
    (root / "harness-leg.json").write_text("{}")
    return legmod.LegEnv(leg=spec or legmod.load_leg(leg_name), pins=(), lock="fake==0\n", compat_id="fakecompat00",
                         root=root)


@pytest.fixture
def fake_sweep(tmp_path, monkeypatch):
    """Sweeps whose runs use the FAKE bench worker and FAKE leg envs; everything else is real."""
    env = fake_env(tmp_path)

    def resolve_envs(sc, legs, models, arms, *, offline=False, dry_run=False, specs=None):
        return {(ln, m, a): fake_env(tmp_path, ln, (specs or {}).get(ln)) for ln in legs for m in models for a in arms}

    monkeypatch.setattr(sweepmod, "resolve_envs", resolve_envs)
    monkeypatch.setattr(sweepmod, "RunSpec", functools.partial(runmod.RunSpec, worker=FAKE_BENCH))
    monkeypatch.setattr(sweepmod, "build_tiny", lambda *a, **k: tmp_path / "no-model")
    return env


def sweep_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def worker_module(name: str, as_name: str):
    """A worker script (harness/measure/worker/NAME) loaded as a module, its folder on sys.path while it
    imports its siblings, as the leg's Python runs it."""
    import importlib.util
    import sys

    from harness.measure.run import WORKER

    spec = importlib.util.spec_from_file_location(as_name, WORKER.parent / name)
    assert spec and spec.loader
    sys.path.insert(0, str(WORKER.parent))
    try:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(WORKER.parent))
    return mod
