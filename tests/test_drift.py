"""Host drift (harness.analyze.studies.drift, the report's drift figure): on FAKE studies written with
studygen (made-up values and start times, nothing measured), then a smoke check on two shipped studies."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import matplotlib
import pytest

from harness.analyze.dataset import load
from harness.core import paths
from harness.analyze.studies import drift
from harness.analyze.studies.dispersion import canonical_all
from harness.publish import figures
from harness.publish.figure_cells import Note, Png, drift_figure
from harness.publish.study import load_study
from studygen import record_dict, simple_study, write_run, write_study_yaml

matplotlib.use("Agg")

LEGS = [("cpu-a", "A"), ("cpu-b", "B")]
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)


def _interleaved(root: Path, host: list[float], *, base: dict[str, float] | None = None,
                 wobble: float = 0.0) -> Path:
    """A FAKE study measured as the harness does: repeat outermost, legs alternating inside it, each
    leg running `mixed` (tok/s) then `single-request` (ms per token). `host[r]` is the host's speed in
    repeat r (1.0 normal, 0.8: everything 20% slower), striking every run of that repeat."""
    write_study_yaml(root, LEGS)
    base = base or {"A": 1000.0, "B": 1200.0}
    t = T0
    for r, f in enumerate(host, start=1):
        for i, (leg, label) in enumerate(LEGS):
            # A little of each leg's own noise, different per repeat, so the legs do not agree exactly.
            own = 1 + wobble * ((r * 7 + i * 3) % 5 - 2) / 2
            for wl, kind, v in (("mixed", "throughput", base[label] * f * own),
                                ("single-request", "latency", 10.0 / (f * own))):
                write_run(root, record_dict(leg=leg, leg_label=label, model="m", workload=wl, kind=kind, value=v,
                                            repeat=r, started_at=t.isoformat()))
                t += timedelta(minutes=2)
    return root


def _frame(root: Path):
    return drift.drift_frame(canonical_all(load(root)))


def test_fake_episode_striking_both_legs_moves_them_together_and_is_the_episode(tmp_path):
    """FAKE: the host is 20% slower during repeat 3 only; both legs' runs of it fall together."""
    root = _interleaved(tmp_path / "s", [1.0, 1.02, 0.8, 0.99, 1.01, 1.0], wobble=0.01)
    frame = _frame(root)
    s = drift.drift_summary(frame)
    assert len(frame) == 24 and s.trend.n == 24 and not s.trend.too_few
    # Both workloads of both legs of each repeat: two pairs per repeat.
    assert s.comovement.n == 12 and s.comovement.r is not None and s.comovement.r > 0.9
    ep = s.episode
    assert ep is not None and ep.n == 4 and set(ep.runs["repeat"]) == {3} and ep.legs == ("A", "B")
    assert ep.start == frame.loc[frame["repeat"] == 3, "time"].min()
    assert ep.end == frame.loc[frame["repeat"] == 3, "time"].max()
    assert 0.75 < ep.min_speed < 0.85


def test_fake_episode_striking_one_leg_at_a_time_does_not_move_them_together(tmp_path):
    """FAKE: slow spells that strike only one leg of a repeat: no co-movement, and the episode is that leg's."""
    write_study_yaml(tmp_path / "s", LEGS)
    speeds = {"A": [1.0, 0.8, 1.0, 1.0, 0.8, 1.0], "B": [1.0, 1.0, 0.8, 1.0, 1.0, 0.8]}
    t = T0
    for r in range(1, 7):
        for leg, label in LEGS:
            v = 1000 * speeds[label][r - 1]
            write_run(tmp_path / "s", record_dict(leg=leg, leg_label=label, model="m", value=v, repeat=r,
                                                  started_at=t.isoformat()))
            t += timedelta(minutes=3)
    s = drift.drift_summary(_frame(tmp_path / "s"))
    assert s.comovement.n == 6 and s.comovement.r is not None and s.comovement.r < 0
    assert s.episode is not None and s.episode.n == 1


def test_fake_monotonic_slowdown_is_a_significant_negative_spearman(tmp_path):
    """FAKE: each repeat 1.5% slower than the one before it (a host throttling as the study goes on)."""
    host = [0.985 ** i for i in range(8)]
    root = _interleaved(tmp_path / "s", host)
    s = drift.drift_summary(_frame(root))
    assert s.trend.rho is not None and s.trend.rho < -0.9 and s.trend.significant and s.trend.p < 1e-3


def test_fake_steady_host_has_no_trend_and_no_episode(tmp_path):
    """FAKE: speed within ±1% throughout, in no order."""
    root = _interleaved(tmp_path / "s", [1.0, 1.01, 0.99, 1.0, 1.01, 0.99], wobble=0.004)
    s = drift.drift_summary(_frame(root))
    assert s.episode is None and not s.trend.significant


