"""harness.analyze.resolution: block-level intervals and the detectable difference per 10 minutes.
The cells here are made-up log ratios (FAKE data), checked against the formulas by hand; the last
test reads the measured A/A study and checks it against the table's own interval."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness.analyze.resolution import main, resolve

ROOT = Path(__file__).resolve().parents[1]


def test_interval_and_detectable_from_fake_blocks() -> None:
    # FAKE: three blocks of two pair log ratios each; block means 0.01, 0.00, -0.01 (sd 0.01).
    cells = {("m", "w"): {1: [0.012, 0.008], 2: [0.001, -0.001], 3: [-0.01, -0.01]}}
    secs = {("m", 1): 300.0, ("m", 2): 200.0, ("m", 3): 100.0}
    (r,) = resolve(cells, secs)
    assert r.block_means == pytest.approx([0.01, 0.0, -0.01])
    assert r.ratio == pytest.approx(1.0)
    assert r.block_sd == pytest.approx(0.01)
    half = 4.302653 * 0.01 / math.sqrt(3)          # t(0.975, 2 df)
    assert (r.low, r.high) == pytest.approx((math.exp(-half), math.exp(half)), rel=1e-6)
    # mean block 200 s: three blocks in 10 minutes
    assert r.detectable_10min == pytest.approx(2.80 * 0.01 / math.sqrt(3))


def test_one_block_has_no_interval() -> None:
    (r,) = resolve({("m", "w"): {1: [0.02, 0.0]}}, {("m", 1): 100.0})
    assert r.ratio == pytest.approx(math.exp(0.01))
    assert r.low is None and r.high is None and r.detectable_10min is None


def test_bad_input_is_one_line_and_nonzero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing"), "a", "b"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err


@pytest.mark.skipif(not (ROOT / "results/h200-aa/runs").is_dir(), reason="the measured study is not here")
def test_measured_aa_matches_its_table() -> None:
    from harness.analyze.dataset import load
    from harness.analyze.resolution import resolution

    rows = {r.workload: r for r in resolution(load(ROOT / "results/h200-aa"), "h200-0.26.0", "h200-0.26.0-aa")}
    assert set(rows) == {"mixed", "single-request", "image"}
    for r in rows.values():
        assert len(r.block_means) == 3 and r.low is not None and r.high is not None
        assert r.low < 1.0 < r.high          # an A/A: no cell faster or slower
    # the throughput table prints the mixed cell as 1.00x [1.00, 1.01]
    assert round(rows["mixed"].low, 2) == 1.00 and round(rows["mixed"].high, 2) == 1.01


@pytest.mark.skipif(not (ROOT / "results/h200-aa/runs").is_dir(), reason="the measured study is not here")
def test_out_never_overwrites_a_file_it_did_not_create(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "notes.md"
    mine.write_text("the user's own words\n", encoding="utf-8")
    assert main([str(ROOT / "results/h200-aa"), "h200-0.26.0", "h200-0.26.0-aa", "--out", str(mine)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and "exists" in err
    assert mine.read_text(encoding="utf-8") == "the user's own words\n"
    new = tmp_path / "table.md"
    assert main([str(ROOT / "results/h200-aa"), "h200-0.26.0", "h200-0.26.0-aa", "--out", str(new)]) == 0
    assert "Detectable in 10 min" in new.read_text(encoding="utf-8")
