"""The report's supporting series: a series measured on one leg shows its values (no ratio to draw), and
runs other diagnostics made in the main series' folder (crosscheck, primers, profiles) do not make it
an arms study. On the shipped H200 ablation, whose main series holds all three."""

from __future__ import annotations

from pathlib import Path

from harness.analyze import dataset
from harness.publish import report
from harness.publish.sections import supporting as sup

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "results" / "h200-ablation"


def test_one_leg_series_shows_medians_spread_and_time_per_run():
    st = report.load_study(STUDY)
    got = {s.name: s for s in sup.supporting(st)}
    assert set(got) == {"long-timed", "per-run"}       # not the main series, for its side arms
    assert got["long-timed"].kind == "one-leg"
    d = got["long-timed"].diagnostic
    recs = dataset.load(STUDY).records
    lt = recs[(recs["series"] == "long-timed") & (recs["status"] == "ok")]
    mixed = lt[lt["workload"] == "mixed"]
    row = d[d["workload"] == "mixed"].iloc[0]
    assert row["n"] == 3 and abs(row["value"] - mixed["throughput_tok_s"].median()) < 1e-6
    v = mixed["throughput_tok_s"]
    assert abs(row["spread"] - (v.max() - v.min()) / v.median()) < 1e-12
    assert abs(row["timed_s"] - mixed["timed_s"].median()) < 1e-9 and row["timed_s"] >= 30
    assert list(d["workload"]) == ["mixed", "long-context", "single-request", "fixed-batch-32"]
    md = report.supporting_md(st)
    assert "### Series `long-timed`" in md and "no ratio and no verdict" in md
    assert "### Series `h200-ablation`" not in md and "No arms diagnostic" not in md


def test_side_runs_are_the_crosscheck_primers_and_profiles():
    recs = dataset.load(STUDY).records
    main = recs[recs["series"] == "h200-ablation"]
    side = set(main.loc[sup._side_runs(main), "arm"])
    assert side == {"harness-no-prefix-cache", "vllm-bench-no-prefix-cache", "harness-no-prefix-cache-prime",
                    "default-profiled"}
    assert not sup._side_runs(main[main["arm"] == "default"]).any()


def test_series_figures_draw_no_figure_for_a_one_leg_series():
    st = report.load_study(STUDY)
    assert report.series_figures(st) == []