def test_fake_latency_run_slower_has_speed_below_one(tmp_path):
    """FAKE: ms per token is lower-is-better, so the 12 ms run is the slow one (speed 10/12)."""
    write_study_yaml(tmp_path / "s", LEGS[:1])
    t = T0
    for r, (tok_s, ms) in enumerate([(100.0, 10.0), (100.0, 10.0), (80.0, 12.0)], start=1):
        for wl, kind, v in (("mixed", "throughput", tok_s), ("single-request", "latency", ms)):
            write_run(tmp_path / "s", record_dict(leg="cpu-a", leg_label="A", workload=wl, kind=kind, value=v,
                                                  repeat=r, started_at=t.isoformat()))
            t += timedelta(minutes=2)
    frame = _frame(tmp_path / "s")
    slow = frame[frame["repeat"] == 3].set_index("workload")["speed"]
    assert slow["single-request"] == pytest.approx(10 / 12) and slow["mixed"] == pytest.approx(0.8)
    assert (frame.loc[frame["repeat"] < 3, "speed"] == 1.0).all()


def test_fake_runs_without_timestamps_or_repeats_are_left_out(tmp_path):
    """FAKE: a single-repeat cell and untimed runs are not in the frame; too few for any statistic."""
    write_study_yaml(tmp_path / "s", LEGS)
    write_run(tmp_path / "s", record_dict(leg="cpu-a", leg_label="A", value=1000.0, repeat=1,
                                          started_at=T0.isoformat()))
    for r in (1, 2):
        write_run(tmp_path / "s", record_dict(leg="cpu-b", leg_label="B", value=1000.0 + r, repeat=r,
                                              started_at=(T0 + timedelta(minutes=r)).isoformat()))
        write_run(tmp_path / "s", record_dict(leg="cpu-b", leg_label="B", workload="other", value=900.0 + r, repeat=r))
    frame = _frame(tmp_path / "s")
    assert list(frame["leg_label"]) == ["B", "B"] and set(frame["workload"]) == {"mixed"}
    s = drift.drift_summary(frame)
    assert s.trend.too_few and s.trend.rho is None and s.comovement.too_few and s.comovement.r is None


def test_fake_study_without_timestamps_gives_the_too_few_note(tmp_path):
    """FAKE: simple_study writes no start times (as transcribed figures carry none)."""
    root = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [100.0, 101.0, 99.0],
                                         ("0.26", "m", "mixed"): [110.0, 111.0, 109.0]})
    out = drift_figure(load_study(root))
    assert isinstance(out, Note) and "Too few repeated runs with timestamps" in out.text


def test_fake_study_draws_the_drift_figure_with_its_statistics(tmp_path):
    """FAKE: the episode study through the report cell and the figure function."""
    root = _interleaved(tmp_path / "s", [1.0, 1.02, 0.8, 0.99, 1.01, 1.0], wobble=0.01)
    assert isinstance(drift_figure(load_study(root)), Png)
    frame = _frame(root)
    fig = figures.drift_scatter(frame, drift.drift_summary(frame))
    title = fig._suptitle.get_text()
    assert "Spearman" in title and "12 pairs" in title and "largest episode: 4 runs of A, B" in title


@pytest.mark.parametrize("study", ["h200-ablation", "cpu-engine-reuse"])
def test_shipped_studies_give_a_summary(study):
    root = paths.RESULTS / study
    frame = drift.drift_frame(canonical_all(load(root)))
    s = drift.drift_summary(frame)
    assert not s.trend.too_few and s.trend.rho is not None and -1 <= s.trend.rho <= 1
    assert not s.comovement.too_few and s.comovement.r is not None
    assert frame["time"].is_monotonic_increasing and (frame["speed"] > 0).all()
    if study == "h200-ablation":
        olmoe = frame[frame["model"].str.startswith("OLMoE") & (frame["workload"] == "mixed")]
        assert len(olmoe) == 6 and set(olmoe["leg_label"]) == {"0.24", "0.26"}


def test_fake_fixed_leg_order_under_a_trend_is_a_limitation_naming_the_favoured_leg(tmp_path):
    """FAKE: every repeat measures A then B while the host slows down: a bias toward A, said so."""
    from harness.publish.sections.limitations import limitations

    root = _interleaved(tmp_path / "s", [0.985 ** i for i in range(8)])
    assert drift.fixed_order(_frame(root), "main") == ("A", "B")
    (said,) = [x for x in limitations(load_study(root)) if x.startswith("**Legs in a fixed order")]
    assert "A → B" in said and "slowed down" in said and "favours A" in said


def test_fake_alternating_legs_under_the_same_trend_are_no_fixed_order(tmp_path):
    from harness.publish.sections.limitations import limitations

    root = tmp_path / "s"
    write_study_yaml(root, LEGS)
    t = T0
    for r in range(1, 9):
        for leg, label in (LEGS if r % 2 else LEGS[::-1]):
            write_run(root, record_dict(leg=leg, leg_label=label, model="m", value=1000 * 0.985 ** r, repeat=r,
                                        started_at=t.isoformat()))
            t += timedelta(minutes=2)
    assert drift.drift_summary(_frame(root)).trend.significant
    assert drift.fixed_order(_frame(root), "main") is None
    assert not [x for x in limitations(load_study(root)) if x.startswith("**Legs in a fixed order")]


def test_the_shipped_fixed_order_study_gets_the_limitation_and_the_alternating_one_does_not():
    from harness.publish.sections.limitations import limitations

    flagged = [x for x in limitations(load_study(paths.RESULTS / "cpu-tiny-serial")) if x.startswith("**Legs in a fixed")]
    assert len(flagged) == 1 and "favours 0.32" in flagged[0]
    assert not [x for x in limitations(load_study(paths.RESULTS / "h200-ablation"))
                if x.startswith("**Legs in a fixed")]
