"""Building a leg's venv when the index briefly hides a version the lock names. The index cannot be
made to do that here, so `uv` is a fake (a script that fails the first sync as uv does, "...
unsatisfiable", and succeeds once asked to re-read the index); the rest of `ensure` is the real one."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from harness.core.errors import LegEnvError
from harness.measure import leg as legmod

FAKE_UV = """#!/bin/sh
echo "$*" >> "{log}"
case "$1" in
  venv) for a in "$@"; do root=$a; done; mkdir -p "$root/bin"; exit 0 ;;
esac
for a in "$@"; do [ "$a" = --refresh ] && [ "{heals}" = yes ] && exit 0; done
echo "  cause: Because there is no version of sse-starlette==3.7.1 and you require sse-starlette==3.7.1, we can conclude that your requirements are unsatisfiable." >&2
exit 1
"""


def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, heals: bool) -> tuple[legmod.LegEnv, Path]:
    log = tmp_path / "uv.log"
    uv = tmp_path / "uv"
    uv.write_text(FAKE_UV.format(log=log, heals="yes" if heals else "no"))
    uv.chmod(uv.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(legmod, "_uv", lambda: str(uv))
    spec = legmod.load_leg("cpu-0.32.0").model_copy(update={"extra": [], "patches": []})
    env = legmod.LegEnv(leg=spec, pins=(), lock="sse-starlette==3.7.1\n", compat_id="fakecompat01",
                        root=tmp_path / "legs" / "cpu-0.32.0-fakecompat01")
    return env, log


def test_a_locked_version_the_index_hid_once_is_fetched_on_a_fresh_read(tmp_path, monkeypatch):
    env, log = _env(tmp_path, monkeypatch, heals=True)
    rep = legmod.ensure(env)
    assert not rep.reused and (env.root / "harness-leg.json").exists()
    syncs = [ln for ln in log.read_text().splitlines() if ln.startswith("pip sync")]
    assert len(syncs) == 2 and "--refresh" not in syncs[0] and syncs[1].endswith("--refresh")


def test_a_version_the_index_still_lacks_fails_the_build_and_leaves_no_env(tmp_path, monkeypatch):
    env, log = _env(tmp_path, monkeypatch, heals=False)
    with pytest.raises(LegEnvError, match=r"cpu-0\.32\.0\.yaml: leg cpu-0\.32\.0: install failed .*unsatisfiable"):
        legmod.ensure(env)
    assert not env.root.exists()
    assert sum(ln.startswith("pip sync") for ln in log.read_text().splitlines()) == 2


SLOW_UV = """#!/bin/sh
echo "$1" >> "{log}"
case "$1" in
  venv) for a in "$@"; do root=$a; done; sleep 1; mkdir -p "$root/bin"; exit 0 ;;
esac
exit 0
"""


def test_two_processes_wanting_the_same_env_build_it_once(tmp_path, monkeypatch):
    """FAKE uv (a venv takes a second to make): two builders of one leg env at once, as two sweeps or two
    test workers. One builds; the other waits for it and reuses the env, never deleting a build in
    progress (ensure deletes an incomplete env before building)."""
    import threading

    log = tmp_path / "uv.log"
    uv = tmp_path / "uv"
    uv.write_text(SLOW_UV.format(log=log))
    uv.chmod(uv.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(legmod, "_uv", lambda: str(uv))
    spec = legmod.load_leg("cpu-0.32.0").model_copy(update={"extra": [], "patches": []})
    env = legmod.LegEnv(leg=spec, pins=(), lock="x==1\n", compat_id="fakecompat02",
                        root=tmp_path / "legs" / "cpu-0.32.0-fakecompat02")
    reports: list[legmod.BuildReport] = []
    threads = [threading.Thread(target=lambda: reports.append(legmod.ensure(env))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(r.reused for r in reports) == [False, True]
    assert log.read_text().splitlines().count("venv") == 1
    assert (env.root / "harness-leg.json").exists()
