"""The diagnostic studies (harness.analyze.studies: repeat, moe_backend, falsification, dispersion; harness.experiments.launch) and
harness.publish.figures: on the transcribed B200 reference data (the study's own figures, which the functions must
reproduce) and on FAKE study folders (studygen) whose answers are known in advance."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from studygen import record_dict, write_run, write_study_yaml

from harness.analyze.studies import common, dispersion, falsification, moe_backend, repeat
from harness.experiments import launch
from harness.core.logs import log_facts, pf_mode
from harness.publish import figures
from harness.measure import guard
from harness.core import paths
from harness.analyze.dataset import load
from harness.core.errors import UserError

B200 = paths.RESULTS / "b200-reference"
LEGS2 = [("leg-old", "1.0"), ("leg-new", "2.0")]


@pytest.fixture(scope="module")
def b200():
    return load(B200)


# --- the repeat study on the published data ----------------------------------------------------------

def test_repeat_study_reproduces_the_published_repeat_table(b200):
    st = repeat.repeat_study(b200, series="rep235")
    assert (st.old, st.new, st.ratio_label) == ("gpu-0.18.0", "gpu-0.26.0", "26/18")
    t = st.table.set_index("workload")
    assert list(t.index) == ["text-only", "image", "video"]
    # The printed medians and ratios (published/repeat-235b.tsv).
    assert t.loc["image", "old_median"] == 6985 and t.loc["image", "new_median"] == 4919
    assert [f"{r:.2f}x" for r in t["ratio"]] == ["0.88x", "0.70x", "1.03x"]
    d = st.display.set_index("workload")
    assert d.loc["image", "0.18 (3 reps)"] == "7,030 / 6,985 / 6,948"
    assert d.loc["image", "0.26 (3 reps)"] == "4,862 / 4,919 / 5,049"
    assert d.loc["image", "26/18"] == "0.70x"
    # "the image gap is 42%"
    assert t.loc["image", "gap"] == pytest.approx(0.42, abs=0.001)


def test_repeat_study_weighs_the_gap_against_the_spread(b200):
    t = repeat.repeat_study(b200, series="rep235").table.set_index("workload")
    img = t.loc["image"]
    assert img["ci_high"] < 1 and img["verdict"] == "slower" and img["signal"]
    assert img["old_spread"] < 0.015                               # 0.18 image, range/median: 1.2%
    assert img["new_spread"] == pytest.approx(0.038, abs=0.0005)   # 0.26 image: 187 / 4,919
    assert img["old_mad"] < 0.015 and img["new_mad"] < 0.015       # MAD/median: 0.5% / 1.2%
    assert img["gap_over_spread"] == pytest.approx(0.42 / 0.038, rel=0.02)
    vid = t.loc["video"]
    assert vid["verdict"] == "undecided" and not vid["signal"]


def test_the_spread_claim_is_checked_under_both_measures(b200):
    st = repeat.repeat_study(b200, series="rep235")
    chk = repeat.spread_check(st, 0.015)
    over = chk[~chk["under_limit"]]
    assert set(zip(over["workload"], over["leg"], over["measure"])) == {
        ("image", "0.26", "range/median"), ("video", "0.18", "range/median"), ("video", "0.26", "range/median"),
        ("video", "0.26", "MAD/median")}
    text = repeat.spread_check_text(st, 0.015)
    assert "0.26 image (3.8%)" in text[0] and "0.26 video (1.9%)" in text[1]


def test_repeat_medians_land_near_the_main_tables_single_pass(b200):
    st = repeat.repeat_study(b200, series="rep235")
    t = st.table.set_index("workload")
    assert t.loc["image", "old_main"] == 7004 and t.loc["image", "new_main"] == 4896
    assert t[["old_vs_main", "new_vs_main"]].abs().max().max() < 0.015
    assert "0.18 image: median of repeats 6,985 vs main table 7,004 (-0.3%)" in repeat.main_table_check(st)


def test_transcribed_records_hold_no_decode_share_and_say_so(b200):
    st = repeat.repeat_study(b200, series="rep235")
    assert st.table["decode_share"].isna().all()
    assert set(st.table["decode_share_source"]) == {"not recorded"}
    lines = repeat.repeat_conclusion(st)
    assert "image: 26/18 = 0.70x [0.68, 0.74], slower" in lines[1] and "signal, not noise" in lines[1]
    assert "not distinguishable" in lines[2]
    assert "cannot be computed" in lines[-1] and "text-only 417" in lines[-1]
    assert any("transcribed" in n for n in st.notes)


# --- the repeat study on FAKE records ----------------------------------------------------------------

def _fake_repeats(root: Path, values: dict[tuple[str, str], list[float]], *, work=None, spec=None,
                  legs=LEGS2, model="m", series="rep") -> Path:
    write_study_yaml(root, legs, main_series=series)
    for (label, wl), vals in values.items():
        leg = {lb: n for n, lb in legs}[label]
        for i, v in enumerate(vals, start=1):
            rec = record_dict(leg=leg, leg_label=label, model=model, workload=wl, value=v, repeat=i, series=series,
                              study=root.name)
            if work is not None:
                rec["work"] = work[wl]
            if spec is not None:
                rec["workload_spec"] = spec[wl]
            write_run(root, rec)
    return root


def test_decode_share_comes_from_measured_tokens_and_orders_the_ratios(tmp_path):
    """FAKE: a decode-heavy workload regresses, a prefill-heavy one does not."""
    vals = {("1.0", "decode"): [100, 101, 99], ("2.0", "decode"): [70, 71, 69],
            ("1.0", "prefill"): [100, 102, 98], ("2.0", "prefill"): [99, 101, 100]}
    work = {"decode": {"num_seqs": 10, "prompt_tokens": 100, "output_tokens": 900},
            "prefill": {"num_seqs": 10, "prompt_tokens": 900, "output_tokens": 100}}
    st = repeat.repeat_study(load(_fake_repeats(tmp_path / "s", vals, work=work)), series="rep")
    t = st.table.set_index("workload")
    assert t.loc["decode", "decode_share"] == pytest.approx(0.9)
    assert t.loc["prefill", "decode_share"] == pytest.approx(0.1)
    assert set(t["decode_share_source"]) == {"measured tokens"}
    assert t.loc["decode", "signal"] and not t.loc["prefill", "signal"]
    last = repeat.repeat_conclusion(st)[-1]
    assert "falls as the workload is more decode-bound" in last and "-1.00" in last


def test_decode_share_falls_back_to_declared_lengths_and_marks_multimodal_as_an_upper_bound(tmp_path):
    vals = {("1.0", "text"): [10, 11], ("2.0", "text"): [10, 11], ("1.0", "image"): [10, 11],
            ("2.0", "image"): [10, 11]}
    work = {w: {"num_seqs": 4, "output_tokens": 40} for w in ("text", "image")}
    spec = {"text": {"kind": "throughput", "modality": "text", "input_len": 300, "output_len": 100},
            "image": {"kind": "throughput", "modality": "image", "input_len": 100, "output_len": 100}}
    t = repeat.repeat_study(load(_fake_repeats(tmp_path / "s", vals, work=work, spec=spec)),
                        series="rep").table.set_index("workload")
    assert t.loc["text", "decode_share"] == pytest.approx(0.25)
    assert t.loc["text", "decode_share_source"] == "declared lengths"
    assert t.loc["image", "decode_share"] == pytest.approx(0.5)
    assert "upper bound" in t.loc["image", "decode_share_source"]


def test_repeat_study_refuses_what_it_cannot_choose(tmp_path):
    legs3 = [("a", "1"), ("b", "2"), ("c", "3")]
    root = _fake_repeats(tmp_path / "s", {("1", "w"): [1.0, 1.1], ("2", "w"): [1.0, 1.2], ("3", "w"): [2.0, 2.1]},
                         legs=legs3)
    ds = load(root)
    with pytest.raises(UserError, match="3 legs .*name two as legs=old,new"):
        repeat.repeat_study(ds, series="rep")
    st = repeat.repeat_study(ds, series="rep", legs="a,c")
    assert st.table["ratio"].iloc[0] == pytest.approx(2.05 / 1.05)
    with pytest.raises(UserError, match="no records of series 'nope'"):
        repeat.repeat_study(ds, series="nope")
    with pytest.raises(UserError, match="no model 'x'"):
        repeat.repeat_study(ds, series="rep", model="x")
    with pytest.raises(UserError, match="no workload 'zz'"):
        repeat.repeat_study(ds, series="rep", legs=["a", "b"], workloads="zz")


def test_single_repeats_have_no_interval_and_no_gap_verdict(tmp_path):
    st = repeat.repeat_study(load(_fake_repeats(tmp_path / "s", {("1.0", "w"): [100.0], ("2.0", "w"): [50.0]})),
                         series="rep")
    r = st.table.iloc[0]
    assert r["verdict"] == "single pass" and r["ci_low"] is None and r["signal"] is None
    assert "no spread to weigh the gap against" in repeat.repeat_conclusion(st)[0]


# --- forced-backend arms ------------------------------------------------------------------------------

VLLM_LOG = """\
(EngineCore_DP0 pid=7) INFO 09-21 10:00:01 [core.py:93] Initializing a V1 LLM engine (v0.26.0) with config: enforce_eager=False, kv_cache_dtype=auto
(Worker_TP0 pid=9) INFO 09-21 10:00:30 [fp8.py:411] Using FLASHINFER_TRTLLM Fp8 MoE backend out of potential backends: ['AITER', 'FLASHINFER_TRTLLM', 'TRITON']
(Worker_TP0 pid=9) INFO 09-21 10:00:31 [fp8.py:856] Using MoEPrepareAndFinalizeNoDPEPMonolithic
[2026-09-21 10:01:02.251] [info] TRT-LLM fused MoE cooperative launch SM allocation: 140 SMs used for MoE, 8 SMs reserved for overlapping kernels (total SMs: 148)
"""


def test_log_facts_parse_vllms_moe_lines():
    f = log_facts(VLLM_LOG)
    assert f == {"prepare_finalize": "MoEPrepareAndFinalizeNoDPEPMonolithic",
                 "sm_split": "140 SMs used for MoE, 8 reserved", "moe_backend": "FLASHINFER_TRTLLM Fp8",
                 "enforce_eager": "False"}
    assert pf_mode(f["prepare_finalize"]) == "Monolithic" and pf_mode("Modular") == "Modular"
    assert log_facts("nothing about MoE here") == {}


def test_arm_table_reproduces_the_published_moe_table(b200):
    arms = moe_backend.arm_table(b200, series="moe_backend", scenario="b200-moe-backend", reference="gpu-0.18.0:auto")
    t = arms.table
    assert [f"{lg} {a}" for lg, a in zip(t["leg_label"], t["arm"])] == [
        "0.18 auto", "0.26 auto", "0.26 flashinfer_trtllm", "0.26 triton", "0.26 flashinfer_cutlass", "0.26 cutlass"]
    assert list(t["value"][:4]) == [7457, 5536, 5614, 5782]
    assert list(t["mode"][:4]) == ["Modular", "Monolithic", "Monolithic", "Modular"]
    assert list(arms.display["SM split"]) == ["none", "140 SMs", "140 SMs", "none", "—", "—"]
    assert set(t["routing_source"][:4]) == {"record manifest"}
    refused = t[t["status"] == "refused"]
    assert list(refused["arm"]) == ["flashinfer_cutlass", "cutlass"]
    assert refused["reason"].str.contains("does not support quantization scheme").all()
    assert t.loc[t["arm"] == "triton", "vs_reference"].iloc[0] == pytest.approx(5782 / 7457)


def test_arm_conclusion_says_the_reference_routing_does_not_recover_the_reference(b200):
    lines = moe_backend.arm_conclusion(moe_backend.arm_table(b200, series="moe_backend", scenario="b200-moe-backend",
                                           reference="gpu-0.18.0:auto"))
    text = "\n".join(lines)
    assert "0.26 triton: 5,782 tok/s, 0.78x of the reference (Modular, no SM split — the reference's routing)" in text
    assert "The routing alone does not explain the gap" in text
    assert "No arm on 0.26 reaches the reference: the best is triton at 0.78x" in text
    assert "Refused: 0.26 flashinfer_cutlass" in text


def test_arm_table_reads_run_log_before_the_manifest_and_compares_repeats(tmp_path):
    """FAKE records with vLLM-style logs: the log wins over the manifest keys; repeats give an interval."""
    root = tmp_path / "arms"
    write_study_yaml(root, LEGS2, main_series="arms")
    logs = {"fast": VLLM_LOG, "slow": VLLM_LOG.replace("Monolithic", "Modular").replace("140 SMs used", "").replace(
        "enforce_eager=False", "enforce_eager=True")}
    for arm, vals in (("fast", [100.0, 101.0, 99.0]), ("slow", [80.0, 81.0, 79.0])):
        for i, v in enumerate(vals, start=1):
            rec = record_dict(leg="leg-new", leg_label="2.0", model="moe", workload="image", arm=arm, value=v,
                              repeat=i, series="arms", study="arms",
                              manifest={"moe_prepare_finalize": "Nonsense", "moe_sm_split": "1 SMs"})
            write_run(root, rec, log=logs[arm])
    rec = record_dict(leg="leg-new", leg_label="2.0", model="moe", workload="image", arm="broken", series="arms",
                      status="failed", study="arms", reason="ValueError: boom")
    write_run(root, rec, log="Traceback (most recent call last):\nValueError: boom\n")
    arms = moe_backend.arm_table(load(root), series="arms", reference="leg-new:fast")
    t = arms.table.set_index("arm")
    assert t.loc["fast", "prepare_finalize"] == "MoEPrepareAndFinalizeNoDPEPMonolithic"
    assert t.loc["fast", "routing_source"] == "run.log"
    assert t.loc["slow", "mode"] == "Modular" and pd.isna(t.loc["slow", "sm_split"])
    assert t.loc["slow", "enforce_eager"] == "True"
    assert t.loc["slow", "vs_reference"] == pytest.approx(0.8) and t.loc["slow", "vs_reference_high"] < 1
    assert t.loc["broken", "status"] == "failed" and t.loc["broken", "reason"] == "ValueError: boom"
    text = "\n".join(moe_backend.arm_conclusion(arms))
    assert "Did not run: 2.0 broken (failed: ValueError: boom)" in text
    with pytest.raises(UserError, match="reference leg-new:broken has no canonical run"):
        moe_backend.arm_table(load(root), series="arms", reference="leg-new:broken")


# --- the falsification matrix -------------------------------------------------------------------------

def test_falsification_matrix_and_conclusion_on_the_published_data(b200):
    m = falsification.falsification_matrix(b200, series="cutlass_falsification", scenario="b200-cutlass-falsification")
    assert list(m.outcomes.columns) == ["whisper", "Qwen2-VL", "Qwen3-VL-8B", "Omni"]
    assert list(m.outcomes.index) == ["baseline", "enforce-eager", "triton-attn", "gpu-mem-0.5", "cutlass-dsl-4.5.3",
                                      "control-0.26"]
    assert (m.rc.loc["baseline"] == 1).all() and (m.rc.loc["cutlass-dsl-4.5.3"] == 0).all()
    assert m.rows.at["cutlass-dsl-4.5.3", "change"] == "pin nvidia-cutlass-dsl==4.5.3"
    assert m.rows.at["control-0.26", "change"] == "leg gpu-0.26.0 instead of gpu-0.18.0"
    c = falsification.single_variable_conclusion(m)
    assert c.flips_every == ("cutlass-dsl-4.5.3",)
    assert c.controls == ("control-0.26",)
    assert c.flips_none == ("enforce-eager", "triton-attn", "gpu-mem-0.5")
    assert c.text.startswith("Only `cutlass-dsl-4.5.3` flips every outcome: 4 of 4 model(s) fail")
    assert "transcribed" in c.text


def _matrix_study(root: Path, outcomes: dict[str, dict[str, bool]], arm_specs: dict[str, dict]) -> Path:
    write_study_yaml(root, LEGS2, main_series="f")
    for arm, by_model in outcomes.items():
        for model, ok in by_model.items():
            rec = record_dict(leg="leg-old", leg_label="1.0", model=model, workload="w", arm=arm, series="f",
                              study=root.name, status="ok" if ok else "failed", arm_spec=arm_specs.get(arm, {}))
            write_run(root, rec)
    return root


def test_conclusion_when_two_single_changes_both_flip_everything(tmp_path):
    """FAKE: two arms each flip both models: the matrix does not single out one change."""
    outcomes = {"baseline": {"a": False, "b": False}, "x": {"a": True, "b": True}, "y": {"a": True, "b": True},
                "z": {"a": True, "b": False}}
    specs = {"x": {"engine_args": {"enforce_eager": True}}, "y": {"env": {"K": "1"}},
             "z": {"pins": ["p==1"]}}
    c = falsification.single_variable_conclusion(falsification.falsification_matrix(load(_matrix_study(tmp_path / "s", outcomes, specs)),
                                                             series="f"))
    assert c.flips_every == ("x", "y") and c.flips_some == ("z",)
    assert "does not single out one change" in c.text and "`x` (`--enforce-eager`)" in c.text
    assert "`y` (`K=1`)" in c.text and "`z` (pin `p==1`)" in c.text


def test_a_row_missing_a_model_cannot_flip_every_outcome(tmp_path):
    outcomes = {"baseline": {"a": False, "b": False}, "x": {"a": True}}
    m = falsification.falsification_matrix(load(_matrix_study(tmp_path / "s", outcomes, {})), series="f")
    c = falsification.single_variable_conclusion(m)
    assert c.flips_every == () and c.incomplete == ("x",) and c.flips_some == ("x",)
    assert m.outcomes.at["x", "b"] == "—" and np.isnan(m.rc.at["x", "b"])


def test_falsification_needs_its_baseline(tmp_path):
    root = _matrix_study(tmp_path / "s", {"x": {"a": True}}, {})
    with pytest.raises(UserError, match="no baseline arm 'baseline'"):
        falsification.falsification_matrix(load(root), series="f")


# --- dispersion across a study ------------------------------------------------------------------------

def test_dispersion_frames_on_the_published_data(b200):
    canons = dispersion.canonical_all(b200)
    assert [c.series for c in canons] == ["main", "rep235"]
    disp = dispersion.dispersion_frame(canons)
    assert int((disp["n"] > 1).sum()) == 6 and set(disp.loc[disp["n"] > 1, "series"]) == {"rep235"}
    ratios = dispersion.ratio_frame(canons)
    with_ci = ratios[ratios["low"].notna()]
    assert list(with_ci["workload"]) == ["text-only", "image", "video"]
    assert (ratios.loc[ratios["series"] == "main", "verdict"] == "single pass").all()
    first = ratios.iloc[0]
    assert (first["model"], first["workload"], first["pair"]) == ("Llama-3.1-8B-Instruct", "mixed", "26/18")
    s = dispersion.samples_frame(canons)
    rep = s[s["series"] == "rep235"]
    assert len(rep) == 18 and rep["rel_dev"].abs().max() == pytest.approx(50 / 1410)  # 0.18 video 1,460
    cov = dispersion.coverage_frame(b200)
    assert cov.at["GLM-5.2-NVFP4", "0.18"] == "failed" and cov.at["gemma-4-26B-A4B-it", "0.18"] == "failed"
    assert (cov["0.29"] == "ok").all()


def test_ratio_frame_all_pairs(b200):
    r = dispersion.ratio_frame(dispersion.canonical_all(b200, series="main"), pairs="all")
    assert set(r["pair"]) == {"26/18", "29/26", "29/18"}
    llama = r[(r["model"] == "Llama-3.1-8B-Instruct") & (r["workload"] == "mixed") & (r["pair"] == "29/18")]
    assert llama["ratio"].iloc[0] == pytest.approx(22157 / 21943)


# --- measuring ----------------------------------------------------------------------------------------

SCENARIO = """\
name: tiny-diag
legs: [cpu-0.32.0]
repeats: 2
models:
  - {name: tiny, path: tiny, engine_args: {fake_tok_s: 500}}
