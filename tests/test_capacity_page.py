"""Capacity on the page: a FAKE study whose serve runs searched (records in the harness's own format,
made-up latencies): each leg's capacity over repeats with its interval, the ratio of capacities by the
significance rule, cost at capacity with the price's source, and the latency-vs-load figure."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.analyze import capacity as acap
from harness.measure import capacity as search
from harness.measure.loadgen import RequestResult
from harness.publish import report
from harness.publish.sections import capacity as section
from harness.schema.serve import Dist, PointMetrics, ServePoint, ServeResult
from harness.workloads import capacity as spec
from tests.studygen import record_dict, write_run, write_study_yaml

LEGS = [("cpu-0.27.1", "0.27"), ("cpu-0.32.0", "0.32")]
DECL = {"slo": {"tpot_ms": {"p": 99, "max": 50}, "goodput_share_min": 0.99},
        "search": {"lo": 0.5, "hi": 32, "rel_tol": 0.05, "max_probes": 16}}


def _serve(known: float) -> dict:
    """A FAKE search record: TPOT 40 ms at or below `known` requests/s, 80 ms above."""
    def probe(step: int, value: float, phase: str):
        tpot = 0.04 if value <= known else 0.08
        reqs = [RequestResult(ok=True, ttft_s=0.1, itl_s=[tpot] * 3, latency_s=0.1 + 3 * tpot, output_tokens=4)
                for _ in range(10)]
        m = PointMetrics(requests=10, completed=10, failed=0, duration_s=10 / value, output_tokens=40,
                         prompt_tokens=40, requests_per_s=value, output_tok_s=4 * value, goodput_req_s=value,
                         ttft_ms=Dist(p50=100, p90=100, p99=100), tpot_ms=Dist(p50=tpot * 1000, p90=tpot * 1000,
                                                                               p99=tpot * 1000))
        return ServePoint(index=step, concurrency=64, request_rate=value, seed=step, status="ok", metrics=m), reqs

    block, points = search.search(spec.parse(DECL), DECL, probe)
    return ServeResult(client={"name": "harness-loadgen"}, slo_ttft_ms=1000, slo_tpot_ms=50, points=points,
                       capacity=block).model_dump(mode="json")


def _study(tmp_path: Path, caps: dict[str, list[float]], tok_s=lambda known: 4 * known, **extra) -> Path:
    d = tmp_path / "cap"
    write_study_yaml(d, LEGS, **extra)
    for leg, label in LEGS:
        for i, known in enumerate(caps[label], start=1):
            write_run(d, record_dict(leg=leg, leg_label=label, model="tiny-llama", workload="capacity-text",
                                     kind="serve", repeat=i, metrics={"output_tok_s": tok_s(known)},
                                     manifest={"device": "Intel(R) Xeon(R) Processor (2 cores)"}, serve=_serve(known)))
    return d


def test_capacity_per_leg_ratio_cost_and_page(tmp_path):
    price = {"per_hour": 0.08, "unit": "CPU-hour", "source": "illustrative, not a quote"}
    d = _study(tmp_path, {"0.27": [4.0, 4.2, 3.9], "0.32": [8.0, 8.3, 7.9]}, price=price)
    st = report.load_study(d)
    v = section.capacity(st)
    legs = v.legs.set_index("leg")
    old = legs.loc["cpu-0.27.1"]
    # Each repeat's capacity is the highest passing probe, within rel_tol below the known value.
    assert (v.searches["status"] == "found").all()
    for _, r in v.searches.iterrows():
        assert r["bracket_low"] <= (4.0 if r["leg"] == "cpu-0.27.1" else 8.0) * 1.05
    assert old["repeats"] == 3 and old["low"] < old["capacity"] < old["high"]
    assert old["usd_per_m_output_tok"] == pytest.approx(0.08 / (old["output_tok_s"] * 3600) * 1e6)
    r = v.ratios.iloc[0]["ratio"]
    assert r.value == pytest.approx(legs.loc["cpu-0.32.0", "capacity"] / old["capacity"]) and r.verdict == "faster"
    md = report.capacity_md(st)
    assert "## Serving capacity at the SLO" in md and report.serving_md(st) == ""   # probes are no grid
    assert "source: illustrative, not a quote" in md and "p99 TPOT ≤ 50 ms, good share ≥ 0.99" in md
    assert "order-statistic" in md and "point estimate" in md and "faster" in md
    figs = report.capacity_figures(st)
    assert len(figs) == 1 and "Latency vs load" in figs[0]._suptitle.get_text() and report.serving_figures(st) == []
    ttft, tpot, goodput = figs[0].axes
    assert [ln.get_ydata()[0] for ln in tpot.lines if ln.get_color() == "#b2182b"] == [50]   # the SLO drawn


def test_equal_capacities_are_equivalent_within_the_margin_and_censored_runs_stay_out(tmp_path):
    # The interval is widened by the searches' resolution (their last bracket, 4.4% here): ±40%, not ±30%.
    d = _study(tmp_path, {"0.27": [3.6, 4.0, 4.4], "0.32": [4.4, 3.6, 4.0]}, margin=0.4)
    st = report.load_study(d)
    v = section.capacity(st)
    assert v.ratios.iloc[0]["ratio"].verdict == "equivalent" and "within ±40%" in report.capacity_md(st)
    # A search whose every probe passed up to hi is a bound, not a capacity: counted, not averaged in.
    d2 = _study(tmp_path / "b", {"0.27": [4.0, 4.0, 100.0], "0.32": [4.0, 4.0, 4.0]})
    legs = acap.per_leg(acap.searches(report.load_study(d2).canon)).set_index("leg")
    assert legs.loc["cpu-0.27.1", "repeats"] == 2 and "1 at_least_hi" in legs.loc["cpu-0.27.1", "statuses"]


def test_the_answer_of_a_capacity_search_is_the_capacity_ratio_not_peak_throughput(tmp_path):
    # Peak throughput over the probes falls from 0.27 to 0.32 here while the capacity doubles: the
    # answer's cell must say what the capacity section says.
    from harness.publish.sections.answer import answer
    d = _study(tmp_path, {"0.27": [4.0, 4.2, 3.9], "0.32": [8.0, 8.3, 7.9]}, tok_s=lambda known: 100 / known)
    st = report.load_study(d)
    (cell,) = answer(st).cells
    r = section.capacity(st).ratios.iloc[0]["ratio"]
    assert cell.ratio == pytest.approx(r.value) and cell.ratio > 1.8 and cell.verdict == "faster"
    assert "capacity at the SLO" in cell.note
    assert answer(st).summary[0].startswith("**Serving: capacity at the SLO (req/s, higher is better):**")


def test_interval_over_repeats_is_the_log_t_interval():
    low, high = acap.interval([4.0, 4.4, 3.6])
    assert low < math.exp(sum(map(math.log, [4.0, 4.4, 3.6])) / 3) < high
    assert acap.interval([4.0]) == (None, None)


def test_a_capacity_rows_figures_are_the_ones_its_ratio_and_verdict_come_from(tmp_path):
    # Peak throughput falls while the capacity doubles (as above): a serve table that printed the peak
    # throughputs beside the capacity's ratio gave a row whose figures contradicted its own ratio.
    from harness.analyze import tables
    from harness.analyze.verdicts import study_verdicts
    d = _study(tmp_path, {"0.27": [4.0, 4.2, 3.9], "0.32": [8.0, 8.3, 7.9]}, tok_s=lambda known: 100 / known)
    canon = report.load_study(d).canon
    assert len(tables.kind_table(canon, "serve").data) == 0          # the row is not a throughput row
    t = tables.capacity_table(canon)
    (row,) = t.data.to_dict("records")
    legs = acap.per_leg(acap.searches(canon)).set_index("leg")
    assert row["0.27"] == pytest.approx(float(pd.Series(acap.by_leg(acap.searches(canon))[("tiny-llama", "capacity-text")]
                                                    ["cpu-0.27.1"]).median()))
    assert row["0.32"] / row["0.27"] > 1.8 and legs.loc["cpu-0.27.1", "repeats"] == 3
    v = study_verdicts(canon).get("serve", "tiny-llama", "capacity-text", "cpu-0.27.1", "cpu-0.32.0")
    assert row["32/27"] == v.table_ratio and row["32/27 verdict"] == v.verdict == "faster"
    assert t.display["0.27"].iat[0] == f"{row['0.27']:.2f}" and "req/s" in t.title
    out = tables.write_tables(canon, tmp_path / "derived")
    names = {p.relative_to(tmp_path / "derived").as_posix() for p in out}
    assert "tables/capacity.md" in names and "tables/capacity.parquet" in names
    pair = (tmp_path / "derived" / "compare" / "cpu-0.27.1_vs_cpu-0.32.0.md").read_text()
    assert "Serving: capacity at the SLO, 0.27 vs 0.32" in pair


def test_a_ratio_with_one_run_on_one_side_is_not_called_single_pass_on_a_measured_page(tmp_path):
    # One search on the old side, two on the new (a lease that ended mid-study): no interval, but the
    # page must not say every side is a single pass, nor speak of printed rounding on measured data.
    from harness.analyze import tables
    from harness.publish.figure_cells import ratio_caption_md
    d = _study(tmp_path, {"0.27": [4.0], "0.32": [8.0, 8.3]})
    st = report.load_study(d)
    cap = ratio_caption_md(st)
    assert "none of the 1 ratios has an interval: each has a side with one run" in cap
    assert "single pass" not in cap and "rounding" not in cap
    notes = " ".join(tables.capacity_table(st.canon).notes)
    assert "each has a side with one run" in notes and "single pass" not in notes


def test_too_few_repeats_within_the_searchs_resolution_says_that_repeats_alone_will_not_decide(tmp_path):
    from harness.analyze.verdicts import study_verdicts
    d = _study(tmp_path, {"0.27": [4.0], "0.32": [4.1, 4.1]})      # the same grid point: 1.00x
    (cell,) = study_verdicts(report.load_study(d).canon).cells
    assert cell.verdict == "too few repeats" and 0 < cell.resolution <= 0.05
    assert cell.text.startswith("too few repeats, and the gap is within the resolution of the searches")
    assert "a finer rel_tol would decide it" in cell.text


def test_the_dispersion_limitation_of_a_capacity_study_quotes_the_capacities_spread(tmp_path):
    # Output tok/s at the probe is the same in every repeat here while the capacity wanders 4.0-6.0: the
    # page's dispersion line must quote the capacity's spread (the figure the verdict rests on), not 0%.
    from harness.publish.sections.limitations import limitations
    d = _study(tmp_path, {"0.27": [4.0, 6.0, 5.0], "0.32": [5.0, 5.1, 5.0]}, tok_s=lambda known: 100.0)
    (line,) = [x for x in limitations(report.load_study(d)) if x.startswith("**Dispersion.**")]
    caps = acap.by_leg(acap.searches(report.load_study(d).canon))[("tiny-llama", "capacity-text")]["cpu-0.27.1"]
    expected = (max(caps) - min(caps)) / sorted(caps)[1]
    assert expected > 0.3 and f"largest repeat spread is {expected:.1%}" in line
    assert "capacity-text on 0.27, capacity at the SLO)" in line


def test_a_leg_whose_searches_are_censored_has_no_capacity_spread_and_the_page_says_so(tmp_path):
    # Two of 0.27's three searches fail the first probe (below_lo): one capacity, no spread. Quoting the
    # tok/s spread, or 0%, for it would be a number nobody measured.
    from harness.publish.sections.limitations import limitations
    d = _study(tmp_path, {"0.27": [0.1, 0.1, 4.0], "0.32": [5.0, 5.5, 5.0]})
    lines = limitations(report.load_study(d))
    (cens,) = [x for x in lines if x.startswith("**Capacities without a spread.**")]
    assert "For 1 (leg, model, workload) cell fewer than two searches measured a capacity" in cens
    (disp,) = [x for x in lines if x.startswith("**Dispersion.**")]
    assert "on 0.32, capacity at the SLO)" in disp and "on 0.27" not in disp


def test_a_pass_curve_is_recovered_from_coin_toss_probes_and_absent_where_outcomes_are_monotone(tmp_path):
    # Seeded FAKE probes: P(pass) = 1 / (1 + exp((ln v - ln 30) / 0.07)) at 600 loads from 22 to 40.
    rng = np.random.default_rng(7)
    v = np.exp(rng.uniform(math.log(22), math.log(40), 600))
    passed = rng.random(600) < 1 / (1 + np.exp((np.log(v) - math.log(30)) / 0.07))
    pr = pd.DataFrame({"model": "m", "workload": "w", "leg": "a", "value": v, "passed": passed})
    (c,) = acap.pass_curves(pr).itertuples()
    assert c.overlap and c.mid == pytest.approx(30, rel=0.02) and c.scale == pytest.approx(0.07, rel=0.25)
    assert c.p90 == pytest.approx(c.mid * math.exp(-c.scale * math.log(9))) and c.p90 < c.mid < c.p10
    # The fake searches of _study are deterministic (a pass at or below the capacity), here one capacity a
    # leg: no curve, no paragraph. (Different capacities a repeat would overlap: instances differing.)
    st = report.load_study(_study(tmp_path, {"0.27": [4.0, 4.0, 4.0], "0.32": [8.0, 8.0, 8.0]}))
    curves = section.capacity(st).curves
    assert not curves["overlap"].any() and curves["mid"].isna().all()
    assert "Pass curve" not in report.capacity_md(st)


def test_the_shipped_gpu_searches_show_their_pass_curves():
    # results/h100-capacity-1pct (real records): 36 probes, passes above failures on both legs.
    st = report.load_study(Path(__file__).resolve().parents[1] / "results" / "h100-capacity-1pct")
    md = report.capacity_md(st)
    assert "Pass curve over every probe of every search: 0.24: 22 probes, 10 passed; half pass at 32.5 req/s" in md
    assert "0.26: 14 probes, 7 passed" in md
