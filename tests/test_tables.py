"""Tables, comparisons, the manifest and the export, generated from FAKE study folders (studygen).

Repeats here are synthetic values chosen so that the bootstrap verdict is known in advance."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from harness.analyze import tables
from harness.analyze.canonical import canonicalize
from harness.analyze.dataset import load
from harness.core.errors import UserError
from harness.analyze.export import DICTIONARY, canonical_frame, export
from harness.analyze.manifest import manifest_md, stack_table
from harness.analyze.stats import Ratio
from harness.analyze.tables import fmt_ms, fmt_ratio, fmt_tok_s, short_labels
from studygen import LEGS, record_dict, simple_study, write_run

ALL3 = {("0.18", "Llama", "mixed"): [21943.0], ("0.26", "Llama", "mixed"): [22263.0],
        ("0.29", "Llama", "mixed"): [22157.0],
        ("0.18", "Llama", "single-request"): [3.82], ("0.26", "Llama", "single-request"): [3.73],
        ("0.29", "Llama", "single-request"): [3.83],
        ("0.18", "GLM", "mixed"): None, ("0.26", "GLM", "mixed"): [4306.0], ("0.29", "GLM", "mixed"): [10617.0]}


def _canon(tmp_path, values=ALL3, **kw):
    return canonicalize(load(simple_study(tmp_path / "s", values, **kw)))


@pytest.mark.parametrize("v, s", [(21943.0, "21,943"), (300.4, "300"), (299.5, "300"), (1234567.8, "1,234,568"),
                                  (None, "—"), (float("nan"), "—")])
def test_tok_s_format(v, s):
    assert fmt_tok_s(v) == s


@pytest.mark.parametrize("v, s", [(3.82, "3.82"), (0.18, "0.18"), (12.3, "12.30"), (None, "—")])
def test_ms_format(v, s):
    assert fmt_ms(v) == s


def test_ratio_format():
    assert fmt_ratio(Ratio(value=1.0139)) == "1.01x" and fmt_ratio(Ratio(value=None)) == "—"
    assert fmt_ratio(Ratio(value=3.3111)) == "3.31x"


def test_short_labels():
    assert short_labels(["0.18", "0.26", "0.29"]) == {"0.18": "18", "0.26": "26", "0.29": "29"}
    assert short_labels(["0.27", "0.32"]) == {"0.27": "27", "0.32": "32"}
    assert short_labels(["old", "new"]) == {"old": "old", "new": "new"}


def test_throughput_table_prints_like_the_study(tmp_path):
    t = tables.throughput(_canon(tmp_path))
    assert list(t.display.columns) == ["model", "tp", "workload", "0.18", "0.26", "0.29", "26/18", "29/26"]
    rows = {r[0]: list(r) for r in t.display.itertuples(index=False)}
    assert rows["`Llama`"] == ["`Llama`", "1", "mixed", "21,943", "22,263", "22,157", "1.01x", "1.00x"]
    assert rows["`GLM`"] == ["`GLM`", "1", "mixed", "—", "4,306", "10,617", "—", "2.47x"]
    assert any("single pass" in n for n in t.notes)
    assert t.data.loc[t.data["model"] == "Llama", "26/18"].iloc[0] == pytest.approx(22263 / 21943)
    md = t.markdown()
    assert "| `Llama` | 1 | mixed | 21,943 | 22,263 | 22,157 | 1.01x | 1.00x |" in md


def test_latency_ratios_are_old_over_new(tmp_path):
    t = tables.latency(_canon(tmp_path))
    assert list(t.display.columns) == ["model", "tp", "workload", "0.18", "0.26", "0.29", "18→26", "26→29"]
    assert list(t.display.iloc[0]) == ["`Llama`", "1", "single-request", "3.82", "3.73", "3.83", "1.02x", "0.97x"]


def test_row_order_from_study_yaml(tmp_path):
    c = _canon(tmp_path, model_order=["Llama", "GLM"])
    assert list(tables.throughput(c).data["model"]) == ["Llama", "GLM"]


def test_row_order_from_the_sweeps_then_alphabetical(tmp_path):
    d = simple_study(tmp_path / "s", {(lb, m, w): [1.0] for lb in ("0.18", "0.26") for m in ("b", "a", "c")
                                      for w in ("zz", "aa")})
    assert [tuple(r) for r in tables.throughput(canonicalize(load(d))).data[["model", "workload"]].values] == \
        [("a", "aa"), ("a", "zz"), ("b", "aa"), ("b", "zz"), ("c", "aa"), ("c", "zz")]
    (d / "sweeps").mkdir()
    runs = [{"run_id": f"main/gpu-0.18.0/{m}/{w}/default/r1", "reused": False} for m in ("c", "a") for w in ("zz", "aa")]
    (d / "sweeps" / "20260101T000000-aaaaaa.json").write_text(json.dumps({"invocation_id": "x", "runs": runs}))
    got = [tuple(r) for r in tables.throughput(canonicalize(load(d))).data[["model", "workload"]].values]
    assert got == [("c", "zz"), ("c", "aa"), ("a", "zz"), ("a", "aa"), ("b", "aa"), ("b", "zz")]


def test_repeats_give_an_interval_and_a_verdict(tmp_path):
    # FAKE repeats: 0.18 -> 0.26 clearly faster; 0.26 -> 0.29 overlapping; `one` has single passes.
    vals = {("0.18", "m", "mixed"): [100.0, 101.0, 99.0, 100.5, 99.5],
            ("0.26", "m", "mixed"): [150.0, 151.0, 149.0, 150.5, 149.5],
            ("0.29", "m", "mixed"): [149.0, 152.0, 150.0, 148.0, 151.0],
            ("0.18", "one", "mixed"): [10.0], ("0.26", "one", "mixed"): [11.0], ("0.29", "one", "mixed"): [12.0],
            ("0.18", "m", "single-request"): [5.0, 5.1, 4.9], ("0.26", "m", "single-request"): [6.0, 6.1, 5.9]}
    c = _canon(tmp_path, vals)
    t = tables.throughput(c)
    assert list(t.display.columns)[-6:] == ["26/18 95% CI", "26/18 units", "26/18 verdict",
                                            "29/26 95% CI", "29/26 units", "29/26 verdict"]
    m = t.display[t.display["model"] == "`m`"].iloc[0]
    assert m["26/18"] == "1.50x" and m["26/18 verdict"] == "faster"
    lo, hi = (float(x) for x in m["26/18 95% CI"].strip("[]").split(", "))
    assert lo > 1 and lo <= 1.50 <= hi
    # FAKE device ("8x FAKE-GPU"): the GPU default margin, ±2%; five repeats agreeing to ~1% fit inside it.
    assert m["29/26 verdict"] == "equivalent within ±2%"
    assert any("equivalent within ±2%" in n and "Benjamini" in n for n in t.notes)
    one = t.display[t.display["model"] == "`one`"].iloc[0]
    assert one["26/18 verdict"] == "single pass" and one["26/18 95% CI"] == ""
    assert t.data.loc[t.data["model"] == "m", "0.18 n"].iloc[0] == 5
    lat = tables.latency(c).display.iloc[0]
    assert lat["18→26 verdict"] == "slower" and lat["18→26"] == "0.83x"


def test_compare_any_pair(tmp_path):
    c = _canon(tmp_path)
    tp, lt, *_ = tables.compare(c, "0.18", "gpu-0.29.0")  # one table per kind; the first two have rows here
    assert list(tp.display.columns) == ["model", "tp", "workload", "0.18", "0.29", "29/18"]
    assert tp.display[tp.display["model"] == "`Llama`"]["29/18"].iloc[0] == "1.01x"
    assert list(lt.display.columns)[-1] == "18→29"
    with pytest.raises(UserError, match="no leg 'nope'"):
        tables.compare(c, "0.18", "nope")


def test_coverage_names_failing_models(tmp_path):
    t = tables.coverage(_canon(tmp_path))
    assert t.display.to_dict("records") == [
        {"leg": "gpu-0.18.0", "passing": "1/2", "failing": "`GLM`"},
        {"leg": "gpu-0.26.0", "passing": "2/2", "failing": "—"},
        {"leg": "gpu-0.29.0", "passing": "2/2", "failing": "—"}]


def test_coverage_separates_excluded_from_failing(tmp_path):
    d = simple_study(tmp_path / "s", {("0.26", "m", "mixed"): [1.0]})
    write_run(d, record_dict(leg="gpu-0.18.0", model="m", allow_dirty=True))
    t = tables.coverage(canonicalize(load(d)))
    assert t.display.iloc[0]["failing"] == "—" and t.display.iloc[0]["not canonical for other reasons"] == "`m`"


def test_write_tables_writes_every_table_and_pair(tmp_path):
    c = _canon(tmp_path)
    out = tmp_path / "out"
    written = tables.write_tables(c, out)
    names = sorted(str(p.relative_to(out)) for p in written)
    for t in ("coverage", "throughput", "latency"):
        assert {f"tables/{t}.md", f"tables/{t}.csv", f"tables/{t}.parquet"} <= set(names)
    for a, b in (("gpu-0.18.0", "gpu-0.26.0"), ("gpu-0.18.0", "gpu-0.29.0"), ("gpu-0.26.0", "gpu-0.29.0")):
        assert {f"compare/{a}_vs_{b}.md", f"compare/{a}_vs_{b}.csv"} <= set(names)
    assert pd.read_parquet(out / "tables" / "throughput.parquet")["0.26"].tolist() == [4306.0, 22263.0]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no scratch left behind
    md = (out / "compare" / "gpu-0.18.0_vs_gpu-0.26.0.md").read_text()
    # Kinds this study never measured (serving, greedy decode) get no empty table.
    assert "### Throughput" in md and "Serving" not in md and "Greedy" not in md


def test_manifest_lists_every_version_and_flags_mixed_legs(tmp_path):
    d = simple_study(tmp_path / "s", {(lb, m, "mixed"): [1.0] for lb in ("0.18", "0.26") for m in "abc"},
                     model_order=["a", "b", "c"])
    for m in "bc":
        rec = record_dict(leg="gpu-0.18.0", model=m, repeat=1, value=1.0, pins=["nvidia-cutlass-dsl==4.5.3"],
                          manifest={"nvidia_cutlass_dsl": "4.5.3"})
        write_run(d, rec)
    rec = record_dict(leg="gpu-0.18.0", model="a", manifest={"nvidia_cutlass_dsl": "4.8.0"})
    write_run(d, rec)
    c = canonicalize(load(d))
    st = stack_table(c).set_index("leg")
    assert st.loc["0.18", "nvidia-cutlass-dsl"] == "4.8.0 (1 model: `a`) → 4.5.3 (2 models)"
    assert st.loc["0.18", "homogeneous"] == "no: nvidia-cutlass-dsl"
    assert st.loc["0.26", "nvidia-cutlass-dsl"] == "not recorded" and st.loc["0.26", "homogeneous"] == "yes"
    assert st.loc["0.26", "vllm"] == "0.26.0" and st.loc["0.18", "CUDA"] == "12.8"
    md = manifest_md(c)
    assert "nvidia-cutlass-dsl 4.5.3 (pinned): `b`, `c`" in md and "## Non-homogeneous legs" in md


def test_export_writes_parquet_csv_and_a_dictionary_of_every_column(tmp_path):
    c = _canon(tmp_path)
    written = export(c, tmp_path / "x")
    assert sorted(p.name for p in written) == ["DATA_DICTIONARY.md", "canonical.csv", "canonical.parquet",
                                                "verdicts.csv", "verdicts.parquet"]
    pq = pd.read_parquet(tmp_path / "x" / "canonical.parquet")
    csv = pd.read_csv(tmp_path / "x" / "canonical.csv")
    assert list(pq.columns) == list(DICTIONARY) == list(csv.columns) == list(canonical_frame(c).columns)
    assert len(pq) == 8 and list(pq.loc[0, "samples"]) == [4306.0]    # alphabetical: `GLM` first
    assert csv.loc[0, "run_dirs"] == "runs/main/gpu-0.26.0/GLM/mixed/default/r1"
    text = (tmp_path / "x" / "DATA_DICTIONARY.md").read_text()
    for col in DICTIONARY:
        assert f"| `{col}` |" in text


def test_cli_tables_writes_everything(tmp_path):
    d = simple_study(tmp_path / "s", ALL3)
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "harness", "tables", str(d), "--out", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    for f in ("CANONICAL.md", "MANIFEST.md", "tables/throughput.md", "tables/failures.md",
              "compare/gpu-0.18.0_vs_gpu-0.29.0.md", "export/canonical.parquet", "export/DATA_DICTIONARY.md"):
        assert (out / f).is_file(), f
    assert "9 records, 8 canonical cells, 1 runs excluded" in p.stdout


def test_cli_tables_writes_the_export_and_a_bad_folder_is_one_line(tmp_path):
    d = simple_study(tmp_path / "s", ALL3)
    p = subprocess.run([sys.executable, "-m", "harness", "tables", str(d)], capture_output=True, text=True)
    assert p.returncode == 0 and (d / "derived" / "export" / "canonical.csv").is_file()
    p = subprocess.run([sys.executable, "-m", "harness", "tables", str(tmp_path / "nope")],
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "no such study folder" in p.stderr


def test_mixed_runs_refusal_reaches_the_cli_as_one_line(tmp_path):
    d = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [1.0]}, legs=LEGS)
    write_run(d, record_dict(leg="gpu-0.18.0", model="m", repeat=2, compat_id="other"))
    p = subprocess.run([sys.executable, "-m", "harness", "tables", str(d), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "refusing to merge" in p.stderr and p.stderr.count("\n") == 1
    assert not (tmp_path / "o" / "CANONICAL.md").exists()
