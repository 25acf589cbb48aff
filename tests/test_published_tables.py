"""The tables generated from results/b200-reference reproduce the published study's tables.

The records there are transcribed (one per printed figure), so every printed figure must come back
exactly. Ratios are computed from those figures, never stored; the study computed its ratios from
unrounded measurements, so a ratio recomputed from the rounded printed figures can differ in the
last digit. Each such ratio is NAMED below (ROUNDING_LIMITED) and must still lie within what the
printed figures' rounding allows; every other ratio must come back exactly.
"""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from harness.core import paths

from harness.analyze import tables
from harness.analyze.canonical import canonicalize
from harness.analyze.dataset import load
from harness.analyze.failure import failure_table
from harness.analyze.manifest import stack_table
from published_b200 import plain, read_table

STUDY = paths.RESULTS / "b200-reference"

# (table, model, workload, ratio column): printed ratio. The printed figures' rounding cannot
# recover these; e.g. gpt-oss-120b long-context 277 -> 644 recomputes as 2.32x, printed 2.33x.
ROUNDING_LIMITED: dict[tuple[str, str, str, str], str] = {
    ("throughput", "gpt-oss-120b", "long-context", "26/18"): "2.33x",
    ("throughput", "mamba-2.8b-hf", "long-context", "26/18"): "1.10x",
    ("latency", "Llama-3.1-8B-Instruct", "fixed-batch-32", "18→26"): "1.04x",
    ("latency", "Llama-3.1-8B-Instruct", "fixed-batch-32", "26→29"): "0.99x",
    ("latency", "gpt-oss-120b", "fixed-batch-32", "18→26"): "2.51x",
    ("latency", "gpt-oss-120b", "fixed-batch-32", "26→29"): "1.01x",
    ("latency", "mamba-2.8b-hf", "fixed-batch-32", "18→26"): "1.05x",
    ("latency", "Mamba-Codestral-7B-v0.1", "fixed-batch-32", "18→26"): "1.15x",
    ("latency", "Mamba-Codestral-7B-v0.1", "fixed-batch-32", "26→29"): "1.03x",
    ("latency", "Qwen3-Next-80B-A3B-Instruct", "fixed-batch-32", "18→26"): "1.31x",
    ("latency", "Qwen3-Next-80B-A3B-Instruct", "fixed-batch-32", "26→29"): "1.03x",
    ("latency", "Kimi-Linear-48B-A3B-Instruct", "fixed-batch-32", "18→26"): "1.19x",
    ("latency", "Kimi-Linear-48B-A3B-Instruct", "fixed-batch-32", "26→29"): "1.11x",
    ("latency", "whisper-large-v3", "single-utterance", "26→29"): "0.95x",
    ("latency", "whisper-large-v3", "fixed-batch-32", "18→26"): "1.02x",
    ("latency", "whisper-large-v3", "fixed-batch-32", "26→29"): "0.98x",
    ("latency", "Qwen2.5-Omni-7B", "single-image", "26→29"): "1.00x",
    ("latency", "gemma-4-26B-A4B-it", "fixed-batch-32", "26→29"): "1.06x",
}

pytestmark = pytest.mark.skipif(not (STUDY / "study.yaml").exists(), reason="results/b200-reference not present")


@pytest.fixture(scope="module")
def canon():
    return canonicalize(load(STUDY))


def _half_unit(printed: str) -> Decimal:
    """Half a unit of the printed figure's last digit: "21,943" -> 0.5, "0.18" -> 0.005."""
    digits = printed.replace(",", "")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return Decimal(5) / Decimal(10) ** (decimals + 1)


def _ratio_range(old: str, new: str, higher_is_better: bool) -> tuple[float, float]:
    """Every ratio the true figures behind two printed figures could have."""
    o, n = Decimal(old.replace(",", "")), Decimal(new.replace(",", ""))
    ho, hn = _half_unit(old), _half_unit(new)
    if higher_is_better:      # new / old
        return float((n - hn) / (o + ho)), float((n + hn) / (o - ho))
    return float((o - ho) / (n + hn)), float((o + ho) / (n - hn))   # old / new


def _compare(name: str, generated: tables.Table) -> tuple[dict, int]:
    pub = read_table(name)
    assert list(generated.display.columns) == pub.header
    gen_rows = [list(r) for r in generated.display.itertuples(index=False)]
    assert [r[:3] for r in gen_rows] == [r[:3] for r in pub.rows], "rows differ in order or identity"
    legs = pub.header[3:6]
    mismatched: dict[tuple[str, str, str, str], tuple[str, str]] = {}
    n_ratios = 0
    for g, p in zip(gen_rows, pub.rows):
        for col, got, printed in zip(pub.header, g, p):
            if col in legs or col in ("model", "tp", "workload"):
                assert got == printed, f"{name} {p[0]} {p[2]} {col}: generated {got}, published {printed}"
            elif printed != "—":
                n_ratios += 1
                if got != printed:
                    mismatched[(name, plain(p[0]), p[2], col)] = (got, printed)
            else:
                assert got == "—"
    return mismatched, n_ratios


