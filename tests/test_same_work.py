"""Two legs are compared only when their runs did the same work. Study folders are FAKE (studygen)."""

from __future__ import annotations

import pytest

from harness.analyze.canonical import DifferentWorkError, canonical_md, canonicalize
from harness.analyze.dataset import load
from studygen import record_dict, simple_study, write_run


def _study(tmp_path, hashes):
    d = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [10.0]})
    write_run(d, record_dict(leg="gpu-0.26.0", leg_label="0.26", model="m", value=20.0,
                             work={"num_seqs": 100, "output_tokens": 51200, "prompts_sha256": hashes[1]}))
    return d


def test_different_prompts_are_refused_naming_both_records(tmp_path):
    d = _study(tmp_path, ("aaa", "bbb"))
    ds = load(d)
    # The studygen run of 0.18 records no hash: give it one through the records frame.
    ds.records.loc[ds.records["leg"] == "gpu-0.18.0", "prompts_sha256"] = "aaa"
    with pytest.raises(DifferentWorkError) as e:
        canonicalize(ds)
    msg = str(e.value)
    assert "prompts_sha256 aaa" in msg and "bbb" in msg and "\n" not in msg
    assert all(run_dir in msg for run_dir in ds.records["run_dir"])


def test_the_escape_compares_and_records_it(tmp_path):
    ds = load(_study(tmp_path, ("aaa", "bbb")))
    ds.records.loc[ds.records["leg"] == "gpu-0.18.0", "prompts_sha256"] = "aaa"
    canon = canonicalize(ds, allow_different_work=True)
    assert len(canon.cells) == 2 and len(canon.different_work) == 1
    md = canonical_md(canon)
    assert "## Different work" in md and "allow_different_work=True" in md


def test_same_prompts_pass(tmp_path):
    ds = load(_study(tmp_path, ("aaa", "aaa")))
    ds.records.loc[ds.records["leg"] == "gpu-0.18.0", "prompts_sha256"] = "aaa"
    canon = canonicalize(ds)
    assert canon.different_work == () and len(canon.cells) == 2