workloads:
  - {name: w, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}
"""


def test_measure_runs_the_sweep_into_the_study_folder(tmp_path, fake_sweep):
    """FAKE bench and leg env: measure() goes through harness.measure.sweep and the records land where asked."""
    sc = tmp_path / "tiny-diag.yaml"
    sc.write_text(SCENARIO)
    res = launch.measure(scenario=str(sc), results_dir=tmp_path / "res" / "diag", repeats=2)
    assert res.measured == 2 and res.study_dir == tmp_path / "res" / "diag"
    ds = load(tmp_path / "res" / "diag")
    assert sorted(ds.records["repeat"]) == [1, 2] and set(ds.records["throughput_tok_s"]) == {500.0}
    assert "2 runs (2 measured, 0 reused, 0 not ok)" in launch.measured_summary(res)


def test_measure_waits_for_the_node_lock_then_gives_up(tmp_path, fake_sweep):
    sc = tmp_path / "tiny-diag.yaml"
    sc.write_text(SCENARIO)
    with guard.node_lock():
        t0 = time.monotonic()
        with pytest.raises(UserError, match="another sweep is measuring"):
            launch.measure(scenario=str(sc), results_dir=tmp_path / "r" / "d", lock_wait_s=0.3, poll_s=0.1)
        assert time.monotonic() - t0 >= 0.3


def test_measure_proceeds_once_the_lock_is_released(tmp_path, fake_sweep):
    sc = tmp_path / "tiny-diag.yaml"
    sc.write_text(SCENARIO)
    held = threading.Event()
    release = threading.Event()

    def holder():
        with guard.node_lock():
            held.set()
            release.wait(5)

    th = threading.Thread(target=holder)
    th.start()
    held.wait(5)
    threading.Timer(0.3, release.set).start()
    res = launch.measure(scenario=str(sc), results_dir=tmp_path / "r" / "d", repeats=1, lock_wait_s=10, poll_s=0.1)
    th.join()
    assert res.measured == 1


def test_measure_keeps_a_notebooks_forced_colour_out_of_the_runs(tmp_path, monkeypatch):
    """A kernel sets FORCE_COLOR; the runs must not see it (vLLM would colour run.log), and it is back
    afterwards. The sweep itself is replaced by a FAKE that records the environment it ran under."""
    import harness.measure.sweep as sweepmod

    seen = {}
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("CLICOLOR_FORCE", "1")
    monkeypatch.setattr(sweepmod, "sweep", lambda args: seen.update(
        force=os.environ.get("FORCE_COLOR"), clicolor=os.environ.get("CLICOLOR_FORCE"), study=args.study))
    launch.measure(scenario="cpu-tiny", results_dir=tmp_path / "x")
    assert seen == {"force": None, "clicolor": None, "study": "x"}
    assert os.environ["FORCE_COLOR"] == "1" and os.environ["CLICOLOR_FORCE"] == "1"


# --- figures ------------------------------------------------------------------------------------------

def _texts(fig: Figure) -> str:
    out = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()] + [t.get_text() for t in ax.texts]
    return "\n".join(out)


def test_every_figure_is_a_labelled_figure_and_says_transcribed(b200):
    st = repeat.repeat_study(b200, series="rep235")
    arms = moe_backend.arm_table(b200, series="moe_backend", scenario="b200-moe-backend", reference="gpu-0.18.0:auto")
    m = falsification.falsification_matrix(b200, series="cutlass_falsification", scenario="b200-cutlass-falsification")
    canons = dispersion.canonical_all(b200)
    figs = {
        "repeat": figures.repeat_strip(st.samples),
        "arms": figures.arm_bars(arms.table),
        "matrix": figures.falsification_heatmap(m.passed, m.outcomes, provenance=m.provenance),
        "ratios": figures.ratio_dots(dispersion.ratio_frame(canons)),
        "dispersion": figures.dispersion_strip(dispersion.samples_frame(canons)),
        "coverage": figures.coverage_heatmap(dispersion.coverage_frame(b200), provenance=b200.records["provenance"]),
    }
    for name, fig in figs.items():
        assert isinstance(fig, Figure), name
        text = _texts(fig)
        assert "Transcribed from the published study" in text, name
        assert any(ax.get_xlabel() or ax.get_ylabel() for ax in fig.axes), name
    assert "refused" in _texts(figs["arms"])
    assert "ratio (throughput; > 1.0x: newer leg faster)" in _texts(figs["ratios"])


def test_ratio_vs_decode_places_measured_shares_and_explains_missing_ones(tmp_path, b200):
    fig = figures.ratio_vs_decode(repeat.repeat_study(b200, series="rep235").table)
    assert "Decode share not recorded" in _texts(fig)
    vals = {("1.0", "d"): [100, 101], ("2.0", "d"): [70, 71], ("1.0", "p"): [100, 102], ("2.0", "p"): [99, 101]}
    work = {"d": {"num_seqs": 1, "prompt_tokens": 1, "output_tokens": 9},
            "p": {"num_seqs": 1, "prompt_tokens": 9, "output_tokens": 1}}
    st = repeat.repeat_study(load(_fake_repeats(tmp_path / "s", vals, work=work)), series="rep")
    fig = figures.ratio_vs_decode(st.table, pair=st.ratio_label)
    ax = fig.axes[0]
    assert "decode share" in ax.get_xlabel() and "2.0/1.0" in ax.get_ylabel()
    assert {t.get_text() for t in ax.texts} == {"d", "p"}


def test_figures_of_nothing_say_why(tmp_path):
    empty_ratios = pd.DataFrame(columns=["model", "workload", "kind", "pair", "ratio", "low", "high", "verdict",
                                         "provenance"])
    assert "No ratio" in _texts(figures.ratio_dots(empty_ratios))
    one = pd.DataFrame([{"series": "s", "model": "m", "workload": "w", "leg_label": "1", "value": 1.0,
                         "rel_dev": 0.0, "provenance": "measured"}])
    assert "No cell has more than one repeat" in _texts(figures.dispersion_strip(one))


def test_figures_stay_out_of_pyplots_figure_manager(b200):
    """Plain Figure objects: a notebook shows each once, and nothing piles up in pyplot's global state."""
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    figures.ratio_dots(dispersion.ratio_frame(dispersion.canonical_all(b200, series="rep235")))
    figures.repeat_strip(repeat.repeat_study(b200, series="rep235").samples)
    assert plt.get_fignums() == before


