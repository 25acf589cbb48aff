"""Page text a reader needs, read from the pages' markdown source (harness.publish.page_source): the
serving study states its load, SLOs and price; no empty table or bullet; only the study's own
diagnostics; every page says what its workloads are; the dummy-weight study says what that means."""

from __future__ import annotations

import re

import pytest

from harness.core import paths
from harness.publish.page_source import page_source


@pytest.fixture(scope="module")
def serve() -> str:
    return page_source(paths.RESULTS / "cpu-serve")


def test_serving_states_load_slos_and_an_illustrative_price(serve):
    assert "TTFT ≤ 500 ms and TPOT ≤ 50 ms" in serve
    assert "USD 0.08 per CPU-hour" in serve and "illustrative" in serve
    assert "| requests |" in serve and "(CPU-hour) |" not in serve


def test_no_empty_bullet_no_empty_table_no_other_studys_diagnostics(serve):
    assert not re.search(r"^- \*\*[^*]+\.\*\* *$", serve, flags=re.M)
    lines = serve.splitlines()
    for i, ln in enumerate(lines[:-2]):
        if re.fullmatch(r"\|(---:?\|)+", ln.replace(" ", "")):
            assert lines[i + 1].startswith("|"), f"table without rows: {lines[i - 1]}"
    assert "Bisect:" not in serve and "Dependency window" not in serve


def test_a_page_says_what_its_workloads_are():
    mm = page_source(paths.RESULTS / "cpu-tiny-mm")
    assert "### Workloads" in mm and "224×224 px" in mm and "| audio | throughput | audio |" in mm


def test_the_dummy_weight_study_says_what_that_means_and_what_it_dropped():
    h = page_source(paths.RESULTS / "h200-ablation")
    assert "What dummy weights are" in h and "router" in h and "Mixtral-8x7B was planned and dropped" in h
    assert "0.9 α" not in h and "checks hold" not in h
