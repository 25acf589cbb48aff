"""The serving section of the page on a FAKE study (records in the harness's own format, made-up
latencies): two serve workloads of one model at the same load point are two points, each with its own
figures, never one median across them."""

from __future__ import annotations

from pathlib import Path

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