def test_names_accepts_what_papermill_passes():
    assert common.names("a, b,,c") == ("a", "b", "c") and common.names(["a"]) == ("a",) and common.names(None) == ()
    assert common.names("") == ()


def test_study_path_resolves_from_the_project_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert common.study_path("results/b200-reference") == B200
    assert common.study_path(tmp_path) == tmp_path


def test_reference_records_are_untouched_by_the_analysis(b200):
    """The diagnostics only read: every B200 record still parses to the same JSON after a full pass."""
    before = {p: p.read_bytes() for p in B200.glob("runs/**/results.json")}
    moe_backend.arm_table(b200, series="moe_backend")
    falsification.falsification_matrix(b200, series="cutlass_falsification")
    assert all(p.read_bytes() == b for p, b in before.items())
    assert all(json.loads(b)["provenance"] == "transcribed" for b in before.values())


def test_the_diagnostics_face_re_exports_the_study_modules_objects():
    """harness.analyze.studies.diagnostics is only a face: each public name is the study module's own object."""
    from harness.analyze.studies import diagnostics

    assert diagnostics.repeat_study is repeat.repeat_study and diagnostics.arm_table is moe_backend.arm_table
    assert diagnostics.falsification_matrix is falsification.falsification_matrix
    assert diagnostics.ratio_frame is dispersion.ratio_frame
    assert diagnostics.log_facts is log_facts and all(hasattr(diagnostics, n) for n in diagnostics.__all__)
