"""The half-pass rate (harness.analyze.halfpass): the fit and its censoring on made-up lines, the study's
verdict on real H100 records (results/h100-capacity-bracket, measured), the scenario key and study.yaml,
and the rule's error rate under an A/A by seeded simulation."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.analyze import halfpass as hp
from harness.analyze.canonical import canonicalize
from harness.analyze.dataset import load
from harness.analyze.significance import fpr_limit
from harness.analyze.verdicts import study_verdicts
from harness.core import paths
from harness.core.errors import InvalidFileError
from harness.measure import sweep as sweepmod
from harness.measure.scenario import Scenario, load_scenario, scenario_path
from harness.publish import report

BRACKET = paths.PROJ_ROOT / "results" / "h100-capacity-bracket"
BRACKET_AB = paths.PROJ_ROOT / "results" / "h100-capacity-bracket-ab"
RATES = np.array([18, 22, 26, 30] * 3, float)


def _line(mid: float, slope: float = 3.0, bound: float = 1000.0) -> np.ndarray:
    """Made-up p99s exactly on a line in log-log that meets `bound` at `mid`."""
    return np.exp(math.log(bound) + slope * (np.log(RATES) - math.log(mid)))


def test_the_crossing_of_an_exact_line_is_its_half_pass_rate():
    v, status, fits = hp.half_pass_of(RATES, {"ttft_p99_ms": _line(25.0)}, {"ttft_p99_ms": 1000.0})
    assert status == "measured" and v == pytest.approx(25.0) and fits["ttft_p99_ms"].slope == pytest.approx(3.0)


def test_the_lowest_crossing_over_the_bounds_decides():
    v, status, _ = hp.half_pass_of(RATES, {"ttft_p99_ms": _line(28.0), "tpot_p99_ms": _line(21.0, bound=50.0)},
                                   {"ttft_p99_ms": 1000.0, "tpot_p99_ms": 50.0})
    assert status == "measured" and v == pytest.approx(21.0)


@pytest.mark.parametrize("mid, status", [(33.0, "measured"),     # within one grid step above 30 (30·30/26 = 34.6)
                                         (40.0, "above"), (16.0, "measured"), (12.0, "below")])
def test_a_crossing_far_off_the_grid_is_censored(mid, status):
    v, got, _ = hp.half_pass_of(RATES, {"ttft_p99_ms": _line(mid)}, {"ttft_p99_ms": 1000.0})
    assert got == status and (v is None) == (status != "measured")


def test_a_bound_that_does_not_rise_with_load_has_no_crossing():
    flat = np.exp(-0.5 * np.log(RATES)) * 500
    assert hp.half_pass_of(RATES, {"ttft_p99_ms": flat}, {"ttft_p99_ms": 1000.0})[:2] == (None, "no rise")
    # A line so flat that it meets the bound beyond float range is censored above, not an overflow.
    nearly = 900 * RATES ** 1e-6
    assert hp.half_pass_of(RATES, {"ttft_p99_ms": nearly}, {"ttft_p99_ms": 1000.0})[1] == "above"


def test_servers_for_width_is_the_least_n_whose_expected_interval_fits():
    from scipy import stats as sps

    n = hp.servers_for_width(0.225)
    half = lambda k: sps.t.ppf(0.975, 2 * k - 2) * 0.225 * math.sqrt(2 / k)
    assert half(n) <= math.log(1.05) < half(n - 1)
    assert hp.servers_for_width(None) is None
    lo, hi = hp.sd_interval(0.225, 1)
    assert lo < 0.225 < hi and hi / lo > 50     # one degree of freedom pins a spread down hardly at all


def _copy(tmp_path: Path, half_pass: bool) -> Path:
    d = tmp_path / "bracket"
    shutil.copytree(BRACKET, d, ignore=shutil.ignore_patterns("derived", "report", "logs"))
    meta = yaml.safe_load((d / "study.yaml").read_text())
    if not half_pass:
        meta.pop("half_pass")
    (d / "study.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return d


def test_lack_of_fit_finds_a_knee_and_not_a_straight_line():
    rates = np.array([18, 22, 26, 30] * 3, float)
    noise = np.tile([0.05, -0.05, 0.0], (4, 1)).T.ravel()       # the same small scatter at every rate
    straight = np.exp(np.log(1000) + 4 * (np.log(rates) - np.log(26)) + noise)
    knee = np.exp(np.log(1000) + 12 * np.maximum(np.log(rates) - np.log(24), 0) + noise)
    assert hp.fit(rates, straight, 1000.0).lack_of_fit_p > 0.5
    assert hp.fit(rates, knee, 1000.0).lack_of_fit_p < 0.01
    # Nothing to split: no repeated rate, or only two rates.
    assert hp.fit(rates[:4], straight[:4], 1000.0).lack_of_fit_p is None
    two = np.array([18, 30, 18, 30], float)
    assert hp.fit(two, 900 * (two / 18) ** 2, 1000.0).lack_of_fit_p is None


def test_measured_records_are_judged_by_half_pass_rates_with_the_server_as_unit(tmp_path):
    # Real: lease P3's records (vLLM 0.24.0 one server, 0.26.0 two, on one H100).
    canon = canonicalize(load(_copy(tmp_path, True)))
    sv = study_verdicts(canon)
    (cell,) = [c for c in sv.cells if c.workload == "bracket-grid"]
    assert cell.half_pass and cell.capacity and cell.unit == "server" and (cell.n_old, cell.n_new) == (1, 2)
    assert cell.verdict == "too few repeats" and "servers per side" in cell.text and "half-pass" in cell.rule_text
    caps = sv.capacities[(cell.model, cell.workload)]
    assert len(caps["h200-0.24.0"]) == 1 and len(caps["h200-0.26.0"]) == 2
    assert cell.ratio == pytest.approx(float(np.median(caps["h200-0.26.0"])) / caps["h200-0.24.0"][0])
    # Every view reads that one object: the section prints its words, the capacity table its ratio.
    st = report.load_study(canon.dataset.root)
    md = report.half_pass_md(st)
    assert cell.text in md and cell.ratio_text in md and md.count("| measured |") == 3
    assert "Lack of fit p" in md and md.count(", 0.97 |") == 1    # 0.24.0's TTFT line: no bend (p 0.969)
    assert "Where the time to first token goes" not in md           # schema 12: no server histograms
    (fig,) = report.half_pass_figures(st)
    assert len(fig.axes) == 2 and all(len(ax.get_lines()) >= 3 + 1 for ax in fig.axes)  # 3 servers' lines + bound


def test_two_servers_a_side_and_where_the_time_to_first_token_goes(tmp_path):
    # Real: lease P4's records (two servers a leg, interleaved, on one H100, with the server's histograms).
    shutil.copytree(BRACKET_AB, tmp_path / "s", ignore=shutil.ignore_patterns("report", "derived"))
    canon = canonicalize(load(tmp_path / "s"))
    (cell,) = [c for c in study_verdicts(canon).cells if c.workload == "bracket-grid"]
    assert (cell.n_old, cell.n_new) == (2, 2) and cell.verdict == "undecided" and cell.low < 1 < cell.high
    md = report.half_pass_md(report.load_study(canon.dataset.root))
    assert md.count("| measured |") == 4 and cell.text in md and "needs about 3 servers a leg" in md
    # At 30 req/s most of the server's mean TTFT is neither scheduler wait nor prefill: the front end's.
    rows = [r for r in md.splitlines() if r.startswith("| Llama-3.1-8B (dummy weights) · bracket-grid |")
            and "| 30 |" in r]
    assert len(rows) == 2 and all(int(r.rstrip(" |").rsplit("| ", 1)[1].rstrip("%")) >= 80 for r in rows)


def test_without_the_declaration_the_grid_is_judged_by_throughput(tmp_path):
    canon = canonicalize(load(_copy(tmp_path, False)))
    (cell,) = [c for c in study_verdicts(canon).cells if c.workload == "bracket-grid"]
    assert not cell.half_pass and not cell.capacity and cell.unit == "repeat"
    st = report.load_study(canon.dataset.root)
    assert report.half_pass_md(st) == "" and report.half_pass_figures(st) == []


def test_the_scenario_declares_it_and_the_sweep_writes_it_into_study_yaml(tmp_path):
    sc = load_scenario(scenario_path("h200-capacity-bracket"))
    assert sc.half_pass == ["bracket-grid"]
    sweepmod.write_study_meta(tmp_path, sc, list(sc.legs))
    assert yaml.safe_load((tmp_path / "study.yaml").read_text())["half_pass"] == ["bracket-grid"]


@pytest.mark.parametrize("workload, rates", [("bracket-grid", [18, 22, 18]), ("nope", [18, 22, 26])])
def test_a_half_pass_workload_must_be_a_grid_of_three_rates(tmp_path, workload, rates):
    raw = yaml.safe_load(scenario_path("h200-capacity-bracket").read_text())
    raw["workloads"][0]["request_rate"] = rates
    raw["half_pass"] = [workload]
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(raw))
    with pytest.raises(InvalidFileError, match="half_pass"):
        load_scenario(f)


def test_the_rule_keeps_its_level_under_an_aa():
    # Seeded simulation of the measured components (hp.Model's defaults): both legs one stack, servers
    # as units, censored servers left out, the same fit and rule as the records get.
    reps = 1000
    rates = hp.aa_rates(hp.Model(), ns=(3, 8), reps=reps, seed=0)
    assert (rates["tested"] > 0).all()
    assert (rates["false_rate"] <= fpr_limit(reps, checks=2)).all()
