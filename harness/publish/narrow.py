"""A figure's narrow variant, for a phone: the same figure laid out again at `WIDTH_IN` inches, panels
that stood side by side put under one another, footers wrapped to the new width.

Why 4.6 inches: a picture shown at a fixed CSS width shows its text at (font size in points) x
(shown width in px) / (72 x width in inches), whatever its dpi. A phone's 400 px viewport leaves about
350 px for a figure on the report's page, so a figure W inches wide shows 7 pt text (the smallest the
figures use) at 7 x 350 / (72 W) px: 3 px for an 11-inch figure, 7.4 px at 4.6 inches. `text_px` measures the smallest text a PNG holds (its font size at
the dpi it was saved at), which the page carries beside the picture so that a browser check can say
how large it is shown (`harness.publish.browser`).
"""

from __future__ import annotations

import textwrap
from typing import Any

from matplotlib.figure import Figure
from matplotlib.gridspec import GridSpec
from matplotlib.text import Text

WIDTH_IN = 4.6            # the narrow variant's width
WIDE_ENOUGH_IN = 4.8      # a figure this narrow or narrower needs no variant (7 pt shown at 7 px or more)
PANEL_MIN_IN, PANEL_MAX_IN = 2.2, 3.4   # a stacked panel's height
FOOTER_CHARS_PER_IN = 13  # as figures._footer_text wraps (8 pt)


def text_px(fig: Figure, dpi: float) -> float | None:
    """The smallest visible text's font size in the PNG's pixels at `dpi` (after a draw: tick labels
    exist only once the figure was drawn)."""
    sizes = [t.get_fontsize() for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and t.get_figure() is not None]
    return min(sizes) * dpi / 72 if sizes else None


def _grid_axes(fig: Figure) -> list[Any]:
    """The figure's panels: axes placed by a grid (a colorbar's axes have no place in it)."""
    return [ax for ax in fig.axes if ax.get_subplotspec() is not None and ax.get_label() != "<colorbar>"]


def narrow(fig: Figure) -> bool:
    """Lay `fig` out again at WIDTH_IN; False (and `fig` untouched) where it is narrow enough already.
    Call it after the wide picture was saved: it changes `fig`."""
    w, h = fig.get_size_inches()
    if w <= WIDE_ENOUGH_IN:
        return False
    panels = _grid_axes(fig)
    grids = {id(ax.get_subplotspec().get_gridspec()) for ax in panels}
    height = h
    if panels and len(grids) == 1:
        spec = panels[0].get_subplotspec().get_gridspec()
        nrows, ncols = spec.get_geometry()
        if ncols > 1:
            # Side by side -> one under another, reading order kept; each panel keeps its height.
            order = sorted(panels, key=lambda ax: (ax.get_subplotspec().rowspan.start,
                                                   ax.get_subplotspec().colspan.start))
            stacked = GridSpec(len(order), 1, figure=fig)
            for i, ax in enumerate(order):
                ax.set_subplotspec(stacked[i])
                # A shared y axis hid the inner panels' tick labels; alone in its row each needs them.
                ax.tick_params(labelleft=True)
            panel = min(PANEL_MAX_IN, max(PANEL_MIN_IN, h / nrows))
            height = panel * len(order) + 0.6
    fig.set_size_inches(WIDTH_IN, height)
    footers = [t for t in fig.texts if t.get_position()[1] < 0.05 and t.get_text().strip()]
    lines = 0
    for t in footers:
        t.set_text(textwrap.fill(" ".join(t.get_text().split()), int(WIDTH_IN * FOOTER_CHARS_PER_IN)))
        lines += t.get_text().count("\n") + 1
    if fig._suptitle is not None:  # noqa: SLF001 - matplotlib keeps the suptitle there
        fig._suptitle.set_wrap(True)  # noqa: SLF001
    bottom = min(0.4, (lines * 0.15 + (0.08 if lines else 0.02)) / height)
    try:
        fig.tight_layout(rect=(0, bottom, 1, 0.97 if fig._suptitle is not None else 1))  # noqa: SLF001
    except (ValueError, RuntimeError):
        pass   # a layout that cannot be tightened is drawn as placed; the picture stays legible
    return True
