"""The canonical rule: which runs make the tables, which are excluded and why, and the refusal to
merge repeats measured on different machines or stacks. Study folders are FAKE (studygen)."""

from __future__ import annotations

import json

import pytest

from harness.analyze.canonical import canonical_md, canonicalize
from harness.analyze.dataset import load
from harness.core.errors import MixedRunsError, UserError
from studygen import LEGS, record_dict, simple_study, write_run


def _cell(canon, leg, model="m", workload="mixed"):
    c = canon.cells
    hit = c[(c["leg"] == leg) & (c["model"] == model) & (c["workload"] == workload)]
    return hit.iloc[0] if len(hit) else None


def _reasons(canon):
    return {(r.leg, r.model, r.workload, r.repeat): r.reason for r in canon.exclusions.itertuples()}


def test_repeats_are_aggregated_by_median_and_the_samples_kept(tmp_path):
    d = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [10.0, 30.0, 11.0],
                                      ("0.26", "m", "single-request"): [2.0, 4.0]})
    canon = canonicalize(load(d))
    c = _cell(canon, "gpu-0.18.0")
    assert c["value"] == 11.0 and c["samples"] == (10.0, 30.0, 11.0) and c["n"] == 3
    assert c["metric"] == "throughput_tok_s" and c["unit"] == "tok/s"
    lat = _cell(canon, "gpu-0.26.0", workload="single-request")
    assert lat["value"] == 3.0 and lat["metric"] == "ms_per_token"
    assert len(lat["run_dirs"]) == 2


def test_only_the_main_series_and_default_arm_are_canonical(tmp_path):
    d = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [10.0]})
    write_run(d, record_dict(leg="gpu-0.18.0", model="m", series="rep", value=99.0, repeat=2))
    write_run(d, record_dict(leg="gpu-0.18.0", model="m", arm="eager", value=77.0))
    canon = canonicalize(load(d))
    assert _cell(canon, "gpu-0.18.0")["samples"] == (10.0,)
    assert canon.exclusions.empty
    rep = canonicalize(load(d), series="rep")
    assert _cell(rep, "gpu-0.18.0")["samples"] == (99.0,)


def test_exclusions_are_listed_with_their_reasons(tmp_path):
    d = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [10.0], ("0.26", "m", "mixed"): [20.0]})
    write_run(d, record_dict(leg="gpu-0.29.0", leg_label="0.29", model="m", status="failed",
                             reason="AttributeError: boom"))
    write_run(d, record_dict(leg="gpu-0.18.0", model="m", repeat=2, value=11.0, allow_dirty=True,
                             dirty=["GPU already has processes: 1234"]))
    write_run(d, record_dict(leg="gpu-0.26.0", leg_label="0.26", model="m", repeat=2, value=21.0))
    (d / "sweeps").mkdir()
    (d / "sweeps" / "20260101T000000-aaaaaa.json").write_text(json.dumps({
        "invocation_id": "20260101T000000-aaaaaa",
        "runs": [{"run_id": "main/gpu-0.26.0/m/mixed/default/r2", "reused": True}]}))
    canon = canonicalize(load(d))
    why = _reasons(canon)
    assert why[("gpu-0.29.0", "m", "mixed", 1)] == "status failed: AttributeError: boom"
    assert why[("gpu-0.18.0", "m", "mixed", 2)].startswith("measured under --allow-dirty (GPU already has")
    assert why[("gpu-0.26.0", "m", "mixed", 2)].startswith("reused by --resume in sweep 20260101T000000-aaaaaa")
    assert len(why) == 3
    assert _cell(canon, "gpu-0.18.0")["samples"] == (10.0,)
    assert _cell(canon, "gpu-0.29.0") is None
    # allow_reused lets the reused run in, and says so in the rule.
    allowed = canonicalize(load(d), allow_reused=True)
    assert _cell(allowed, "gpu-0.26.0")["samples"] == (20.0, 21.0) and bool(_cell(allowed, "gpu-0.26.0")["reused"])
    assert "allow_reused=True" in allowed.rule


