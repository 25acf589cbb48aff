"""`harness check serve SCENARIO --at-capacity STUDY` with FAKES only: a FAKE capacity study (records in
the harness's own format, made-up latencies, tests.test_capacity_page), the FAKE server and the FAKE
`vllm bench serve` of tests.test_serve_crosscheck. The points are the study's per-leg capacities, held
as the scenario's search holds them."""

from __future__ import annotations

import json
import math
import statistics

from harness import cli
from harness.experiments import at_capacity
from harness.experiments import serve_crosscheck as sxc
from harness.measure.scenario import load_scenario
from harness.measure.sweep import SweepArgs
from tests.conftest import write_scenario
from tests.test_capacity_page import _study
from tests.test_serve_crosscheck import _argv, fakes  # noqa: F401  (the fixture)

SCENARIO = """
name: t
legs: [cpu-0.32.0]
repeats: 1
models:
  - {name: tiny-llama, path: tiny}
workloads:
  - name: capacity-text
    kind: serve
    input_len: 8
    output_len: 4
    num_prompts: 4
    warmup_requests: 1
    seed: 0
    capacity:
      axis: request_rate
      slo: {ttft_ms: {p: 99, max: 400}, tpot_ms: {p: 99, max: 60}, goodput_share_min: 0.9}
      search: {lo: 0.5, hi: 32, concurrency: 3, probe_s: 2}
"""


def _medians(study) -> dict[str, float]:
    """Per leg, the median of the capacities its records' searches state (read from the files here)."""
    caps: dict[str, list[float]] = {}
    for path in study.rglob("results.json"):
        rec = json.loads(path.read_text())
        c = rec["serve"]["capacity"]
        if c["status"] in ("found", "max_probes"):
            caps.setdefault(rec["leg"], []).append(c["capacity"])
    return {leg: statistics.median(v) for leg, v in caps.items()}


def test_the_points_are_the_studys_capacities_with_the_searchs_concurrency_and_count(tmp_path, fakes):
    _, calls, _ = fakes
    scenario = write_scenario(tmp_path, SCENARIO, name="atcap")
    study = _study(tmp_path, {"0.27": [3.6, 4.0, 4.4], "0.32": [8.0, 8.3, 7.9]})
    medians = _medians(study)
    rates = sorted(medians.values())
    assert len(rates) == 2 and rates[0] < rates[1]
    n = max(4, math.ceil(rates[-1] * 2))     # the probe at the highest rate: probe_s 2 s of arrivals
    res = sxc.serve_crosscheck(SweepArgs(scenario=str(scenario), results=tmp_path / "r"), at_capacity=study)
    (rec,) = res.records
    work = rec.settings["workload"]
    assert "capacity" not in work and work["request_rate"] == rates and work["concurrency"] == [3]
    assert work["num_prompts"] == n and (work["slo_ttft_ms"], work["slo_tpot_ms"]) == (400.0, 60.0)
    (rep,) = rec.repeats
    assert [(x.concurrency, x.request_rate) for x in rep.points] == [(3, r) for r in rates]
    assert all(x.harness.status == "ok" and x.harness.metrics.requests == n for x in rep.points)
    argvs = [_argv(line) for line in calls.read_text().splitlines()]
    assert [(a["--request-rate"], a["--max-concurrency"], a["--num-prompts"]) for a in argvs] == \
        [(repr(r), "3", str(n)) for r in rates]
    assert [(s.concurrency, s.request_rate) for s in rec.summary] == [(3, r) for r in rates]
    (note,) = [x for x in rec.notes if x.startswith("At capacity")]
    assert str(study) in note
    for leg, c in medians.items():
        assert f"{leg} {c:.3g} req/s (median of 3 searches)" in note
    assert f"each point {n} requests" in note and "at most 3 in flight" in note
    assert sxc.read(res.files[0]) == rec
    md = res.view.read_text()
    assert f"c=3 rate={rates[0]:g}" in md and f"- cpu-0.32.0 `tiny-llama` capacity-text: {note}" in md