def _check_rounding_limited(name: str, mismatched: dict) -> None:
    pub = read_table(name)
    higher = name == "throughput"
    for key, (got, printed) in mismatched.items():
        row = next(r for r in pub.rows if plain(r[0]) == key[1] and r[2] == key[2])
        cells = dict(zip(pub.header, row))
        # "26/18" (new/old) or "18→26" (old→new): the two legs the ratio is between.
        a, b = re.split(r"/|→", key[3])
        old_lb, new_lb = (f"0.{b}", f"0.{a}") if higher else (f"0.{a}", f"0.{b}")
        lo, hi = _ratio_range(cells[old_lb], cells[new_lb], higher)
        p = float(printed.rstrip("x"))
        # The printed ratio stands for [p - 0.005, p + 0.005); that must meet the possible range.
        assert lo <= p + 0.005 and p - 0.005 <= hi, f"{key}: printed {printed} outside [{lo:.4f}, {hi:.4f}]"
        # And the generated ratio is the one the printed figures give (it lies in the same range).
        assert lo - 0.005 <= float(got.rstrip("x")) <= hi + 0.005, key


def test_throughput_and_latency_reproduce_every_published_number(canon):
    """Every printed figure exactly; every ratio exactly except the named rounding-limited ones."""
    total_ratios = 0
    all_mismatched: dict = {}
    for name, build in (("throughput", tables.throughput), ("latency", tables.latency)):
        mismatched, n = _compare(name, build(canon))
        total_ratios += n
        _check_rounding_limited(name, mismatched)
        all_mismatched |= {k: v[1] for k, v in mismatched.items()}
    assert all_mismatched == ROUNDING_LIMITED
    assert len(ROUNDING_LIMITED) == 18 and total_ratios == 124


def test_the_named_ratios_really_cannot_be_recomputed(canon):
    # Guard against a list that only papers over a bug: each named ratio recomputed from the printed
    # figures rounds to something else than printed.
    for (name, model, workload, col), printed in ROUNDING_LIMITED.items():
        t = tables.throughput(canon) if name == "throughput" else tables.latency(canon)
        d = t.data[(t.data["model"] == model) & (t.data["workload"] == workload)].iloc[0]
        assert f"{d[col]:.2f}x" != printed


def test_coverage_matches(canon):
    pub = read_table("coverage")
    got = tables.coverage(canon).display
    assert list(got["passing"]) == pub.column("passing")
    for g, p in zip(got["failing"], pub.column("failing")):
        # The study abbreviates one name in this table (`gemma-4-26B` for `gemma-4-26B-A4B-it`).
        gn, pn = [plain(x) for x in g.split(", ")], [plain(x) for x in p.split(", ")]
        assert len(gn) == len(pn) and all(a.startswith(b) for a, b in zip(gn, pn))


def test_failure_attribution_has_the_two_groups(canon):
    pub = read_table("failure_attribution")
    got = failure_table(canon.dataset, leg="0.18")
    assert list(got["models"]) == [int(x) for x in pub.column("models")] == [2, 6]
    for g, p in zip(got["root cause"], pub.column("root cause")):
        assert g.startswith(p[:4]) and plain(p[4:]).split(" (")[0] in plain(g)
    assert got.iloc[0]["error"] == pub.rows[0][2]
    assert got.iloc[1]["fixable?"].startswith(pub.rows[1][3])
    assert set(got.iloc[1]["model names"].replace("`", "").split(", ")) == {
        "Kimi-Linear-48B-A3B-Instruct", "Qwen3-VL-235B-A22B-Instruct-FP8", "whisper-large-v3",
        "Qwen2-VL-7B-Instruct", "Qwen3-VL-8B-Instruct", "Qwen2.5-Omni-7B"}


def test_runtime_stack_matches(canon):
    pub = {r["leg"]: r for r in read_table("runtime_stack").records()}
    got = stack_table(canon).set_index("leg")
    version = re.compile(r"\d+(?:\.\d+)+(?:\+\w+)?|not recorded")
    for leg, row in pub.items():
        for col in ("vllm", "torch", "CUDA", "transformers", "nvidia-cutlass-dsl"):
            # Same versions in the same order; counts are printed differently ("(6 models)" on the
            # last only in the study, on every version here).
            assert version.findall(got.loc[leg, col]) == version.findall(row[col]), (leg, col)
    assert "4.5.3 (6 models)" in got.loc["0.18", "nvidia-cutlass-dsl"]
    assert list(got["homogeneous"]) == ["no: nvidia-cutlass-dsl", "no: transformers", "yes"]


def test_repeat_series_medians_and_ratios(canon):
    """The rep235 series: three repeats per leg, medians and 26/18 as the study prints them, and
    now with an interval and a verdict."""
    pub = read_table("repeat_235b")
    assert pub.header == ["workload", "0.18 (3 reps)", "median", "0.26 (3 reps)", "median", "26/18"]
    rep = canonicalize(canon.dataset, series="rep235")
    t = tables.compare(rep, "0.18", "0.26")[0]
    assert list(t.display["workload"]) == pub.column("workload")
    for row in pub.rows:
        workload, reps18, med18, reps26, med26, r = row
        d = t.data[t.data["workload"] == workload].iloc[0]
        disp = t.display[t.display["workload"] == workload].iloc[0]
        assert (disp["0.18"], disp["0.26"], disp["26/18"]) == (med18, med26, r)
        for leg, printed in (("gpu-0.18.0", reps18), ("gpu-0.26.0", reps26)):
            got = " / ".join(tables.fmt_tok_s(v) for v in rep.samples(leg, "Qwen3-VL-235B-A22B-Instruct-FP8", workload))
            assert got == printed
        assert d["0.18 n"] == 3 and d["0.26 n"] == 3
    assert {v.split(" (")[0].split(" within")[0] for v in t.display["26/18 verdict"]} <= {"faster", "slower", "undecided",
                                                                                           "equivalent"}