def test_work_that_differs_from_the_majority_is_excluded(tmp_path):
    d = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [10.0], ("0.26", "m", "mixed"): [20.0]})
    write_run(d, record_dict(leg="gpu-0.29.0", leg_label="0.29", model="m", value=30.0,
                             work={"num_seqs": 100, "output_tokens": 40000}))
    why = _reasons(canonicalize(load(d)))
    assert list(why) == [("gpu-0.29.0", "m", "mixed", 1)]
    assert "different work: output_tokens 40,000, the other runs 51,200" in why[("gpu-0.29.0", "m", "mixed", 1)]


def test_work_that_differs_without_a_majority_excludes_every_run(tmp_path):
    d = tmp_path / "s"
    simple_study(d, {("0.18", "m", "mixed"): [10.0]})
    write_run(d, record_dict(leg="gpu-0.26.0", leg_label="0.26", model="m", value=20.0, work={"num_seqs": 90}))
    canon = canonicalize(load(d))
    assert canon.cells.empty
    assert all("no majority" in r for r in _reasons(canon).values()) and len(_reasons(canon)) == 2


def test_capacity_searches_are_compared_whatever_their_request_counts(tmp_path):
    # Two legs' searches took different paths (different probes, so different request counts and
    # hashes): their same work is the declaration, and neither is excluded. A grid workload beside
    # them whose counts differ is still excluded.
    d = tmp_path / "s"
    spec = {"kind": "throughput", "capacity": {"axis": "request_rate"}}
    for leg, label, n, sha in (("gpu-0.18.0", "0.18", 340, "a"), ("gpu-0.26.0", "0.26", 1217, "b")):
        write_run(d, record_dict(leg=leg, leg_label=label, workload="cap", value=10.0, workload_spec=spec,
                                 work={"num_seqs": n, "output_tokens": n * 64, "prompts_sha256": sha}))
    for leg, label, n in (("gpu-0.18.0", "0.18", 100), ("gpu-0.26.0", "0.26", 90)):
        write_run(d, record_dict(leg=leg, leg_label=label, value=10.0, work={"num_seqs": n}))
    canon = canonicalize(load(d))
    assert set(canon.cells["workload"]) == {"cap"} and len(canon.cells) == 2
    assert len(_reasons(canon)) == 2 and all("no majority" in r for r in _reasons(canon).values())


def test_work_not_recorded_is_not_compared(tmp_path):
    d = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [10.0]})
    write_run(d, record_dict(leg="gpu-0.26.0", leg_label="0.26", model="m", value=20.0, work={}))
    assert len(canonicalize(load(d)).cells) == 2


@pytest.mark.parametrize("key, change", [
    ("device", {"manifest": {"device": "8x OTHER-GPU", "host": "node-a"}}),
    ("host", {"manifest": {"device": "8x FAKE-GPU", "host": "node-b"}}),
    ("compat_id", {"compat_id": "cid-other"}),
])
def test_repeats_measured_on_different_machines_or_stacks_are_refused(tmp_path, key, change):
    d = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [10.0]})
    rec = record_dict(leg="gpu-0.18.0", model="m", repeat=2, value=11.0)
    if "manifest" in change:
        rec["manifest"] |= change["manifest"]
        rec["node"] = rec["manifest"]["host"]
    else:
        rec |= change
    write_run(d, rec)
    with pytest.raises(MixedRunsError, match=f"gpu-0.18.0 / m / mixed.*different {key}") as e:
        canonicalize(load(d))
    assert isinstance(e.value, UserError) and "\n" not in str(e.value)


