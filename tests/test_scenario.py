from __future__ import annotations

import subprocess
import sys

import pytest

from harness.core.errors import InvalidFileError, UserError
from harness.measure.scenario import load_scenario
from tests.conftest import write_scenario

GOOD = """
name: t
legs: [cpu-0.32.0]
models:
  - name: m
    path: tiny
workloads:
  - {name: w, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}
"""


def test_shipped_scenarios_load():
    from harness.core import paths

    names = [p.stem for p in paths.SCENARIOS.glob("*.yaml")]
    assert "cpu-tiny" in names
    for n in names:
        load_scenario(n)


def test_good_scenario(tmp_path):
    sc = load_scenario(write_scenario(tmp_path, GOOD))
    assert sc.arms[0].name == "default" and sc.repeats == 1


@pytest.mark.parametrize("mutate, message", [
    (lambda s: s.replace("num_prompts: 2}", "num_prompts: 2, bogus: 1}"), "workloads[0].bogus: unknown key"),
    (lambda s: s.replace("input_len: 8", "input_len: eight"), "workloads[0].input_len: Input should be a valid integer"),
    (lambda s: s.replace("[cpu-0.32.0]", "[cpu-9.9.9]"), "unknown leg 'cpu-9.9.9'"),
    (lambda s: s + "extra_top: 1\n", "extra_top: unknown key"),
    (lambda s: s.replace("    path: tiny\n", "    path: tiny\n    workloads: [nope]\n"),
     "models[0].workloads[0]: unknown workload 'nope'"),
    (lambda s: s.replace("kind: throughput", "kind: sideways"), "workloads[0].kind"),
    (lambda s: "[not, a, mapping]", "expected a mapping"),
    (lambda s: "a: [unclosed", "not valid YAML"),
])
def test_bad_scenarios_name_file_and_key(tmp_path, mutate, message):
    path = write_scenario(tmp_path, mutate(GOOD))
    with pytest.raises(InvalidFileError) as e:
        load_scenario(path)
    text = str(e.value)
    assert str(path) in text and message in text and "\n" not in text


def test_cli_bad_scenario_is_one_line_and_measures_nothing(tmp_path):
    path = write_scenario(tmp_path, GOOD.replace("input_len: 8", "input_len: -1"))
    proc = subprocess.run([sys.executable, "-m", "harness", "sweep", str(path), "--results", str(tmp_path / "r")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "workloads[0].input_len" in lines[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()


def test_unknown_filter_names_scenario(tmp_path, fake_sweep):
    from harness.measure.sweep import SweepArgs, plan

    path = write_scenario(tmp_path, GOOD)
    with pytest.raises(UserError, match="no model named 'zzz'"):
        plan(SweepArgs(scenario=str(path), results=tmp_path / "r", models=("zzz",)))
