"""The answer as a picture: a matrix of (model, workload) rows and one column per step between
consecutive legs, each cell the step's ratio coloured by its verdict (faster, slower, equivalent,
undecided, single pass, missing), a missing cell marked with a letter whose root cause is written under the matrix.

Drawn narrow on purpose: the figure is about 3.4 inches wide at 200 dpi, so that on a 400 px phone
screen, scaled to the text column, its lettering is still some 11 px high, and on a wide screen it is
shown at no more than its width (the page's style caps it) rather than blown up. Where the steps do
not fit side by side they wrap: the matrix is drawn again below for the next steps, each panel with
its own row labels.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

# Verdict classes, in legend order, and their colours (fill, text).
CLASSES: dict[str, tuple[str, str]] = {
    "faster": ("#4c9a5b", "white"),
    "slower": ("#c44e52", "white"),
    "equivalent": ("#8fb8de", "#1f2328"),
    "undecided": ("#e8e3c8", "#1f2328"),
    # One figure per side decides nothing, whatever its ratio (harness.analyze.verdicts.CellVerdict.cls).
    "single pass": ("#d9d9d9", "#1f2328"),
    "missing": ("#ffffff", "#555555"),
    # A one-leg study's picture (no step): each run's outcome, its figure written in the cell.
    "ok": ("#dfe9dc", "#1f2328"),
    "failed": ("#f3d6d6", "#1f2328"),
}

WIDTH_IN = 3.4         # the figure's width: legible when scaled to a phone's text column
DPI = 200
MODEL_IN, WORKLOAD_IN = 1.0, 0.98
STEP_MIN_IN = 0.55     # the narrowest step column; fewer columns per panel, not narrower ones
ROW_IN, HEAD_IN, GAP_IN = 0.2, 0.34, 0.22
FONT = 7.5


@dataclass(frozen=True, kw_only=True)
class MatrixCell:
    """One cell of the matrix: `verdict` one of CLASSES; `cause` the missing side's root cause."""

    model: str
    workload: str
    step: str
    ratio: float | None
    verdict: str
    cause: str = ""
    text: str = ""          # what the cell says instead of its ratio (a one-leg study's figure or failure)


def wrap_name(name: str, width: int) -> list[str]:
    """`name` in lines of at most `width` characters, broken after `/`, `-`, `_`, `.` or a space
    where it can be (a model name never breaks mid-word unless one piece is longer than a line)."""
    pieces = re.findall(r"[^/_.\- ]+[/_.\- ]?|[/_.\- ]", name)
    lines: list[str] = []
    cur = ""
    for p in pieces:
        if cur and len(cur) + len(p.rstrip()) > width:
            lines.append(cur.rstrip())
            cur = ""
        while len(p) > width:
            lines.append(p[:width])
            p = p[width:]
        cur += p
    if cur.strip():
        lines.append(cur.rstrip())
    return lines or [name]


def frame(cells: list[MatrixCell]) -> pd.DataFrame:
    """The cells as a frame (model, workload, step, ratio, verdict, cause), in the order given."""
    return pd.DataFrame([c.__dict__ for c in cells], columns=["model", "workload", "step", "ratio", "verdict", "cause",
                                                             "text"])