def test_equal_capacities_are_one_point_and_the_concurrency_axis_holds_no_rate(tmp_path):
    sc = load_scenario(write_scenario(tmp_path, SCENARIO, name="atcap"))
    study = _study(tmp_path, {"0.27": [4.0, 4.0, 4.0], "0.32": [4.0, 4.0, 4.0]})
    (c,) = set(_medians(study).values())
    work, note = at_capacity.derive(study, "tiny-llama", "capacity-text", sc.workloads[0].work)
    assert work["request_rate"] == [c] and work["num_prompts"] == max(4, math.ceil(c * 2))
    assert f"cpu-0.27.1 {c:.3g} req/s" in note and f"cpu-0.32.0 {c:.3g} req/s" in note
    by_conc = sc.workloads[0].work | {"capacity": {"axis": "concurrency", "slo": {"tpot_ms": {"p": 99, "max": 60}},
                                                   "search": {"lo": 1, "hi": 32}}}
    work, _ = at_capacity.derive(study, "tiny-llama", "capacity-text", by_conc)
    assert work["concurrency"] == [math.floor(c)] and work["request_rate"] == [] and work["num_prompts"] == 4


def test_a_study_under_the_results_root_is_named_by_its_path_there(tmp_path, fakes):
    """On a lent machine the root is a scratch folder (/root/R): the note names the study as it lies under
    the root, which still means something once the records are copied back; a study elsewhere keeps the
    path given."""
    scenario = write_scenario(tmp_path, SCENARIO, name="atcap")
    study = _study(tmp_path, {"0.27": [3.6, 4.0, 4.4], "0.32": [8.0, 8.3, 7.9]})
    root = study.parent
    res = sxc.serve_crosscheck(SweepArgs(scenario=str(scenario), results=root, study="clients"),
                               at_capacity=study.name)
    (rec,) = res.records
    (note,) = [x for x in rec.notes if x.startswith("At capacity")]
    assert note.startswith(f"At capacity (--at-capacity {study.name}):") and str(root) not in note
    assert at_capacity.label(study, root) == study.name
    assert at_capacity.label(study, tmp_path / "elsewhere") == str(study)


def test_no_measured_capacity_or_no_study_is_one_line_and_writes_nothing(tmp_path, fakes, capsys):
    _, calls, _ = fakes
    scenario = write_scenario(tmp_path, SCENARIO, name="atcap")
    # Every probe passes up to hi (32): each search is censored (at_least_hi), no capacity is measured.
    study = _study(tmp_path, {"0.27": [100.0] * 2, "0.32": [100.0] * 2})
    out = tmp_path / "r"
    for bad, says in [(study, "at_least_hi"), (tmp_path / "nowhere", "no such study folder"),
                      (tmp_path, "not a study folder"), ("no-such-study", "no such study folder")]:
        rc = cli.main(["check", "serve", str(scenario), "--results", str(out), "--at-capacity", str(bad)])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1 and says in err and str(bad) in err, err
    assert not out.exists() and not calls.exists()
    # A model the study never searched for: the error names what it did search.
    other = write_scenario(tmp_path, SCENARIO.replace("tiny-llama", "other"), name="other")
    assert cli.main(["check", "serve", str(other), "--results", str(out), "--at-capacity", str(study)]) == 2
    assert "no capacity search of model 'other'" in capsys.readouterr().err and not out.exists()


def test_a_capacity_workload_without_the_option_is_refused_naming_it(tmp_path, fakes, capsys):
    _, calls, _ = fakes
    scenario = write_scenario(tmp_path, SCENARIO, name="atcap")
    rc = cli.main(["check", "serve", str(scenario), "--results", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "--at-capacity STUDY" in err and "capacity search" in err
    assert not (tmp_path / "r").exists() and not calls.exists()
