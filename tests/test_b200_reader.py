"""A reader's test of the transcribed B200 study's page: every finding and piece of reasoning listed in
tests/data/b200_reader_items.yaml must be on it. Run on the page's markdown source as the sections emit
it (`harness.publish.page_source`: fast, no Quarto) and, where one has been rendered, on
results/b200-reference/report/REPORT.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness.core import paths

STUDY = paths.RESULTS / "b200-reference"
ITEMS_FILE = Path(__file__).parent / "data" / "b200_reader_items.yaml"
ITEMS: list[dict] = yaml.safe_load(ITEMS_FILE.read_text(encoding="utf-8"))["items"]


def _plain(text: str) -> str:
    """The text with what Pandoc adds undone: curly quotes straightened, backslash escapes dropped,
    lines joined (a table cell or paragraph may wrap)."""
    text = text.translate(str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'}))
    text = re.sub(r"\\([\[\]<>*_#|`~$\\-])", r"\1", text)
    return re.sub(r"\s+", " ", text)


def absent(text: str, items: list[dict] = ITEMS) -> list[str]:
    """Each item not on the page, as `id: the needle missing` or `id: forbidden text present`."""
    page = _plain(text)
    out = []
    for item in items:
        out += [f"{item['id']}: missing {n!r}" for n in item["needles"] if _plain(n) not in page]
        out += [f"{item['id']}: has {f!r}" for f in item.get("forbid", []) if _plain(f) in page]
    return out


def test_the_items_are_well_formed_and_unique():
    ids = [i["id"] for i in ITEMS]
    assert len(ids) == len(set(ids)) and len(ids) >= 25
    assert all(i["finding"].strip() and i["needles"] for i in ITEMS)


def test_the_check_fails_when_an_item_is_dropped():
    text = "the study says 2026-09-20 and `--enforce-eager`"
    items = [{"id": "a", "finding": "x", "needles": ["2026-09-20"]},
             {"id": "b", "finding": "y", "needles": ["not on the page"]},
             {"id": "c", "finding": "z", "needles": ["2026"], "forbid": ["–enforce-eager"]}]
    assert absent(text, items) == ["b: missing 'not on the page'"]
    assert absent(text.replace("`--", "–"), items) == ["b: missing 'not on the page'",
                                                        "c: has '–enforce-eager'"]
    # Pandoc's typography is undone, its dashes are not: an en dash for `--` is a defect.
    assert absent("\u201cquoted\u201d \\[x\\]", [{"id": "d", "finding": "q", "needles": ['"quoted" [x]']}]) == []


@pytest.fixture(scope="module")
def source() -> str:
    from harness.publish.page_source import page_source

    return page_source(STUDY)


def test_the_page_source_has_every_item(source):
    assert absent(source) == []


def test_the_page_source_loses_an_item_when_a_note_is_gone(tmp_path):
    import shutil

    from harness.publish.page_source import page_source

    d = tmp_path / "results" / "b200-reference"
    shutil.copytree(STUDY, d, ignore=shutil.ignore_patterns("report"))
    (d / "notes" / "41-moe.md").unlink()
    missing = absent(page_source(d))
    assert any(m.startswith("moe-fingerprint:") for m in missing)
    assert any(m.startswith("moe-refusals:") for m in missing)


@pytest.mark.skipif(not (STUDY / "report" / "REPORT.md").is_file(), reason="no rendered REPORT.md")
def test_the_rendered_report_has_every_item():
    missing = absent((STUDY / "report" / "REPORT.md").read_text(encoding="utf-8"))
    assert missing == [], "REPORT.md lacks items (re-render: harness report results/b200-reference): " + "; ".join(missing)
