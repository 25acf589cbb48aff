from harness.analyze import significance as sig
from harness.analyze.stats import ratio
from harness.analyze.fmt import fmt_verdict



def test_verdicts_by_repeat_count() -> None:
    assert ratio([100.0], [110.0]).verdict == "single pass"
    few = ratio([100.0], [110.0, 111.0, 109.0])
    assert few.verdict == "too few repeats" and few.low is None and few.needs is not None and few.needs >= 2
    assert ratio([], [1.0]).verdict == "missing"
    fast = ratio([100.0, 100.5, 99.8], [110.0, 110.4, 109.7])
    assert fast.verdict == "faster" and fast.low > 1 and fast.method == sig.METHOD and fast.p < sig.ALPHA
    assert ratio([100.0, 100.5, 99.8], [110.0, 110.4, 109.7], higher_is_better=False).verdict == "slower"
    same = ratio([100.0, 103.0, 98.0], [101.0, 99.0, 102.0])
    assert same.verdict == "undecided" and same.low < 1 < same.high



def test_too_few_repeats_prints_what_it_needs() -> None:
    assert fmt_verdict(ratio([100.0], [110.0, 111.0])) == "too few repeats (needs ≥ 2 per side)" or \
        fmt_verdict(ratio([100.0], [110.0, 111.0])).startswith("too few repeats (needs ≥ ")
    noisy = ratio([100.0], [90.0, 110.0, 100.0])
    assert noisy.needs is not None and noisy.needs > 2

