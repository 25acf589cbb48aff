"""Checks on the labelled vLLM failure corpus itself (not on any classifier)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.vllm_logs import CLASSES, CORPUS_DIR, FILE_RE, SOURCE_RE, corpus

ENTRIES = corpus()


def test_corpus_is_large_enough_and_mostly_public():
    assert len(ENTRIES) >= 30
    public = [e for e in ENTRIES if e.source != "study"]
    assert len(public) >= 30


def test_every_class_is_present():
    counts = Counter(e.klass for e in ENTRIES)
    assert set(counts) <= set(CLASSES), set(counts) - set(CLASSES)
    assert set(CLASSES) <= set(counts), set(CLASSES) - set(counts)


def test_index_and_files_agree():
    indexed = [e.file for e in ENTRIES]
    assert len(indexed) == len(set(indexed))
    on_disk = {p.name for p in CORPUS_DIR.glob("*.log")}
    assert on_disk == set(indexed)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.file)
def test_entry_is_well_formed(entry):
    assert FILE_RE.match(entry.file), entry.file
    assert SOURCE_RE.match(entry.source), entry.source
    assert entry.klass in CLASSES
    assert len(entry.text.splitlines()) <= 60
    # The evidence is quoted from one line of the excerpt (a line's content may be
    # shorter than the line: process and log prefixes are not part of it).
    assert entry.evidence.strip()
    assert any(entry.evidence in line for line in entry.text.splitlines()), entry.evidence


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.file)
def test_evidence_is_never_a_frame_or_a_banner(entry):
    ev = entry.evidence.strip()
    assert not ev.startswith("Traceback (most recent call last)")
    assert not ev.startswith('File "')
    assert set(ev) - set("^~ ") != set()
    if entry.klass != "unknown":
        assert "Engine core initialization failed" not in ev
        assert "Worker failed with error" not in ev


def test_loader_rejects_a_bad_header(tmp_path):
    (tmp_path / "INDEX.tsv").write_text("file\tsource\n", encoding="utf-8")
    with pytest.raises(ValueError, match="header"):
        corpus(tmp_path)


def test_loader_rejects_a_missing_file(tmp_path):
    (tmp_path / "INDEX.tsv").write_text(
        "file\tsource\tclass\tevidence\tnote\n001-x.log\tstudy\tkilled\tKilled\t\n", encoding="utf-8"
    )
    with pytest.raises(ValueError, match="missing"):
        corpus(tmp_path)
