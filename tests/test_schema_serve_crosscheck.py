"""serve-crosscheck records read back through harness.schema.record.read_typed: the shipped files
load unchanged, and a bad, foreign or too-new file is a one-line UserError naming it. The bad files
here are hand-written fakes, not measurements."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.core.errors import UserError
from harness.experiments import serve_crosscheck as sxc
from harness.schema import serve_crosscheck as schema

RESULTS = Path(__file__).resolve().parents[1] / "results"
SHIPPED = sorted(RESULTS.glob(f"*/{sxc.FOLDER}/*.json"))


def _without_lead(v):
    """Without the harness points' `lead_requests` (0 in a file lifted from version 4), `engine` and
    `send_lag_ms` (None and empty in a file lifted from version 5) and `engine_latency` (None from 6)."""
    lifted = ("lead_requests", "engine", "send_lag_ms", "engine_latency")
    if isinstance(v, dict):
        return {k: _without_lead(x) for k, x in v.items() if k not in lifted}
    return [_without_lead(x) for x in v] if isinstance(v, list) else v


def _without_version(d: dict) -> dict:
    """All but what lifting an older file changes: the version, the kind, each point's band and its p99
    comparisons (None in a file lifted from version 3), and its lead requests (0 from version 4)."""
    lifted = ("band", "ttft_p99_ms", "tpot_p99_ms")
    d = _without_lead(d)
    out = {k: v for k, v in d.items() if k not in ("schema_version", "kind", "summary")}
    return out | {"summary": [{k: v for k, v in x.items() if k not in lifted} for x in d.get("summary", [])]}


def test_there_are_shipped_records():
    assert SHIPPED, "no results/*/serve-crosscheck/*.json: the next test would pass vacuously"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parents[1].name}/{p.name}")
def test_shipped_record_loads_unchanged(path):
    raw = json.loads(path.read_text(encoding="utf-8"))
    rec = sxc.read(path)
    assert rec.schema_version == schema.SCHEMA_VERSION and rec.kind == schema.KIND
    assert _without_version(rec.model_dump(mode="json")) == _without_version(raw)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parents[1].name}/{p.name}")
def test_shipped_record_round_trips(path, tmp_path):
    rec = sxc.read(path)
    out = tmp_path / path.name
    out.write_text(json.dumps(rec.model_dump(mode="json")))
    assert sxc.read(out) == rec and json.loads(out.read_text())["kind"] == schema.KIND


def _study_with(tmp_path: Path, name: str, data: object) -> tuple[Path, Path]:
    folder = tmp_path / "study" / sxc.FOLDER
    folder.mkdir(parents=True)
    path = folder / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return tmp_path / "study", path


def _shipped_data() -> dict:
    return json.loads(SHIPPED[0].read_text(encoding="utf-8"))


@pytest.mark.parametrize("edit, what", [
    (lambda d: d | {"schema_version": 99}, "schema_version 99 is not one this harness reads"),
    (lambda d: d | {"schema_version": "2"}, "schema_version '2' is not one this harness reads"),
    (lambda d: d | {"schema_version": 2, "kind": "bisect"}, "not a serve-crosscheck record"),
    # Whichever shipped record comes first (some are written at schema 3, with a kind): without one.
    (lambda d: {k: v for k, v in d.items() if k != "kind"} | {"schema_version": 2},
     "not a serve-crosscheck record (no kind)"),
    (lambda d: d | {"leg": 3}, "leg: Input should be a valid string"),
    (lambda d: d | {"surprise": 1}, "surprise: unknown key"),
    (lambda d: [d], "not a serve-crosscheck record"),
    (lambda d: "{not json", "not a JSON record"),
])
def test_bad_file_is_one_line_naming_it(tmp_path, edit, what):
    study, path = _study_with(tmp_path, "x.json", edit(_shipped_data()))
    with pytest.raises(UserError) as e:
        sxc.load_all(study)
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and what in msg and "\n" not in msg


def test_bad_file_through_write_view_is_one_line(tmp_path):
    """The view is rebuilt from every record in the folder: a too-new one stops it with its name."""
    study, path = _study_with(tmp_path, "x.json", _shipped_data() | {"schema_version": 99})
    with pytest.raises(UserError, match=f"^{path}: schema_version 99 "):
        sxc.write_view(study)
    assert not (study / sxc.VIEW).exists()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parents[1].name}/{p.name}")
def test_shipped_bands_are_rejudged_from_their_intervals(path):
    """The shipped files are version 1, their band the point estimate's ("within" at 0.989
    [0.748, 1.309]); lifted, the band is the interval's."""
    from harness.schema.serve_crosscheck import interval_band

    raw = json.loads(path.read_text(encoding="utf-8"))
    rec = sxc.read(path)
    for old, new in zip(raw["summary"], rec.summary):
        o = old["output_tok_s"]
        assert new.band == interval_band(o["ratio"], o["ci_low"], o["ci_high"])
        if o["ci_low"] is not None and o["ci_low"] < 0.97 and o["ci_high"] > 1.03:
            assert new.band == "undecided"


