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
from harness.publish.browser import LEGIBLE_PX, Chromium, check_page, find_chromium, shot_name

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
        # Tables wider than the 1000 px column scroll inside their own box (every column reachable);
        # which ones, for the reader of the test's output.
        if c.scrolling_tables:
            print(f"{page.parent.parent.name}: tables that scroll at 1400 px: {c.scrolling_tables}")
    _legible(page, c)


def _legible(page: Path, c) -> None:
    """Every figure of a page rendered with its text sizes shows its smallest text at LEGIBLE_PX or more
    (at 400 px through its narrow variant where it has one)."""
    if "data-text-px" not in page.read_text(encoding="utf-8", errors="replace"):
        return   # rendered before figures carried their text size
    figs = [i for i in c.images if i.get("textShown") is not None]
    assert figs, "the page's figures carry their text size"
    small = [(i["src"][:60], round(i["textShown"], 1), i["narrow"]) for i in figs if i["textShown"] < LEGIBLE_PX]
    assert small == [], small


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
    _legible(page, c)


BAD_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>bad</title></head><body>
<img src="missing.png" alt="gone">
<div style="width:2000px">too wide</div>
<div style="width:300px;overflow:hidden"><table><tr><td style="min-width:900px">a</td><td>last</td></tr></table></div>
<div style="width:300px;overflow-x:auto"><table><tr><td style="min-width:900px">a</td><td>end</td></tr></table></div>
<script>console.error("boom")</script>
<table><tr><th>head only</th></tr><tr><td> </td></tr></table>
<img src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==" style="width:0">
<table style="display:block;overflow-x:auto;max-width:300px"><tr><td style="min-width:900px">wide</td><td>x</td></tr></table>
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
    assert len(c.scrolling_tables) == 1 and c.scrolling_tables[0].startswith("wide | x"), c.scrolling_tables
    # The same table in a box that scrolls is reachable (the first table is the one checked).
    page.write_text(BAD_PAGE.replace('overflow:hidden"><table><tr><td style="min-width:900px">a</td><td>last', "\"><i"))
    c = check_page(browser, page, width=400)
    assert c.last_column is not None and c.last_column["text"] == "end" and c.last_column["visible"] is True
    assert len(c.problems) == 3


def test_a_wide_figure_is_shown_legibly_on_a_phone_only_through_its_narrow_variant(browser, tmp_path):
    """A real figure of the report (the capacity page's three panels, 11 inches wide) as the page shows
    it: at 400 px the wide picture alone would show its text at about 3 px; the <picture> gives the phone
    the narrow variant (panels stacked, 5 inches), whose text is shown at LEGIBLE_PX or more; a desktop
    gets the wide one."""
    import pandas as pd

    from harness.publish import figures
    from harness.publish.figure_cells import show

    probes = pd.DataFrame([{"model": "m", "workload": "w", "axis": "request_rate", "leg": leg, "value": v,
                            "ttft_p50_ms": 10 * v, "ttft_p90_ms": 12 * v, "ttft_p99_ms": 15 * v,
                            "tpot_p50_ms": 5.0, "tpot_p90_ms": 6.0, "tpot_p99_ms": 7.0, "goodput_req_s": v}
                           for leg in ("a", "b") for v in (1.0, 2.0, 4.0, 8.0)])
    png = show(figures.latency_vs_load(probes, model="m", workload="w"))
    assert png.narrow is not None and png.narrow_text_px is not None
    wide_only = png.__class__(png.data, text_px=png.text_px)
    for name, fig in (("both", png), ("wide-only", wide_only)):
        (tmp_path / f"{name}.html").write_text(
            '<!doctype html><html><head><meta name="viewport" content="width=device-width, initial-scale=1">'
            f'</head><body style="margin:0 15px">{fig.picture_html()}</body></html>')
    phone = check_page(browser, tmp_path / "both.html", width=400)
    assert phone.images[0]["narrow"] and phone.images[0]["textShown"] >= LEGIBLE_PX, phone.images
    assert phone.problems == [] and phone.scroll_width <= 400
    desk = check_page(browser, tmp_path / "both.html", width=1400)
    assert not desk.images[0]["narrow"]
    bare = check_page(browser, tmp_path / "wide-only.html", width=400)
    assert bare.images[0]["textShown"] < LEGIBLE_PX and any("text under" in p for p in bare.problems)
