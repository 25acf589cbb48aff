"""Each shipped report's index.html in a real headless Chromium (Debian's `chromium`; `.ci/run`
installs it where it is missing): every image loads, no console errors, nothing wider than a 1400 px
viewport, the answer table ("The answer") starting within the first 900 px screen, and at 400 px the
answer table's ratio column (and the last column of the report's first table) can be scrolled into view.
Screenshots go to pytest's temporary folder (`screenshots*` under its basetemp; the path is printed);
`make screenshots` writes the same pictures to .cache/screenshots/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core import paths
from harness.publish.browser import Chromium, check_page, find_chromium, shot_name

CHROMIUM = find_chromium()
if CHROMIUM is None:
    pytest.skip("chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)",
                allow_module_level=True)

PAGES = sorted(paths.RESULTS.glob("*/report/index.html"))


@pytest.fixture(scope="module")
def browser():
    assert CHROMIUM is not None
    with Chromium(CHROMIUM) as b:
        yield b


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("screenshots")
    print(f"screenshots: {d}")
    return d


def _answer_first(page: Path) -> bool:
    """Rendered with the answer matrix first (or, one leg, the line saying there is none): the checks
    that the earlier layout did not meet (no sideways scroll at 400 px, no empty table) apply to it.
    Pages are re-rendered after a change to the report, so this only spares pages not yet re-rendered."""
    html = page.read_text(encoding="utf-8", errors="replace")
    return 'id="fig-answer"' in html or "so no answer matrix" in html


def test_there_are_shipped_reports():
    assert {p.parent.parent.name for p in PAGES} >= {"b200-reference", "cpu-tiny", "h200"}


@pytest.mark.parametrize("page", PAGES, ids=[p.parent.parent.name for p in PAGES])
def test_shipped_report_at_1400px(browser, shots, page):
    c = check_page(browser, page, width=1400, screenshot=shots / shot_name(page, 1400))
    assert c.images, "every shipped report has figures"
    assert [i["src"] for i in c.images if not i["loaded"]] == []
    assert c.console_errors == []
    assert c.n_too_wide == 0, c.too_wide
    assert c.scroll_width <= 1400
    assert c.screenshot is not None and c.screenshot.stat().st_size > 10_000
    assert c.answer is not None, "the report opens with the answer table"
    # Above the fold: the answer matrix where the page has one (two legs or more), else the table.
    top = c.answer_figure["top"] if c.answer_figure is not None else c.answer["top"]
    assert top < c.height, (c.answer_figure, c.answer)
    if _answer_first(page):
        assert c.empty_tables == 0


@pytest.mark.parametrize("page", PAGES, ids=[p.parent.parent.name for p in PAGES])
def test_shipped_report_at_400px_first_table_last_column_reachable(browser, shots, page):
    c = check_page(browser, page, width=400, screenshot=shots / shot_name(page, 400))
    assert c.console_errors == []
    assert c.last_column is not None, "the report has a table"
    assert c.last_column["visible"], c.last_column
    assert c.answer is not None and c.answer["ratioVisible"], c.answer
    if _answer_first(page):
        # A page rendered answer-first is laid out for a phone: nothing scrolls sideways, and the
        # matrix (two legs or more) fits the screen above the fold, drawn, not cropped.
        assert c.scroll_width <= 400 and c.n_too_wide == 0, (c.scroll_width, c.too_wide)
        if c.answer_figure is not None:
            assert c.answer_figure["top"] < c.height and 0 < c.answer_figure["width"] <= 400, c.answer_figure


BAD_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>bad</title></head><body>
<img src="missing.png" alt="gone">
<div style="width:2000px">too wide</div>
<div style="width:300px;overflow:hidden"><table><tr><td style="min-width:900px">a</td><td>last</td></tr></table></div>
<div style="width:300px;overflow-x:auto"><table><tr><td style="min-width:900px">a</td><td>end</td></tr></table></div>
<script>console.error("boom")</script>
<table><tr><th>head only</th></tr><tr><td> </td></tr></table>
<img src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==" style="width:0">
</body></html>
"""


def test_the_checks_catch_a_broken_page(browser, tmp_path):
    """The same checks on a page built to fail each of them."""
    page = tmp_path / "index.html"
    page.write_text(BAD_PAGE)
    c = check_page(browser, page, width=400)
    assert [i["loaded"] for i in c.images] == [False, True] and c.images[1]["width"] == 0
    assert c.empty_tables == 1 and any("empty table" in p for p in c.problems)
    assert any("2 image(s)" in p for p in c.problems)              # the missing one and the zero-wide one
    assert any("boom" in e for e in c.console_errors)
    assert any("missing.png" in e for e in c.console_errors)       # the failed load, as the console logs it
    assert c.n_too_wide >= 1 and any(w.startswith("div") for w in c.too_wide)
    assert c.last_column is not None and c.last_column["visible"] is False and c.last_column["clippedBy"] == "div"
    # The same table in a box that scrolls is reachable (the first table is the one checked).
    page.write_text(BAD_PAGE.replace('overflow:hidden"><table><tr><td style="min-width:900px">a</td><td>last', "\"><i"))
    c = check_page(browser, page, width=400)
    assert c.last_column is not None and c.last_column["text"] == "end" and c.last_column["visible"] is True
    assert len(c.problems) == 3
