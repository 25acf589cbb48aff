"""Sweep time: an invocation's timed share is its records' timed seconds over its index's wall time;
cut-off and partial invocations enter no sum."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from harness.analyze import dataset
from harness.analyze import sweeptime as swt
from harness.publish import report
from harness.schema import sweep_index

ROOT = Path(__file__).resolve().parents[1]


def _index(d: Path, inv: str, start: str, end: str | None, runs: list[tuple[str, bool]], engine: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{inv}.json").write_text(json.dumps({
        "schema_version": 2, "invocation_id": inv, "scenario": "s", "started_at": start, "finished_at": end,
        "engine": engine, "runs": [{"run_id": r, "reused": reused} for r, reused in runs]}))


def _indexes(root: Path) -> list[sweep_index.SweepIndex]:
    """The study's sweep indexes as the dataset parses them (these studies have no records to load)."""
    return [sweep_index.parse(json.loads(p.read_text()), p) for p in sorted((root / "sweeps").glob("*.json"))]


def _rec(inv: str, run_id: str, timed: float, init: float, mode: str) -> dict:
    return {"provenance": "measured", "invocation_id": inv, "run_id": run_id, "timed_s": timed,
            "engine_init_s": init, "engine_mode": mode}


def test_shares_by_kind_and_left_out_invocations(tmp_path: Path) -> None:
    a, b = "s/leg/m/w1/default/r1", "s/leg/m/w2/default/r1"
    c = "s/leg/m/w1/harness/r1"
    sw = tmp_path / "sweeps"
    # Two finished per-group sweeps, the second reusing one run (it costs that sweep nothing).
    _index(sw, "20260101T000000000-aaaaaa", "2026-01-01T00:00:00+00:00", "2026-01-01T00:01:40+00:00",
           [(a, False), (b, False)], "per-group")
    _index(sw, "20260101T010000000-bbbbbb", "2026-01-01T01:00:00+00:00", "2026-01-01T01:00:50+00:00",
           [(a, True), ("s/leg/m/w1/default/r2", False)], "per-group")
    # Cut off (no finished_at), and one whose only record was measured over by a later invocation.
    _index(sw, "20260101T020000000-cccccc", "2026-01-01T02:00:00+00:00", None, [(c, False)], "per-group")
    _index(sw, "20260101T030000000-dddddd", "2026-01-01T03:00:00+00:00", "2026-01-01T03:10:00+00:00",
           [("s/leg/m/w9/default/r1", False)], "per-group")
    recs = pd.DataFrame([
        _rec("20260101T000000000-aaaaaa", a, 30.0, 20.0, "per-group"),
        _rec("20260101T000000000-aaaaaa", b, 30.0, 0.0, "per-group"),
        _rec("20260101T010000000-bbbbbb", "s/leg/m/w1/default/r2", 10.0, 20.0, "per-group"),
        _rec("20260101T020000000-cccccc", c, 99.0, 9.0, "per-run"),
        _rec("other", "s/leg/m/w9/default/r1", 5.0, 5.0, "per-group")])
    invs = swt.invocations(_indexes(tmp_path), recs)
    assert [i.counted for i in invs] == [True, True, False, False]
    assert invs[2].wall_s is None and invs[2].engine == "per-run"   # the record's mode, not the index's
    assert invs[3].partial
    sm = swt.summarize(invs)
    assert sm.left_out == 2
    assert sm.wall_s == 150.0 and sm.timed_s == 70.0
    kind = next(k for k in sm.kinds if k.arms == "default")
    assert (kind.invocations, kind.left_out, kind.runs) == (3, 1, 3)
    assert abs(kind.share - 70 / 150) < 1e-12 and abs(kind.init_share - 40 / 150) < 1e-12
    assert abs(kind.best - 0.6) < 1e-12             # 60 of 100 s, against 10 of 50 s


def test_shipped_timed_share_series_matches_its_files() -> None:
    """The h200-ablation long-timed series, summed from its sweep indexes and records by hand."""
    root = ROOT / "results" / "h200-ablation"
    wall = timed = 0.0
    for path in sorted((root / "sweeps").glob("*.json")):
        idx = json.loads(path.read_text())
        if idx.get("scenario") != "h200-timed-share":
            continue
        wall += (pd.Timestamp(idx["finished_at"]) - pd.Timestamp(idx["started_at"])).total_seconds()
        for r in idx["runs"]:
            if not r["reused"]:
                timed += json.loads((root / "runs" / r["run_id"] / "results.json").read_text())["timing"]["timed_s"]
    assert wall > 0
    ds = dataset.load(root)
    sm = swt.summarize(swt.invocations(ds.sweeps, ds.records))
    (kind,) = [k for k in sm.kinds if k.series == "long-timed"]
    assert kind.invocations == 3 and kind.left_out == 0
    assert abs(kind.share - timed / wall) < 1e-9
    md = report.sweeptime_md(report.load_study(root))
    assert "### Sweep time" in md and f"{timed / wall:.1%}" in md


def test_no_sweep_indexes_no_section(tmp_path: Path) -> None:
    assert swt.invocations(_indexes(tmp_path), pd.DataFrame(columns=["provenance"])) == []
