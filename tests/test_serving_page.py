"""The serving section of the page on a FAKE study (records in the harness's own format, made-up
latencies): two serve workloads of one model at the same load point are two points, each with its own
figures, never one median across them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.publish import report
from harness.publish.sections.serving import serving, serving_figures
from harness.schema.serve import Dist, PointMetrics, ServePoint, ServeResult
from tests.studygen import record_dict, write_run, write_study_yaml

LEGS = [("cpu-0.27.1", "0.27"), ("cpu-0.32.0", "0.32")]


def _serve(tok_s: float, tpot_ms: float) -> dict:
    """A FAKE grid record: one point, c=4 at 2 req/s."""
    m = PointMetrics(requests=16, completed=16, failed=0, duration_s=8.0, output_tokens=int(tok_s * 8),
                     prompt_tokens=160, requests_per_s=2.0, output_tok_s=tok_s, goodput_req_s=2.0,
                     tok_s_per_user=1000 / tpot_ms, ttft_ms=Dist(p50=50, p90=60, p99=70),
                     tpot_ms=Dist(p50=tpot_ms, p90=tpot_ms, p99=tpot_ms))
    p = ServePoint(index=0, concurrency=4, request_rate=2.0, seed=1000, status="ok", metrics=m)
    return ServeResult(client={"name": "harness-loadgen"}, slo_ttft_ms=1000, slo_tpot_ms=50,
                       points=[p]).model_dump(mode="json")


def _study(tmp_path: Path, workloads: tuple[str, ...] = ("short", "long")) -> Path:
    d = tmp_path / "serve2"
    write_study_yaml(d, LEGS)
    for leg, label in LEGS:
        for wl, tok_s, tpot in (w for w in (("short", 1000.0, 10.0), ("long", 100.0, 40.0)) if w[0] in workloads):
            for i in (1, 2):
                write_run(d, record_dict(leg=leg, leg_label=label, model="tiny-llama", workload=wl, kind="serve",
                                         repeat=i, metrics={"output_tok_s": tok_s + i},
                                         manifest={"device": "Intel(R) Xeon(R) Processor (2 cores)"},
                                         work={"num_seqs": 16, "output_tokens": 16 * (64 if wl == "short" else 256)},
                                         serve=_serve(tok_s + i, tpot)))
    return d


def test_two_serve_workloads_of_one_model_at_one_load_are_two_points(tmp_path):
    st = report.load_study(_study(tmp_path))
    s = serving(st)
    curve = s.curve.set_index(["workload", "leg"])
    assert len(s.curve) == 4                      # one row per (workload, leg), not per leg
    assert curve.loc[("short", "cpu-0.27.1"), "output_tok_s"] == 1001.5
    assert curve.loc[("long", "cpu-0.27.1"), "output_tok_s"] == 101.5
    assert sorted(s.ratios["workload"]) == ["long", "short"]
    md = report.serving_md(st)
    assert "### tiny-llama · short" in md and "### tiny-llama · long" in md
    assert "1,001.5" in md and "101.5" in md and "551.5" not in md
    assert sorted(f.axes[0].get_title() for f in serving_figures(st)) == [
        "Throughput vs interactivity: tiny-llama · long", "Throughput vs interactivity: tiny-llama · short"]


def test_a_model_with_one_serve_workload_keeps_its_own_heading(tmp_path):
    st = report.load_study(_study(tmp_path, workloads=("short",)))
    md = report.serving_md(st)
    assert "### tiny-llama\n" in md and "·" not in md.split("### tiny-llama")[1].split("\n")[0]


def _probes(tmp_path: Path, ttft: dict[int, list[float]], shift: dict[int, int] | None = None) -> Path:
    """A FAKE probe study: one leg, one workload at 34 req/s, each repeat (server) a list of p99 TTFTs, point
    i with seed 1000 * (i + 1) as a grid draws it (plus `shift[repeat]`, a grid with other seeds)."""
    d = tmp_path / "probe"
    write_study_yaml(d, LEGS[:1])
    for rep, values in ttft.items():
        pts = []
        for i, t in enumerate(values):
            m = PointMetrics(requests=510, completed=510, failed=0, duration_s=20.0, output_tokens=510 * 256,
                             prompt_tokens=510 * 512, requests_per_s=25.5, output_tok_s=6000.0, goodput_req_s=25.0,
                             good_share=1.0 if t <= 1000 else 0.7, tok_s_per_user=40.0,
                             ttft_ms=Dist(p50=t / 3, p90=t / 2, p99=t), tpot_ms=Dist(p50=20, p90=22, p99=25))
            pts.append(ServePoint(index=i, concurrency=4096, request_rate=34.0,
                                  seed=1000 * (i + 1) + (shift or {}).get(rep, 0), status="ok",
                                  metrics=m))
        serve = ServeResult(client={"name": "harness-loadgen"}, slo_ttft_ms=1000, slo_tpot_ms=50,
                            points=pts).model_dump(mode="json")
        write_run(d, record_dict(leg=LEGS[0][0], leg_label=LEGS[0][1], model="llama", workload="probe-15s",
                                 kind="serve", repeat=rep, metrics={"output_tok_s": 6000.0},
                                 manifest={"device": "1x FAKE-GPU"}, serve=serve))
    return d


def test_a_load_probed_repeatedly_reports_how_often_it_met_the_slo_and_its_spread(tmp_path):
    import math
    ttft = {1: [800.0, 1200.0, 900.0], 2: [2000.0, 2400.0, 1800.0]}
    st = report.load_study(_probes(tmp_path, ttft))
    (row,) = serving(st).repeated.itertuples()
    assert (row.points, row.servers, row.met) == (6, 2, 2)
    assert (row.ttft_p99_min, row.ttft_p99_max) == (800.0, 2400.0)
    # Within: the pooled sd of log p99 TTFT about each server's mean; between: the ANOVA estimate.
    logs = {k: [math.log(v) for v in vs] for k, vs in ttft.items()}
    ss = sum(sum((x - sum(v) / 3) ** 2 for x in v) for v in logs.values())
    within = math.sqrt(ss / 4)
    means = [sum(v) / 3 for v in logs.values()]
    msb = 3 * sum((m - sum(means) / 2) ** 2 for m in means)
    assert row.sd_within == pytest.approx(within)
    assert row.sd_between == pytest.approx(math.sqrt((msb - within ** 2) / 3))
    md = report.serving_md(st)
    assert "### Loads measured more than once on one server" in md
    assert "| llama · probe-15s | 0.27 | 4096 | 34 | 6 (2) | 2 of 6 | 800 / 1,500 / 2,400 |" in md


def test_a_repeated_load_splits_its_spread_into_the_arrival_draw_and_the_rest(tmp_path):
    """Every server measured the same seeds: the within-server spread is split, seeds by servers, as a
    two-way table without replication (hand-computed mean squares), and the split adds up to it."""
    import math
    ttft = {1: [400.0, 600.0, 500.0, 900.0], 2: [450.0, 640.0, 470.0, 1000.0], 3: [380.0, 700.0, 560.0, 850.0]}
    st = report.load_study(_probes(tmp_path, ttft))
    (row,) = serving(st).repeated.itertuples()
    y = [[math.log(ttft[s][i]) for s in (1, 2, 3)] for i in range(4)]       # seeds x servers
    g = sum(map(sum, y)) / 12
    rm = [sum(r) / 3 for r in y]
    cm = [sum(y[i][j] for i in range(4)) / 4 for j in range(3)]
    msr = 3 * sum((m - g) ** 2 for m in rm) / 3
    mse = sum((y[i][j] - rm[i] - cm[j] + g) ** 2 for i in range(4) for j in range(3)) / 6
    assert row.sd_draw == pytest.approx(math.sqrt((msr - mse) / 3))
    assert row.sd_rest == pytest.approx(math.sqrt(mse))
    # The one-way within-server mean square is the draws' and the rest's together, on their degrees of freedom.
    assert row.sd_within ** 2 == pytest.approx((3 * msr + 6 * mse) / 9)
    assert f"| {row.sd_draw:.3f} / {row.sd_rest:.3f} |" in report.serving_md(st)


def test_servers_that_drew_other_seeds_get_no_split(tmp_path):
    st = report.load_study(_probes(tmp_path, {1: [400.0, 600.0], 2: [450.0, 640.0]}, shift={2: 7}))
    (row,) = serving(st).repeated.itertuples()
    assert row.sd_within is not None and pd.isna(row.sd_draw) and pd.isna(row.sd_rest)
    assert report.serving_md(st).split("more than once on one server")[1].count("| — / — | — | — | — | — |") == 1


def test_a_grid_of_distinct_loads_has_no_repeated_load_table(tmp_path):
    st = report.load_study(_study(tmp_path))
    assert serving(st).repeated.empty and "more than once" not in report.serving_md(st)
