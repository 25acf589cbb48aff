"""The decisive verdicts' error rates, by seeded simulation (harness.analyze.simulation): the paired,
interleaved design's rule with engine instances as a level, "equivalent within ±δ", and a table's
false discovery rate. Each check would fail for a rule that overclaims (shown beside it)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analyze import significance as sig
from harness.analyze import simulation as simu
from harness.analyze.fmt import fmt_verdict
from harness.analyze.stats import nested_ratio, ratio

SIGMA = 0.04        # the CPU probe's per-pass log sd, each side (0.057 per pair)
BOUND = 0.01        # an engine-instance bound of a quarter of the pass noise


def test_vectorised_rule_is_the_scalar_rule():
    rng = np.random.default_rng(3)
    for engine_sd in (None, BOUND):
        for blocks, pairs in ((2, 3), (3, 4), (2, 8)):
            d = simu.paired_blocks(rng, 60, blocks, pairs, simu.Host(sigma=SIGMA, tau=0.01), effect=0.03)
            vec = simu.nested_verdicts(d, margin=0.05, engine_sd=engine_sd)
            for row, code in zip(d, vec):
                t = sig.nested_paired(list(row), margin=0.05, engine_sd=engine_sd).test
                assert {"faster": 1, "slower": -1, "equivalent": 2}.get(t.verdict, 0) == code


def test_false_difference_rate_at_every_allowed_design_within_the_bound():
    reps = 6000
    cases = [(b, k, tx) for b in (2, 3, 4) for k in (2, 3, 6, 12) for tx in (0.0, 0.5, 1.0) if b * k >= sig.PAIRED_MIN]
    limit = sig.fpr_limit(reps, checks=len(cases))
    worst = 0.0
    for i, (b, k, tx) in enumerate(cases):
        r = simu.paired_rates(b, k, simu.Host(sigma=SIGMA, tau=tx * BOUND), engine_sd=BOUND, reps=reps, seed=i)
        worst = max(worst, r["difference"])
        assert r["difference"] <= limit, (b, k, tx, r)
    print(f"largest false difference rate within the bound: {worst:.4f} (limit {limit:.4f})")


def test_ignoring_engine_instances_overclaims():
    # The same check fails for a rule that treats every pair as independent (bound 0) while engines
    # differ by the bound: the reason the bound is part of the rule.
    reps = 6000
    r = simu.paired_rates(2, 12, simu.Host(sigma=SIGMA, tau=BOUND * 2), engine_sd=0.0, reps=reps, seed=1)
    assert r["difference"] > sig.fpr_limit(reps)


def test_without_a_bound_the_block_means_are_the_units():
    rng = np.random.default_rng(0)
    d = simu.paired_blocks(rng, 1, 3, 6, simu.Host(sigma=SIGMA), effect=0.0)[0]
    res = sig.nested_paired(list(d), margin=0.05)
    assert not res.pooled and res.test.unit == "engine block" and res.test.n == 3
    one = sig.nested_paired([list(d[0])], margin=0.05)
    assert one.test.verdict == "too few repeats" and one.test.needs == sig.NESTED_MIN_BLOCKS


def test_power_of_the_paired_design():
    # Two engine blocks of eight pairs at the CPU's pass noise: 10% found most of the time.
    r = simu.paired_rates(2, 8, simu.Host(sigma=SIGMA, tau=0.005), effect=0.10, engine_sd=BOUND, reps=4000, seed=5)
    assert r["faster"] > 0.7


@pytest.mark.parametrize("effect", [0.05, 0.07])
def test_equivalent_is_rarely_claimed_at_or_beyond_the_margin(effect):
    reps = 20000
    limit = sig.fpr_limit(reps, checks=8)
    for n in (2, 3, 5, 10):
        assert simu.welch_equivalent_rate(n, log_sd=0.01, effect=effect, margin=0.05, reps=reps, seed=n) <= limit
    for b, k in ((2, 6), (3, 12)):
        r = simu.paired_rates(b, k, simu.Host(sigma=0.01, tau=0.0), effect=effect, margin=0.05, engine_sd=0.002,
                              reps=reps, seed=b * k)
        assert r["equivalent"] <= limit, (b, k, r)


def test_equivalence_is_reached_when_it_holds():
    t = sig.welch_log([100, 100.5, 99.6, 100.2], [100.1, 99.8, 100.3, 99.9], margin=0.02)
    assert t.verdict == "equivalent" and 1 / 1.02 < t.low and t.high < 1.02
    wide = sig.welch_log([100, 110, 90], [100, 108, 93], margin=0.02)
    assert wide.verdict == "undecided" and (wide.needs is None or wide.needs > 3)


def test_a_tables_false_discovery_rate():
    for cells, null_share in ((20, 0.8), (70, 0.9)):
        kw = dict(null_share=null_share, effect=0.10, margin=0.05, sigma=SIGMA, blocks=2, pairs=8, tau=0.005)
        ctl = simu.table_fdr(cells, engine_sd=BOUND, reps=60, seed=cells, **kw)
        assert ctl["fdr"] <= sig.ALPHA + 0.02, ctl   # Monte-Carlo slack of 60 tables
        assert ctl["decided"] > 0.05, ctl            # and it still decides


def test_decide_table_is_stricter_than_each_cell():
    tests = [sig.welch_log([1.0, 1.02, 0.99], [1.0, 0.97, 1.01], margin=0.05) for _ in range(1)]
    near = sig.welch_log([1.06, 1.05, 1.07], [1.0, 1.01, 0.99])          # p a little under alpha
    many = [near] + [sig.welch_log([1.0, 1.03, 0.97], [1.0, 0.98, 1.02]) for _ in range(30)]
    assert near.verdict == "faster"
    out = sig.decide_table(many)
    assert out[0] in ("faster", "undecided") and all(v == "undecided" for v in out[1:])
    assert sig.decide_table(tests) == [tests[0].verdict]          # one test: the cell's own verdict
    assert sig.decide_table([None]) == [None]


def test_nested_ratio_and_its_printed_verdict():
    rng = np.random.default_rng(2)
    blocks = [[(100.0 * math.exp(e1), 104.0 * math.exp(e2)) for e1, e2 in rng.normal(0, 0.01, (8, 2))]
              for _ in range(2)]
    r = nested_ratio(blocks, margin=0.05, engine_sd=0.002)
    assert r.verdict == "faster" and 1.02 < r.value < 1.06 and r.n_old == 16 and r.unit == "pair"
    lat = nested_ratio([[(n, o) for o, n in b] for b in blocks], higher_is_better=False, margin=0.05, engine_sd=0.002)
    assert lat.verdict == "faster"   # lower ms/token on the new side: faster
    und = ratio([100, 110, 95], [101, 108, 97], margin=0.05)
    assert und.verdict == "undecided" and fmt_verdict(und).startswith("undecided (~")
    eq = ratio([100, 100.2, 99.9], [100.1, 100.0, 100.2], margin=0.02)
    assert fmt_verdict(eq) == "equivalent within ±2%"


LEGS2 = [("cpu-a", "0.27"), ("cpu-b", "0.32")]


def write_paired(study, rng, *, gain: float, noise: float, series: str, blocks: int = 2, pairs: int = 6) -> None:
    """FAKE records of the paired design: LEGS2, the new leg `gain` times as fast, a host that moves
    3% from round to round (shared by the pair) and `noise` per pass."""
    from tests.studygen import record_dict, write_run

    for block in range(1, blocks + 1):
        host = rng.normal(0, 0.03, pairs)
        for (leg, label), g in zip(LEGS2, (1.0, gain)):
            passes = [{"round": k + 1, "position": k % 2, "started_at": 1.0, "ended_at": 2.0, "seconds": 1.0,
                       "value": 1000 * g * math.exp(host[k] + rng.normal(0, noise))} for k in range(pairs)]
            write_run(study, record_dict(leg=leg, leg_label=label, repeat=block, series=series,
                                         value=float(np.median([p["value"] for p in passes])),
                                         manifest={"device": "x86_64 FAKE-CPU"},
                                         paired={"block": block, "blocks": blocks, "pairs": pairs, "passes": passes,
                                                 "legs": [a for a, _ in LEGS2]}))


def test_a_paired_study_is_decided_by_the_nested_rule(tmp_path):
    # FAKE records of the paired design: two legs, two engine blocks of six rounds, the new leg 8% faster.
    from harness.analyze import tables
    from harness.analyze.canonical import canonicalize
    from harness.analyze.dataset import load
    from tests.studygen import write_study_yaml

    write_study_yaml(tmp_path, LEGS2, engine_sd=0.005, margin=0.05)
    write_paired(tmp_path, np.random.default_rng(4), gain=1.08, noise=0.005, series="main")
    t = tables.throughput(canonicalize(load(tmp_path)))
    row = t.display.iloc[0]
    col = [c for c in t.display.columns if c.endswith("verdict")][0]
    assert row[col] == "faster", row.to_dict()
    assert "12 pass pairs" in row[col.replace("verdict", "units")]   # the units the rule counted
    assert any("paired cells" in n and "0.0050" in n for n in t.notes)


def test_engine_variance_recovers_a_known_engine_spread():
    from harness.analyze.engine_variance import estimate

    rng = np.random.default_rng(11)
    tau, sigma = 0.02, 0.01
    cells = {}
    for c in range(6):
        blocks = {}
        for b in range(1, 7):
            offset = rng.normal(0, tau) - rng.normal(0, tau)   # the two legs' engines of this block
            blocks[b] = list(offset + rng.normal(0, sigma * math.sqrt(2), 8))
        cells[("m", f"w{c}")] = blocks
    ev = estimate(cells)
    assert 0.5 * tau < ev.engine_sd < 1.6 * tau and ev.engine_sd_upper > ev.engine_sd
    assert ev.pair_sd == pytest.approx(sigma * math.sqrt(2), rel=0.2)
    flat = estimate({("m", "w"): {1: [0.01, -0.01, 0.0], 2: [0.0, 0.01, -0.01]}})
    assert flat.engine_sd == 0.0 and flat.engine_sd_upper is not None


def test_paired_and_serial_modes_agree_when_pairing_only_removes_noise(tmp_path):
    # FAKE records: one study, the paired series and a serial series of the same two legs, the new leg
    # 5% faster in both; the serial repeats carry the host's drift, the pairs cancel it.
    from harness.analyze.dataset import load
    from harness.analyze.modes import mode_agreement, mode_agreement_md
    from tests.studygen import record_dict, write_run, write_study_yaml

    write_study_yaml(tmp_path, LEGS2, engine_sd=0.005, main_series="paired")
    rng = np.random.default_rng(8)
    write_paired(tmp_path, rng, gain=1.05, noise=0.004, series="paired")
    for rep in (1, 2, 3, 4):
        for (leg, label), gain in zip(LEGS2, (1.0, 1.05)):
            write_run(tmp_path, record_dict(leg=leg, leg_label=label, repeat=rep, series="serial",
                                            value=1000 * gain * math.exp(rng.normal(0, 0.01))))
    (row,) = mode_agreement(load(tmp_path), paired="paired", serial="serial", old="cpu-a", new="cpu-b")
    assert row.paired.n_old == 12 and row.serial.n_old == 4
    assert row.low < 1 < row.high and 0.95 < row.value < 1.05
    assert "paired ÷ serial" in mode_agreement_md([row])
    # `harness tables` writes the same comparison as tables/modes.md and .csv.
    from harness.analyze.derive import write_study
    _, written = write_study(tmp_path)
    modes_md = tmp_path / "derived" / "tables" / "modes.md"
    assert modes_md in written and "Paired series `paired` against serial series `serial`" in modes_md.read_text()
    assert f"{row.value:.3f} [{row.low:.3f}, {row.high:.3f}]" in modes_md.read_text()


def test_default_margin_by_device_kind():
    assert sig.default_margin("1x NVIDIA H200 (driver 580.159.04)") == 0.02
    assert sig.default_margin("8x FAKE-GPU") == 0.02
    assert sig.default_margin("Intel(R) Xeon(R) Processor (2 cores, avx2+avx512f)") == 0.05
    assert sig.default_margin(None) == 0.05


def test_a_cell_decided_alone_but_not_across_the_table_says_so():
    from dataclasses import replace as _replace

    alone = ratio([1.0, 1.01, 0.99], [1.08, 1.09, 1.07], margin=0.05)
    assert alone.verdict == "faster"
    demoted = _replace(alone, verdict="undecided")
    assert fmt_verdict(demoted) == "undecided across the table (faster alone)"


# --- stopping when decided ------------------------------------------------------------------------

@pytest.mark.parametrize("min_blocks,max_blocks", [(3, 4), (3, 6), (3, 10), (4, 8)])
def test_until_decided_keeps_every_verdicts_error_rate_at_alpha(min_blocks, max_blocks):
    # A look after every block from min_blocks on, each at alpha / looks, stopping at the first that
    # decides: a false difference (no true one) and a false "equivalent" (truly the margin apart) stay at
    # or below alpha, with engine instances differing (tau) and the host drifting and stepping.
    reps = 6000
    limit = sig.fpr_limit(reps, checks=8)
    for i, tau in enumerate((0.0, 0.02)):
        host = simu.Host(sigma=SIGMA, tau=tau)
        null = simu.sequential_rates(min_blocks, max_blocks, 4, host, margin=0.05, reps=reps, seed=10 + i)
        at_margin = simu.sequential_rates(min_blocks, max_blocks, 4, host, effect=0.05, margin=0.05, reps=reps,
                                          seed=20 + i)
        assert null["difference"] <= limit, (tau, null)
        assert at_margin["equivalent"] <= limit, (tau, at_margin)


def test_looking_at_alpha_every_time_overclaims():
    # The same check fails for the naive rule (each look at alpha): the reason the looks share alpha.
    reps = 6000
    r = simu.sequential_rates(3, 10, 4, simu.Host(sigma=SIGMA), margin=0.05, adjusted=False, reps=reps, seed=5)
    assert r["difference"] > sig.fpr_limit(reps)


def test_until_decided_table_false_discovery_rate():
    r = simu.sequential_table_fdr(20, null_share=0.8, effect=0.10, margin=0.05, sigma=SIGMA, min_blocks=3,
                                  max_blocks=6, pairs=4, reps=60, seed=3)
    assert r["fdr"] <= 0.05 + 0.02
    with pytest.raises(ValueError):
        sig.look_alpha(0)
