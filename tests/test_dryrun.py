"""The dry run: each run's inputs are printed, and a leg that cannot be resolved here is listed as
unresolved instead of stopping the plan (a measuring sweep still stops on it)."""

from __future__ import annotations

import pytest

from harness.core.errors import LegEnvError
from harness.measure import dryrun, leg as legmod, sweep as sweepmod
from harness.measure.scenario import load_scenario, scenario_path


def test_inputs_line_names_the_modality_and_its_parameters():
    line = dryrun.inputs_line({"kind": "throughput", "modality": "image", "input_len": 64, "output_len": 32,
                               "seed": 3, "num_prompts": 8, "width": 112, "height": 96, "images_per_prompt": 2})
    assert line.startswith("throughput/image input_len=64 output_len=32 seed=3")
    assert "num_prompts=8" in line and "width=112" in line and "height=96" in line and "images_per_prompt=2" in line
    assert "(unknown smell)" in dryrun.inputs_line({"kind": "latency", "modality": "smell"})


def _offline_resolve(spec, pins=(), *, offline=False):
    raise LegEnvError(spec.name, "resolve", 2, "cause: failed to lookup address information", path=f"{spec.name}.yaml")


def test_an_unresolvable_leg_is_listed_in_a_dry_run_and_stops_a_real_sweep(monkeypatch):
    monkeypatch.setattr(legmod, "resolve", _offline_resolve)
    sc = load_scenario(scenario_path("b200-study"))
    names = [m.name for m in sc.models][:1]
    envs = sweepmod.resolve_envs(sc, sc.legs[:2], names, ["default"], dry_run=True)
    assert {e.compat_id for e in envs.values()} == {dryrun.UNRESOLVED}
    assert all(e.name.endswith("-unresolved") for e in envs.values())
    with pytest.raises(LegEnvError, match="resolve failed"):
        sweepmod.resolve_envs(sc, sc.legs[:2], names, ["default"])