def test_version_2_band_is_rejudged_and_a_point_without_interval_is_not_judged(tmp_path):
    """Hand-made version-2 points: a point estimate inside the band ("within" under version 2) with a
    wide interval, and one with no interval."""
    data = _shipped_data() | {"schema_version": 2, "kind": schema.KIND}
    wide, alone = (json.loads(json.dumps(data["summary"][0])) for _ in range(2))
    wide["output_tok_s"].update(ratio=1.01, ci_low=0.90, ci_high=1.12)
    alone["output_tok_s"].update(ratio=1.01, ci_low=None, ci_high=None, verdict="too few repeats")
    data["summary"] = [wide | {"band": "within"}, alone | {"band": "within"}]
    _, path = _study_with(tmp_path, "v2.json", data)
    assert [s.band for s in sxc.read(path).summary] == ["undecided", "no interval"]


def test_a_version_3_record_lifts_without_p99_and_its_view_summarizes_them_from_its_repeats(tmp_path):
    # A shipped version-3 record (the two clients at a capacity, where the tail is what matters): read
    # alone it has no p99 comparisons; the study's reader summarizes it again, so the view has them.
    src = RESULTS / "h100-capacity-clients" / sxc.FOLDER / "h200-0.24.0--Llama-3.1-8B_dummy_weights_--capacity-text.json"
    raw = json.loads(src.read_text(encoding="utf-8"))
    assert raw["schema_version"] == 3
    study, path = _study_with(tmp_path, src.name, raw)
    assert all(s.ttft_p99_ms is None and s.tpot_p99_ms is None for s in sxc.read(path).summary)
    (rec,) = sxc.load_all(study)
    first = rec.summary[0]
    pair = rec.repeats[0].points[0]
    assert first.ttft_p99_ms.harness == [pair.harness.metrics.ttft_ms.p99]
    assert first.ttft_p99_ms.vllm == [pair.vllm.ttft_ms.p99]
    assert first.ttft_p99_ms.ratio == pytest.approx(pair.harness.metrics.ttft_ms.p99 / pair.vllm.ttft_ms.p99)
    assert first.tpot_p99_ms.ratio == pytest.approx(pair.harness.metrics.tpot_ms.p99 / pair.vllm.tpot_ms.p99)
    # What was stored is kept: the throughput comparison is the one the file holds.
    assert first.output_tok_s == sxc.read(path).summary[0].output_tok_s
    row = next(ln for ln in sxc.crosscheck_md([rec]).splitlines() if ln.startswith("| h200-0.24.0 "))
    assert row.count(" | ") == 13 and "9105.07 / 7442.26 (1.223)" in row
    assert "p99 TTFT ms harness / vLLM" in sxc.crosscheck_md([rec])
