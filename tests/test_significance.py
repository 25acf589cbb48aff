"""The significance rule's false-positive rate, simulated with the shipped studies' repeat spreads."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from harness.analyze import significance as sig

ROOT = Path(__file__).resolve().parents[1]
REPS = 40000
# Every repeat count the project allows per side, equal and unequal (a failed repeat leaves one short).
PAIRS = [(n, n) for n in range(2, 11)] + [(2, 3), (3, 2), (3, 5), (2, 10), (5, 10)]


@pytest.fixture(scope="module")
def spreads() -> list[sig.Spread]:
    return sig.spreads_from_records(ROOT)


def _shapes(spreads: list[sig.Spread]) -> list[tuple[str, np.ndarray | None]]:
    return [("log-normal", None)] + [(f"{s.name} residuals", s.residuals) for s in spreads]


def test_false_positive_rate_at_most_alpha_at_every_allowed_n(spreads: list[sig.Spread]) -> None:
    # The rule is scale-free on log values, so the false-positive rate depends on the noise's shape,
    # not its size: every shape is checked at every allowed n. The slack is Monte-Carlo error only: a
    # rule of level exactly alpha exceeds `limit` with probability 1e-3 over all checks together.
    shapes = _shapes(spreads)
    limit = sig.fpr_limit(REPS, checks=len(shapes) * len(PAIRS))
    assert limit < sig.ALPHA + 0.005
    bad = []
    for i, (name, noise) in enumerate(shapes):
        for n_a, n_b in PAIRS:
            rate = sig.rejection_rate(n_a, n_b, log_sd=spreads[0].log_sd, noise=noise, reps=REPS,
                                      seed=7919 * i + 31 * n_a + n_b)
            if rate > limit:
                bad.append(f"{name} n={n_a}/{n_b}: {rate:.4f}")
    assert not bad, f"false-positive rate above {limit:.4f}: {bad}"


def test_false_positive_rate_with_unequal_spreads() -> None:
    # Same centre, one leg three times noisier than the other, on either side of an unequal split.
    pairs = [(a, b) for a, b in PAIRS if a != b]
    limit = sig.fpr_limit(REPS, checks=2 * len(pairs))
    bad = [f"n={a}/{b} sd {sa}/{sb}: {rate:.4f}" for a, b in pairs for sa, sb in ((0.01, 0.03), (0.03, 0.01))
           if (rate := sig.rejection_rate(a, b, log_sd=sa, log_sd_b=sb, reps=REPS, seed=a * 101 + b)) > limit]
    assert not bad, f"false-positive rate above {limit:.4f}: {bad}"


def test_the_check_catches_an_anticonservative_rule(spreads: list[sig.Spread]) -> None:
    # A z-test on the same values ignores that a variance from 2 repeats is itself noisy: its
    # false-positive rate at n = 2 is far above 5%, and the same check must see it.
    def z_reject(a: np.ndarray, b: np.ndarray, alpha: float) -> np.ndarray:
        se = np.sqrt(a.var(axis=1, ddof=1) / a.shape[1] + b.var(axis=1, ddof=1) / b.shape[1])
        return np.abs(a.mean(axis=1) - b.mean(axis=1)) / se > 1.959964
    rate = sig.rejection_rate(2, 2, log_sd=0.01, reps=REPS, seed=1, reject=z_reject)
    assert rate > sig.fpr_limit(REPS, checks=len(PAIRS) * 3)


def test_power_grows_with_n_and_effect(spreads: list[sig.Spread]) -> None:
    cpu = next(s for s in spreads if s.name == "CPU")
    p = [sig.rejection_rate(n, n, log_sd=cpu.log_sd, effect=0.05, reps=4000, seed=n) for n in (2, 5, 10)]
    assert p[0] < p[1] < p[2]
    assert sig.rejection_rate(5, 5, log_sd=cpu.log_sd, effect=0.10, reps=4000, seed=3) > p[1]


def test_spreads_come_from_the_records(spreads: list[sig.Spread]) -> None:
    by = {s.name: s for s in spreads}
    assert set(by) == {"H200", "CPU"}
    assert 0 < by["H200"].log_sd < by["CPU"].log_sd < 1
    assert all(s.cells >= 5 and abs(float(np.std(s.residuals)) - 1) < 1e-9 for s in spreads)


def test_interval_and_verdict_agree() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        n_a, n_b = rng.integers(2, 8, size=2)
        a = np.exp(rng.normal(0.03 * rng.standard_normal(), 0.02, n_a))
        b = np.exp(rng.normal(0, 0.02, n_b))
        t = sig.welch_log(a, b)
        excludes = t.low > 1 or t.high < 1
        assert excludes == (t.verdict != "no difference detected")
        assert (t.verdict == "faster") == (t.low > 1)
        assert t.low <= t.ratio <= t.high


def test_welch_matches_scipy() -> None:
    from scipy import stats as sps

    a, b = [101.0, 103.0, 102.5], [99.0, 100.5, 98.0]
    t = sig.welch_log(a, b)
    ref = sps.ttest_ind(np.log(a), np.log(b), equal_var=False)
    assert math.isclose(t.p, float(ref.pvalue), rel_tol=1e-9)
    assert math.isclose(t.ratio, math.exp(np.mean(np.log(a)) - np.mean(np.log(b))), rel_tol=1e-12)
    # Unequal sides: the capped df never claims more than Welch-Satterthwaite does.
    b4 = [*b, 99.7]
    capped = sig.welch_log(a, b4)
    assert capped.df == 2 and capped.p > float(sps.ttest_ind(np.log(a), np.log(b4), equal_var=False).pvalue)


def test_n_needed_shrinks_with_the_effect() -> None:
    assert sig.n_needed(None) == sig.MIN_N
    assert sig.n_needed(0.03, 0.02) > sig.n_needed(0.03, 0.05) > sig.n_needed(0.03, 0.10) >= sig.MIN_N
    n = sig.n_needed(0.03, 0.05)
    assert sig.power(n, 0.03, 0.05) >= sig.POWER > sig.power(n - 1, 0.03, 0.05)