def _panels(steps: list[str]) -> list[list[str]]:
    fit = max(1, int((WIDTH_IN - MODEL_IN - WORKLOAD_IN) // STEP_MIN_IN))
    return [steps[i:i + fit] for i in range(0, len(steps), fit)] or [[]]


def _rows_for(model: str) -> int:
    """Rows a model's wrapped name needs (its lines are a little shorter than a row)."""
    return -(-len(wrap_name(model, 16)) * 4 // 5)


def _key_in(name: str) -> float:
    return 0.24 + 0.062 * len(name)


def _legend_rows(names: list[str]) -> list[list[str]]:
    """The colour key's entries in lines that fit the figure's width."""
    out: list[list[str]] = [[]]
    used = 0.04
    for n in names:
        if out[-1] and used + _key_in(n) > WIDTH_IN:
            out.append([])
            used = 0.04
        out[-1].append(n)
        used += _key_in(n)
    return out


def verdict_matrix(df: pd.DataFrame, *, note: str = "") -> Figure:
    """The matrix of `frame(...)`: rows (model, workload) in first-seen order, grouped by model, one
    column per step; under it the colour key and each missing cell's root cause by its letter."""
    seen = list(dict.fromkeys(zip(df["model"], df["workload"])))
    order = {m: i for i, m in enumerate(dict.fromkeys(df["model"]))}
    rows = sorted(seen, key=lambda r: order[r[0]])      # a model's rows together, in first-seen order
    steps = list(dict.fromkeys(df["step"]))
    by = {(r["model"], r["workload"], r["step"]): r for r in df.to_dict("records")}
    causes = list(dict.fromkeys(str(c) for c in df.loc[df["verdict"] == "missing", "cause"] if str(c)))
    letter = {c: chr(ord("a") + i) if i < 26 else str(i + 1) for i, c in enumerate(causes)}
    panels = _panels(steps)
    chars = int(WIDTH_IN * 18.5)              # characters of 6.5 pt text across the figure
    key_lines = [f"{letter[c]}: {ln}" if k == 0 else f"   {ln}" for c in causes
                 for k, ln in enumerate(textwrap.wrap(c.replace("`", ""), chars - 4))]
    note_lines = textwrap.wrap(note, chars) if note else []
    # Each model's name is written once, beside its first row, in as many lines as its rows can hold.
    groups: dict[str, list[str]] = {}
    for m, wl in rows:
        groups.setdefault(m, []).append(wl)
    spans = [max(len(wls), _rows_for(m)) for m, wls in groups.items()]
    legend = _legend_rows([k for k in CLASSES if (df["verdict"] == k).any()])
    height = len(panels) * (HEAD_IN + ROW_IN * sum(spans)) + (len(panels) - 1) * GAP_IN + 0.1 \
        + 0.2 * len(legend) + 0.08 + 0.15 * (len(key_lines) + len(note_lines)) + 0.08
    fig = Figure(figsize=(WIDTH_IN, height), dpi=DPI)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, WIDTH_IN)
    ax.set_ylim(height, 0)
    ax.axis("off")
    y = 0.05
    for panel in panels:
        step_w = (WIDTH_IN - MODEL_IN - WORKLOAD_IN - 0.05) / max(1, len(panel))
        x0 = MODEL_IN + WORKLOAD_IN
        for j, step in enumerate(panel):
            old, _, new = step.partition(" → ")
            ax.text(x0 + (j + 0.5) * step_w, y + HEAD_IN - 0.05, f"{old} →\n{new}" if new else step,
                    ha="center", va="bottom", fontsize=FONT, color="#1f2328")
        ax.text(0.04, y + HEAD_IN - 0.05, "model", ha="left", va="bottom", fontsize=FONT, color="#555555")
        ax.text(MODEL_IN, y + HEAD_IN - 0.05, "workload", ha="left", va="bottom", fontsize=FONT, color="#555555")
        y += HEAD_IN
        for (m, wls), span in zip(groups.items(), spans):
            name = wrap_name(m, 16)
            ax.plot([0.02, WIDTH_IN - 0.02], [y, y], color="#d0d7de", lw=0.6)
            ax.text(0.04, y + 0.03, "\n".join(name), ha="left", va="top", fontsize=FONT - 0.5,
                    color="#1f2328", linespacing=1.05)
            for k, wl in enumerate(wls):
                ry = y + k * ROW_IN
                ax.text(MODEL_IN, ry + ROW_IN / 2, textwrap.shorten(str(wl), 17, placeholder="…"), ha="left",
                        va="center", fontsize=FONT - 0.5, color="#1f2328")
                for j, step in enumerate(panel):
                    c = by.get((m, wl, step))
                    cx = x0 + j * step_w
                    if c is None:
                        continue
                    fill, ink = CLASSES.get(str(c["verdict"]), CLASSES["undecided"])
                    ax.add_patch(Rectangle((cx + 0.02, ry + 0.015), step_w - 0.04, ROW_IN - 0.03, facecolor=fill,
                                           edgecolor="#999999" if c["verdict"] == "missing" else fill, lw=0.5,
                                           hatch="////" if c["verdict"] == "missing" else None))
                    if c["verdict"] == "missing":
                        text = f"— {letter.get(str(c['cause']), '')}".rstrip()
                    elif c.get("text"):
                        text = str(c["text"])
                    else:
                        text = f"{c['ratio']:.2f}x" if c["ratio"] is not None and pd.notna(c["ratio"]) else "—"
                    ax.text(cx + step_w / 2, ry + ROW_IN / 2, text, ha="center", va="center", fontsize=FONT,
                            color=ink, fontweight="bold" if c["verdict"] in ("faster", "slower") else "normal",
                            bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.6}
                            if c["verdict"] == "missing" else None)
            y += span * ROW_IN
        y += GAP_IN
    # The colour key, then each missing cell's root cause by its letter.
    y += 0.05 - GAP_IN
    for line in legend:
        x = 0.04
        for name in line:
            fill, _ = CLASSES[name]
            ax.add_patch(Rectangle((x, y + 0.03), 0.13, 0.12, facecolor=fill, edgecolor="#999999", lw=0.5,
                                   hatch="////" if name == "missing" else None))
            ax.text(x + 0.17, y + 0.09, name, ha="left", va="center", fontsize=FONT - 0.5, color="#1f2328")
            x += _key_in(name)
        y += 0.2
    y += 0.08
    for ln in key_lines + note_lines:
        ax.text(0.04, y, ln, ha="left", va="top", fontsize=FONT - 1, color="#555555")
        y += 0.15
    return fig