def test_repeats_on_two_lent_machines_of_one_card_model_are_refused_unless_declared(tmp_path):
    # Every lent machine reports the same host name and card model; only the GPUs' uuids tell two apart,
    # and two such H100 machines differed by 25-40% at one load (results/h100-capacity-clients).
    from harness.publish import report
    from harness.publish.sections.limitations import limitations

    def study(d, **extra):
        simple_study(d, {}, **extra)
        for i, uuid in ((1, "GPU-aaaa"), (2, "GPU-bbbb")):
            rec = record_dict(leg="gpu-0.18.0", model="m", repeat=i, value=10.0 + i,
                              manifest={"host": "vm", "nvidia_smi": {"gpus": [{"uuid": uuid}]}})
            write_run(d, rec)
        return d

    with pytest.raises(MixedRunsError, match=r"different machine \(GPU-aaaa vs GPU-bbbb\).*allow_mixed_machines"):
        canonicalize(load(study(tmp_path / "s")))
    d = study(tmp_path / "t", allow_mixed_machines=True)
    (cell,) = canonicalize(load(d)).cells.itertuples()
    assert cell.n == 2 and cell.machines == 2
    (line,) = [x for x in limitations(report.load_study(d)) if x.startswith("**Figures that span machines.**")]
    assert "1 canonical figure merges repeats measured on different machines" in line and "mixed on 0.18 (2)" in line
    with pytest.raises(UserError, match="allow_mixed_machines"):
        load(study(tmp_path / "u", allow_mixed_machines="yes"))


def test_paired_blocks_on_two_machines_are_two_blocks_not_a_refused_merge(tmp_path):
    # The paired design compares legs within an engine block, each block on one machine; the page still
    # names the figure as spanning machines.
    from harness.publish import report
    from harness.publish.sections.limitations import limitations
    d = simple_study(tmp_path / "p", {})
    for i, uuid in ((1, "GPU-aaaa"), (2, "GPU-bbbb")):
        write_run(d, record_dict(leg="gpu-0.18.0", model="m", repeat=i, value=10.0 + i,
                                 manifest={"host": "vm", "nvidia_smi": {"gpus": [{"uuid": uuid}]}},
                                 paired={"block": i, "blocks": 2, "pairs": 1}))
    (cell,) = canonicalize(load(d)).cells.itertuples()
    assert cell.machines == 2
    (line,) = [x for x in limitations(report.load_study(d)) if x.startswith("**Figures that span machines.**")]
    assert "paired engine blocks, each on one machine" in line


def test_different_machines_across_legs_are_not_a_merge(tmp_path):
    # Only repeats of one (leg, model, workload) are merged; legs are compared, not merged.
    d = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [10.0]})
    rec = record_dict(leg="gpu-0.26.0", leg_label="0.26", model="m", value=20.0)
    rec["manifest"] |= {"host": "node-b"}
    write_run(d, rec)
    assert len(canonicalize(load(d)).cells) == 2


def test_canonical_md_states_the_rule_the_runs_and_the_exclusions(tmp_path):
    d = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [10.0, 12.0], ("0.26", "m", "mixed"): None})
    bad = d / "runs" / "main" / "gpu-0.29.0" / "m" / "mixed" / "default" / "r1"
    bad.mkdir(parents=True)
    (bad / "results.json").write_text("{")
    text = canonical_md(canonicalize(load(d)))
    assert "## Rule" in text and "median of every repeat" in text
    assert "| 0.18 | `m` | mixed | 11 tok/s | 2 | measured |" in text
    assert "status failed: RuntimeError: boom" in text
    assert "`runs/main/gpu-0.29.0/m/mixed/default/r1/results.json`: truncated JSON" in text
    assert str(tmp_path) not in text


def test_transcribed_figures_are_labelled(tmp_path):
    d = tmp_path / "s"
    simple_study(d, {})
    write_run(d, record_dict(leg="gpu-0.18.0", model="m", provenance="transcribed",
                             source={"document": "Some report", "table": "Throughput"}))
    text = canonical_md(canonicalize(load(d)))
    assert "All figures are transcribed from Some report, not measured by this harness." in text


def test_leg_labels_in_cells_come_from_the_study(tmp_path):
    # The record says "0.18"; the study's label for the leg wins, so tables agree with study.yaml.
    d = simple_study(tmp_path / "s", {}, legs=[(LEGS[0][0], "old")])
    write_run(d, record_dict(leg="gpu-0.18.0", leg_label="0.18", model="m", value=10.0))
    assert _cell(canonicalize(load(d)), "gpu-0.18.0")["leg_label"] == "old"
