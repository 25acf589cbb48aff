"""The report's figure cells: the figure functions of `harness.publish.figures` over the frames of
`harness.analyze.studies.diagnostics` (as the notebooks draw them), each returned as one cell output."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.analyze.tables import _legs
from harness.core.errors import UserError
from harness.publish.sections.supporting import supporting
from harness.publish.study import Study


@dataclass(frozen=True)
class Png:
    """A rendered figure; Jupyter shows it as image/png (so do the kernel render and the markdown
    report). As HTML (Quarto's page) it is a <picture>: a phone's viewport gets the narrow variant where
    the figure has one (`harness.publish.narrow`), and each <img> carries the size in its pixels of its
    smallest text (`data-text-px`), from which a browser check tells how large that text is shown."""

    data: bytes
    text_px: float | None = None
    narrow: bytes | None = None
    narrow_text_px: float | None = None

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, object]:
        # image/png for every reader (the markdown report, the kernel render, Jupyter, and Quarto's page,
        # which makes it a numbered figure with its caption); the narrow variant and the text sizes under
        # a type of their own, which Quarto ignores, and harness.publish.render turns the page's <img>
        # into the <picture> of `picture_html` after Quarto rendered it. Not a text/html output: Quarto
        # takes any for a script widget and puts require.js and jQuery from a CDN into the page.
        import base64

        b64 = base64.b64encode
        extra = {"text_px": self.text_px, "narrow_text_px": self.narrow_text_px,
                 "narrow": None if self.narrow is None else b64(self.narrow).decode("ascii")}
        return {"image/png": b64(self.data).decode("ascii"), PICTURE_MIME: extra}

    def picture_html(self) -> str:
        """The figure as the page shows it: the <img> a page would hold, through `picture`."""
        import base64

        b64 = base64.b64encode
        img = f'<img src="data:image/png;base64,{b64(self.data).decode("ascii")}" alt="" style="max-width:100%;height:auto">'
        return picture(img, text_px=self.text_px, narrow_text_px=self.narrow_text_px,
                       narrow=None if self.narrow is None else b64(self.narrow).decode("ascii"))


def picture(img: str, *, text_px: float | None, narrow_text_px: float | None, narrow: str | None) -> str:
    """A page's figure <img> with its text sizes (`data-text-px`, `data-narrow-text-px`), inside a
    <picture> whose phone source is the narrow variant (base64 PNG) where there is one. One <img>,
    whichever source the viewport picks; the browser check reads the size of the source shown."""
    sizes = {"text-px": text_px, "narrow-text-px": narrow_text_px}
    attrs = "".join(f' data-{k}="{v:.1f}"' for k, v in sizes.items() if v is not None)
    tagged = img[:-1].rstrip("/").rstrip() + attrs + ">"
    if narrow is None:
        return tagged
    return (f'<picture><source media="(max-width: {NARROW_VIEWPORT_PX}px)" '
            f'srcset="data:image/png;base64,{narrow}">{tagged}</picture>')


# Viewports up to this width get a figure's narrow variant: phones, not a desktop's column.
NARROW_VIEWPORT_PX = 640
# The output type that carries a figure's <picture> (see Png._repr_mimebundle_).
PICTURE_MIME = "application/x-harness-picture+json"


@dataclass(frozen=True)
class Note:
    """Markdown in place of a figure that has nothing to show."""

    text: str

    def _repr_markdown_(self) -> str:
        return self.text


def _save(fig: Any, dpi: int) -> tuple[bytes, float | None]:
    from harness.publish.narrow import text_px

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue(), text_px(fig, dpi)


def _png(fig: Any, dpi: int = 110) -> Png:
    """The figure as drawn, and (where it is wider than a phone shows legibly) its narrow variant."""
    from harness.publish.narrow import narrow

    data, px = _save(fig, dpi)
    if not narrow(fig):
        return Png(data, text_px=px)
    small, small_px = _save(fig, dpi)
    return Png(data, text_px=px, narrow=small, narrow_text_px=small_px)


def show(fig: Any) -> Png | Note:
    """A matplotlib figure (from `harness.publish.figures` or here) as the cell's one output."""
    if fig is None:
        return Note("_Nothing to show._")
    if isinstance(fig, (list, tuple)):
        raise TypeError("show() takes one figure; show_all() several")
    return fig if isinstance(fig, (Png, Note)) else _png(fig)


def show_all(figs: Sequence[Any]) -> None:
    """Several figures as one cell's outputs (Quarto makes them sub-figures)."""
    from IPython.display import display

    for f in figs:
        display(show(f))


def answer_figure(st: Study) -> Png | Note:
    """The answer as a matrix: per (model, workload) and step, the ratio coloured by its verdict, the
    missing cells' root causes under it (`harness.publish.matrix`)."""
    from harness.publish import matrix
    from harness.publish.sections import answer as sec

    if len(_legs(st.canon)) < 2:
        return outcome_figure(st)
    cells = sec.matrix_cells(sec.answer(st))
    if not cells:
        return Note("_No (model, workload) cell was measured on two consecutive legs._")
    note = ("Ratio: newer over older leg for throughput, older over newer for latency; above 1.00x the newer "
            "leg is faster.")
    return _png(matrix.verdict_matrix(matrix.frame(cells), note=note), dpi=matrix.DPI)


def outcome_cells(st: Study) -> list:
    """A one-leg study's answer as matrix cells: what it measured, run by run. Columns are its arms where
    its series has several (the study compares engine arguments, or which arm runs at all), else its leg;
    each cell the arm's outcome (ok: every run passed) and its median figure, or the failure's class."""
    from harness import workloads as wk
    from harness.publish import matrix

    recs = st.ds.records
    recs = recs[recs["series"] == st.canon.series]
    arms = list(dict.fromkeys(recs["arm"]))
    main = [a for a in arms if a not in ("vllm-bench",)]   # the crosscheck's side runs are not the study's arms
    cols = main if len(main) > 1 else None
    label = _legs(st.canon)[0][1] if _legs(st.canon) else "—"
    out = []
    from harness.analyze.order import row_key

    key = row_key(st.ds)
    keys = sorted(dict.fromkeys(zip(recs["model"], recs["workload"], recs["kind"])), key=lambda k: key(k[0], k[1]))
    for model, wl, kind in keys:
        for arm in (cols or [main[0] if main else "default"]):
            r = recs[(recs["model"] == model) & (recs["workload"] == wl) & (recs["arm"] == arm)]
            if r.empty:
                continue
            ok = r[r["status"] == "ok"]
            step = arm if cols else label
            if len(ok) and len(ok) == len(r) and wk.known(kind):
                m = wk.metric_of(kind)
                vals = ok[m.key].dropna()
                text = m.fmt(float(vals.median())) + (f" {m.unit}" if getattr(m, "unit", "") else "") if len(vals) else "ok"
                out.append(matrix.MatrixCell(model=model, workload=wl, step=step, ratio=None, verdict="ok", text=text))
            else:
                bad = r[r["status"] != "ok"]
                cls = next((str(x) for x in bad["failure_class"].dropna()), "") if "failure_class" in bad else ""
                if cls in ("", "unknown") and "failure_error" in bad:
                    # No known signature: the exception's type is still more than "failed".
                    cls = next((str(x).split(":")[0] for x in bad["failure_error"].dropna()), cls)
                out.append(matrix.MatrixCell(model=model, workload=wl, step=step, ratio=None, verdict="failed",
                                             text=(cls or "failed")[:14]))
    return out


def outcome_figure(st: Study) -> Png | Note:
    """The answer picture of a study with one leg: no step to judge, so each arm's (or the leg's) outcome
    and figure per (model, workload) (`outcome_cells`)."""
    from harness.publish import matrix

    cells = outcome_cells(st)
    if not cells:
        return Note("_One leg only, and no run of its main series: nothing to draw._")
    arms = len({c.step for c in cells}) > 1
    note = ("One leg, so no step between versions: " + ("each arm's outcome and median figure per (model, "
            "workload); a failed cell names its failure class (\"Failure attribution\" has the root cause)."
            if arms else "each (model, workload)'s median figure over its repeats, absolute."))
    return _png(matrix.verdict_matrix(matrix.frame(cells), note=note), dpi=matrix.DPI)


def ratio_figure(st: Study) -> Png | Note:
    """Per step between consecutive legs, each (model, workload)'s ratio with its 95% interval."""
    from harness.publish import figures

    if len(_legs(st.canon)) < 2:
        return Note("_One leg only: there is no ratio to plot._")
    return show(figures.ratio_dots(ratio_rows(st)))


def ratio_rows(st: Study) -> Any:
    """The study's step verdicts as the ratio figure draws them (`harness.analyze.verdicts`: the ratio and
    interval every view prints); for transcribed single passes the interval the rounding of the printed
    figures allows (`r_low`, `r_high`) instead of a confidence interval."""
    import pandas as pd

    from harness.analyze.fmt import short_labels
    from harness.analyze.verdicts import study_verdicts

    sv = study_verdicts(st.canon)
    short = short_labels([lb for _, lb in _legs(st.canon)])
    prov = {(c["leg"], c["model"], c["workload"]): c["provenance"] for c in st.canon.cells.to_dict("records")}
    rows = []
    for v in sv.cells:
        if v.ratio is None:
            continue
        rounding = v.interval == "rounding"
        rows.append({"series": st.canon.series, "model": v.model, "workload": v.workload, "kind": v.kind,
                     "old": v.old, "new": v.new, "pair": f"{short.get(v.new_label, v.new_label)}/{short.get(v.old_label, v.old_label)}",
                     "ratio": v.table_ratio, "low": None if rounding else v.low, "high": None if rounding else v.high,
                     "verdict": v.verdict, "units": v.units_text, "n_old": v.n_old, "n_new": v.n_new,
                     "provenance": ",".join(sorted({str(prov.get((v.old, v.model, v.workload))),
                                                    str(prov.get((v.new, v.model, v.workload)))})),
                     "r_low": v.low if rounding else None, "r_high": v.high if rounding else None})
    return pd.DataFrame(rows, columns=["series", "model", "workload", "kind", "old", "new", "pair", "ratio", "low",
                                       "high", "verdict", "units", "n_old", "n_new", "provenance", "r_low", "r_high"])


def ratio_caption_md(st: Study) -> str:
    """What the ratio figure draws, from the data (the static caption cannot know)."""
    if len(_legs(st.canon)) < 2:
        return ""
    df = ratio_rows(st).dropna(subset=["ratio"])
    ci = int(df["low"].notna().sum())
    rules = sorted({str(u).split(" (")[0].split(" in ")[-1] for u in df.loc[df["low"].notna(), "units"]})
    bits = [f"{ci} of the {len(df)} ratios have the rule's 95% interval (filled dots with bars; over "
            f"{', '.join(rules)})" if ci else
            (f"none of the {len(df)} ratios has an interval: each has a side with one run (hollow dots)"
             if ((df["n_old"] > 1) | (df["n_new"] > 1)).any() else
             f"none of the {len(df)} ratios has an interval: every side is a single pass (hollow dots)")]
    if df["r_low"].notna().any():   # only transcribed figures carry a rounding range
        noise = df[(df["r_low"] <= 1) & (df["r_high"] >= 1) & df["low"].isna()]
        bits.append(f"grey bars are the range the printed rounding allows; {len(noise)} "
                    f"{'ratio lies' if len(noise) == 1 else 'ratios lie'} within rounding of 1.0x and "
                    f"{'is' if len(noise) == 1 else 'are'} drawn grey, not as a change")
    return "_In the figure above: " + "; ".join(bits) + "._\n"


def coverage_figure(st: Study) -> Png | Note:
    from harness.analyze.failure import attributions_by_model
    from harness.analyze.studies import diagnostics as dx
    from harness.publish import figures

    cov = dx.coverage_frame(st.ds, canon=st.canon)
    # "ok" that holds only under a dependency pin is its own state: the model does not pass as installed.
    att = attributions_by_model(st.ds, series=st.canon.series)
    for r in att[att["status"] == "passes only pinned"].to_dict("records"):
        col = st.canon.study.label(r["leg"])
        if r["model"] in cov.index and col in cov.columns and cov.at[r["model"], col] == "ok":
            cov.at[r["model"], col] = "ok (pinned)"
    return show(figures.coverage_heatmap(cov, provenance=st.canon.cells["provenance"]))


def dispersion_figure(st: Study) -> Png | Note:
    """Every repeat of every series, as its deviation from its cell's median."""
    from harness.analyze.studies import diagnostics as dx
    from harness.publish import figures

    return show(figures.dispersion_strip(dx.samples_frame(list(st.series.values()))))


def series_figures(st: Study) -> list[Png | Note]:
    """One figure per supporting series, the one its notebook draws."""
    from harness.publish import figures

    out: list[Png | Note] = []
    for s in supporting(st):
        d, name = s.diagnostic, s.name
        if isinstance(d, UserError):
            continue
        if s.kind == "exit-status":
            out.append(show(figures.falsification_heatmap(d.passed, d.outcomes, title=f"Series {name}",
                                                          provenance=d.provenance)))
        elif s.kind == "repeats":
            out.append(show(figures.repeat_strip(d.samples, title=f"Series {name}: {d.model}")))
        elif s.kind == "arms":
            out.append(show(figures.arm_bars(d.table, title=f"Series {name}: {d.model} {d.workload}")))
        # one-leg: its table says it all; a strip of one leg's repeats would only repeat the spread column
    return out


def drift_figure(st: Study) -> Png | Note:
    """Every timestamped repeat of every series, its speed against the time it started: whether the host
    drifted or had slow episodes, and whether those struck the legs of one repeat together."""
    from harness.analyze.studies import drift
    from harness.publish import figures

    frame = drift.drift_frame(list(st.series.values()))
    summary = drift.drift_summary(frame)
    if summary.trend.too_few:
        return Note("_Too few repeated runs with timestamps to show drift._")
    return show(figures.drift_scatter(frame, summary))
