"""A wide figure's narrow variant (harness.publish.narrow) and how the page carries it
(figure_cells.Png, render._with_pictures). How large the text is shown is checked in a real browser in
tests/test_browser.py."""

from __future__ import annotations

import base64

from matplotlib.figure import Figure

from harness.publish import narrow
from harness.publish.figure_cells import PICTURE_MIME, Png, show
from harness.publish.render import _with_pictures


def _three_panels() -> Figure:
    fig = Figure(figsize=(11, 3.8))
    axes = fig.subplots(1, 3, sharey=True)
    for i, ax in enumerate(axes):
        ax.plot([1, 2, 3], [i, i + 1, i + 2])
        ax.set_title(f"panel {i}")
    fig.text(0.01, 0.01, "a footer long enough to need wrapping once the figure is five inches wide " * 2,
             fontsize=8)
    return fig


def test_panels_side_by_side_are_stacked_at_five_inches_and_the_footer_wrapped():
    fig = _three_panels()
    assert narrow.narrow(fig)
    w, h = fig.get_size_inches()
    assert w == narrow.WIDTH_IN and h > 3 * narrow.PANEL_MIN_IN
    cols = [ax.get_subplotspec().get_geometry()[:2] for ax in fig.axes]
    assert cols == [(3, 1)] * 3
    # One under another, in reading order.
    tops = [ax.get_position().y0 for ax in fig.axes]
    assert tops == sorted(tops, reverse=True)
    assert "\n" in fig.texts[0].get_text()


def test_a_figure_narrow_enough_has_no_variant():
    fig = Figure(figsize=(4.5, 3))
    fig.add_subplot().plot([0, 1])
    assert narrow.narrow(fig) is False and tuple(fig.get_size_inches()) == (4.5, 3)


def test_show_keeps_both_and_the_page_gets_a_picture():
    png = show(_three_panels())
    assert isinstance(png, Png) and png.narrow is not None and png.text_px and png.narrow_text_px
    bundle = png._repr_mimebundle_()
    wide = bundle["image/png"]
    assert base64.b64decode(wide) == png.data and bundle[PICTURE_MIME]["narrow"]
    # The page as Quarto writes it: the figure's <img>, and another image that is no figure of ours.
    page = (f'<p><img src="data:image/png;base64,{wide}" class="figure-img"></p>'
            '<img src="data:image/png;base64,AAAA">')
    out = _with_pictures(page, {wide: bundle[PICTURE_MIME]})
    assert out.count("<picture>") == 1 and 'media="(max-width: 640px)"' in out
    assert f'srcset="data:image/png;base64,{bundle[PICTURE_MIME]["narrow"]}"' in out
    assert 'class="figure-img" data-text-px=' in out and "data-narrow-text-px=" in out
    assert out.endswith('<img src="data:image/png;base64,AAAA">')
    # A figure without a narrow variant keeps its <img>, with its text size.
    small = {wide: {"text_px": 12.0, "narrow_text_px": None, "narrow": None}}
    assert _with_pictures(page, small).count("<picture>") == 0 and 'data-text-px="12.0"' in _with_pictures(page, small)
