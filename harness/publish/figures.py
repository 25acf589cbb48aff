"""Figures for the notebooks and the report: plain functions from the frames of `harness.analyze.studies.diagnostics`
to matplotlib `Figure` objects.

Each function takes a DataFrame (documented columns), draws on a new `Figure` that pyplot does not
manage (so a notebook shows it once, and a script can `fig.savefig(...)` without global state), and
returns it. Axes are labelled with units; when any plotted row is transcribed, the figure says so
in its footer, because a transcribed figure must never pass for a measurement.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure

from harness.workloads import KINDS, metric_of

if TYPE_CHECKING:
    from harness.analyze.studies.drift import DriftSummary

TRANSCRIBED_NOTE = "Transcribed from the published study, not measured by this harness."
PASS, FAIL = "#4c9a5b", "#c44e52"


def _footer_text(fig: Figure, provenance: pd.Series | None, note: str | None = None) -> str | None:
    texts = []
    if provenance is not None and provenance.astype(str).str.contains("transcribed").any():
        texts.append(TRANSCRIBED_NOTE)
    if note:
        texts.append(note)
    if not texts:
        return None
    return textwrap.fill("  ".join(texts), max(40, int(fig.get_figwidth() * 13)))


def _finish(fig: Figure, provenance: pd.Series | None, note: str | None = None) -> None:
    """Lay the figure out with room for its footer below the axes' labels (so they never overlap),
    then write the footer there."""
    text = _footer_text(fig, provenance, note)
    lines = text.count("\n") + 1 if text else 0
    # 8 pt lines and a margin, as a fraction of the figure's height.
    bottom = min(0.4, (lines * 0.15 + (0.08 if lines else 0.02)) / fig.get_figheight())
    fig.tight_layout(rect=(0, bottom, 1, 1))
    if text:
        fig.text(0.01, 0.01, text, fontsize=8, color="#555555", ha="left", va="bottom")


def _empty(title: str, message: str) -> Figure:
    fig = Figure(figsize=(6, 1.6))
    ax = fig.add_subplot()
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.4, message, ha="center", va="center", fontsize=10, color="#555555", wrap=True)
    return fig


def ratio_dots(ratios: pd.DataFrame, *, title: str = "Ratio between legs, per model and workload") -> Figure:
    """Dot plot of ratios with their intervals, one row per (model, workload), one panel per kind.

    `ratios`: `harness.analyze.studies.dispersion.ratio_frame` columns — model, workload, kind, pair, ratio, low, high,
    verdict, provenance; optionally `r_low` / `r_high`, the interval the rounding of transcribed figures
    allows. Filled dots with bars: the rule's 95% interval (harness.analyze.verdicts). Hollow dots: single
    passes. A grey bar is the rounding interval; a row whose rounding interval contains 1.0x is drawn
    grey at its value, as "within rounding", so a rounding artifact never reads as a change. The dashed
    line is 1.0x (no change); right of it the newer leg is faster. The legend names only what is drawn.
    """
    df = ratios.dropna(subset=["ratio"])
    if df.empty:
        return _empty(title, "No ratio: the study has fewer than two legs with the same cell.")
    several = "series" in df.columns and df["series"].nunique() > 1
    df = df.assign(row=[f"{m} · {w}" + (f" ({s})" if several else "")
                        for m, w, s in zip(df["model"], df["workload"], df.get("series", df["model"]))])
    rounded = "r_low" in df.columns and df["r_low"].notna().any()
    # Kinds in table order (the registry's), any unregistered one after them.
    rank = {k: i for i, k in enumerate(KINDS)}
    kinds = sorted(dict.fromkeys(df["kind"]), key=lambda k: (rank.get(k, len(rank)), str(k)))
    pairs = list(dict.fromkeys(df["pair"]))
    colours = dict(zip(pairs, sns.color_palette("deep", len(pairs))))
    heights = [df[df["kind"] == k]["row"].nunique() for k in kinds]
    fig = Figure(figsize=(7, 1.4 + 0.3 * sum(heights) + 0.6 * len(kinds)))
    axes = fig.subplots(len(kinds), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    offsets = {p: (i - (len(pairs) - 1) / 2) * 0.22 for i, p in enumerate(pairs)}
    for ax, kind in zip(axes, kinds):
        d = df[df["kind"] == kind]
        rows = list(dict.fromkeys(d["row"]))
        y_of = {r: len(rows) - 1 - i for i, r in enumerate(rows)}
        for p in pairs:
            g = d[d["pair"] == p]
            if g.empty:
                continue
            y = np.array([y_of[r] for r in g["row"]]) + offsets[p]
            has_ci = g["low"].notna().to_numpy()
            noise = np.zeros(len(g), dtype=bool)
            if rounded:
                rl, rh = g["r_low"].to_numpy(dtype=float), g["r_high"].to_numpy(dtype=float)
                has_r = ~np.isnan(rl)
                noise = has_r & (rl <= 1.0) & (rh >= 1.0) & ~has_ci
                if has_r.any():
                    ax.hlines(y[has_r], rl[has_r], rh[has_r], color="#999999", lw=3, alpha=0.6,
                              label="rounding interval")
            if has_ci.any():
                ax.errorbar(g["ratio"][has_ci], y[has_ci],
                            xerr=[g["ratio"][has_ci] - g["low"][has_ci], g["high"][has_ci] - g["ratio"][has_ci]],
                            fmt="o", color=colours[p], ms=5, capsize=3, label=f"{p} (95% CI)")
            single = ~has_ci & ~noise
            if single.any():
                ax.plot(g["ratio"][single], y[single], "o", mfc="white", mec=colours[p], ms=5,
                        label=f"{p} (single pass)")
            if noise.any():
                ax.plot(g["ratio"][noise], y[noise], "o", mfc="#dddddd", mec="#888888", ms=5,
                        label="within rounding of 1.0x")
        ax.axvline(1.0, color="#777777", ls="--", lw=1)
        ax.set_yticks(range(len(rows)), [r for r in reversed(rows)], fontsize=8)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        higher = metric_of(kind).ratio_axis_label()
        ax.set_xlabel(f"ratio ({kind}; > 1.0x: {higher})", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(axis="x", alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        uniq = dict(zip(labels, handles))
        ax.legend(uniq.values(), uniq.keys(), fontsize=8, loc="best")
    axes[0].set_title(title, fontsize=10)
    _finish(fig, df["provenance"])
    return fig


def dispersion_strip(samples: pd.DataFrame, *, title: str = "Repeat dispersion per model") -> Figure:
    """Each repeat's deviation from its cell's median (%), per model: a box per model and leg with the
    repeats drawn over it. Cells with one repeat have no dispersion and are left out.

    `samples`: `harness.analyze.studies.diagnostics.samples_frame` columns — model, workload, leg_label, rel_dev,
    provenance (and series).
    """
    counts = samples.groupby(["series", "model", "workload", "leg_label"])["value"].transform("size")
    df = samples[counts > 1].dropna(subset=["rel_dev"])
    if df.empty:
        return _empty(title, "No cell has more than one repeat: there is no dispersion to show.")
    df = df.assign(pct=df["rel_dev"] * 100)
    models = list(dict.fromkeys(df["model"]))
    fig = Figure(figsize=(8, 1.4 + 0.55 * len(models)))
    ax = fig.add_subplot()
    sns.boxplot(data=df, x="pct", y="model", hue="leg_label", order=models, ax=ax, fliersize=0, linewidth=0.8,
                boxprops={"alpha": 0.35})
    # seaborn draws the jitter from numpy's global generator: seeded here, so the same data gives the
    # same picture (and a regenerated report the same bytes).
    state = np.random.get_state()
    np.random.seed(0)
    try:
        sns.stripplot(data=df, x="pct", y="model", hue="leg_label", order=models, ax=ax, dodge=True, size=4,
                      jitter=0.15, legend=False)
    finally:
        np.random.set_state(state)
    ax.axvline(0, color="#777777", lw=0.8)
    ax.set_xlabel("deviation of each repeat from its cell's median (%)")
    ax.set_ylabel("")
    ax.set_title(title)
    ax.legend(title="leg", fontsize=8, title_fontsize=8, loc="best")
    _finish(fig, df["provenance"], note=f"{df.groupby(['series', 'model', 'workload', 'leg_label']).ngroups} "
                                        "cells with repeats; every workload of a model shares its row.")
    return fig


def coverage_heatmap(coverage: pd.DataFrame, *, title: str = "Coverage: model x leg",
                     provenance: pd.Series | None = None) -> Figure:
    """model x leg grid coloured by outcome. `coverage`: `harness.analyze.studies.diagnostics.coverage_frame` (index:
    model, columns: leg labels, values: ok / partial / excluded / failed / not run)."""
    states = ["ok", "ok (pinned)", "partial", "excluded", "failed", "not run"]
    palette = [PASS, "#a6d49f", "#dd8452", "#8172b3", FAIL, "#dddddd"]
    if coverage.empty:
        return _empty(title, "No runs.")
    codes = coverage.apply(lambda col: col.map({s: i for i, s in enumerate(states)})).astype(float)
    fig = Figure(figsize=(max(4.5, 2.6 + 1.2 * coverage.shape[1]), 1.4 + 0.38 * coverage.shape[0]))
    ax = fig.add_subplot()
    # Wrapped to the figure's width, so a long title is never clipped at the edge.
    title = textwrap.fill(title, max(24, int(fig.get_figwidth() * 9)))
    cmap = ListedColormap(palette)
    sns.heatmap(codes, ax=ax, cmap=cmap, norm=BoundaryNorm(np.arange(-0.5, len(states)), cmap.N), cbar=False,
                annot=coverage.to_numpy(), fmt="", annot_kws={"fontsize": 8}, linewidths=0.5, linecolor="white")
    ax.set_xlabel("leg")
    ax.set_ylabel("")
    ax.set_title(title, fontsize=10)
    ax.tick_params(axis="y", labelsize=8)
    _finish(fig, provenance)
    return fig


def repeat_strip(samples: pd.DataFrame, *, title: str = "Repeats per leg") -> Figure:
    """One panel per workload: every repeat of each leg and its median (a bar).

    `samples`: `harness.analyze.studies.diagnostics.RepeatStudy.samples` — workload, leg_label, repeat, kind, value,
    provenance.
    """
    if samples.empty:
        return _empty(title, "No repeats.")
    workloads = list(dict.fromkeys(samples["workload"]))
    fig = Figure(figsize=(3.0 * len(workloads) + 0.6, 3.4))
    axes = fig.subplots(1, len(workloads), squeeze=False)[0]
    legs = list(dict.fromkeys(samples["leg_label"]))
    colours = dict(zip(legs, sns.color_palette("deep", len(legs))))
    for ax, w in zip(axes, workloads):
        d = samples[samples["workload"] == w]
        for i, lg in enumerate(legs):
            v = d.loc[d["leg_label"] == lg, "value"].to_numpy()
            if not len(v):
                continue
            x = i + np.linspace(-0.12, 0.12, len(v)) if len(v) > 1 else np.array([float(i)])
            ax.plot(x, v, "o", color=colours[lg], ms=6)
            ax.hlines(np.median(v), i - 0.25, i + 0.25, color=colours[lg], lw=2)
        ax.set_xticks(range(len(legs)), legs)
        ax.set_xlim(-0.6, len(legs) - 0.4)
        kind = d["kind"].iloc[0]
        ax.set_ylabel(metric_of(kind).axis_label())
        ax.set_title(w, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    several = samples.groupby(["workload", "leg_label"]).size().max() > 1
    _finish(fig, samples["provenance"], note="dots: repeats; bar: median" if several else "one pass per leg: dot and bar coincide")
    return fig


def ratio_vs_decode(table: pd.DataFrame, *, pair: str = "new/old",
                    title: str = "Ratio against how decode-bound the workload is") -> Figure:
    """Ratio of medians (with its 95% CI) against the workload's decode share, one point per workload.

    `table`: `harness.analyze.studies.diagnostics.RepeatStudy.table` — workload, ratio, ci_low, ci_high, decode_share,
    decode_share_source, provenance. Workloads whose records do not hold a decode share are listed
    in the footer instead of being placed anywhere.
    """
    have = table[table["decode_share"].notna() & table["ratio"].notna()]
    missing = table[table["decode_share"].isna()]["workload"].tolist()
    if have.empty:
        return _empty(title, "Decode share not recorded for these workloads "
                             f"({', '.join(missing)}): the records hold no prompt token counts.")
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    x = have["decode_share"].astype(float) * 100
    y = have["ratio"].astype(float)
    lo = (y - have["ci_low"].astype(float)).fillna(0).clip(lower=0)
    hi = (have["ci_high"].astype(float) - y).fillna(0).clip(lower=0)
    ax.errorbar(x, y, yerr=[lo, hi], fmt="o", capsize=4, color=sns.color_palette("deep")[0])
    for xi, yi, w, src in zip(x, y, have["workload"], have["decode_share_source"]):
        ax.annotate(w + ("" if src == "measured tokens" else " *"), (xi, yi), textcoords="offset points",
                    xytext=(6, 4), fontsize=9)
    ax.axhline(1.0, color="#777777", ls="--", lw=1)
    ax.set_xlabel("decode share: output tokens / all tokens of the workload (%)")
    ax.set_ylabel(f"ratio {pair} (> 1.0x: newer leg faster)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    notes = []
    if (have["decode_share_source"] != "measured tokens").any():
        notes.append("* share from declared lengths, not measured tokens")
    if missing:
        notes.append(f"not recorded: {', '.join(missing)}")
    _finish(fig, have["provenance"], note="; ".join(notes) or None)
    return fig


def arm_bars(arms: pd.DataFrame, *, unit: str = "tok/s", title: str = "Throughput per arm") -> Figure:
    """Horizontal bars: the median of each (leg, arm) with its repeats as dots; arms that did not run
    are drawn as an empty row labelled with their status (e.g. "refused").

    `arms`: `harness.analyze.studies.diagnostics.ArmTable.table` — leg_label, arm, value, samples, status, mode,
    provenance.
    """
    if arms.empty:
        return _empty(title, "No arms.")
    labels = [f"{lg} {a}" for lg, a in zip(arms["leg_label"], arms["arm"])]
    fig = Figure(figsize=(7.5, 1.2 + 0.42 * len(arms)))
    ax = fig.add_subplot()
    legs = list(dict.fromkeys(arms["leg_label"]))
    colours = dict(zip(legs, sns.color_palette("deep", len(legs))))
    ys = np.arange(len(arms))[::-1]
    top = max([v for v in arms["value"] if v is not None and not pd.isna(v)] or [1.0])
    for y, (_, r) in zip(ys, arms.iterrows()):
        if r["value"] is None or pd.isna(r["value"]):
            ax.text(top * 0.01, y, str(r["status"]), va="center", fontsize=8, color=FAIL)
            continue
        ax.barh(y, r["value"], color=colours[r["leg_label"]], alpha=0.75)
        if len(r["samples"]) > 1:
            ax.plot(r["samples"], [y] * len(r["samples"]), "k.", ms=4)
        mode = r["mode"] if isinstance(r["mode"], str) else ""
        ax.text(max(r["value"], *r["samples"]), y, f"  {r['value']:,.0f}" + (f"  {mode}" if mode else ""),
                va="center", fontsize=8)
    ax.set_yticks(ys, labels, fontsize=8)
    ax.set_xlabel(unit)
    ax.set_xlim(0, top * 1.3)
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    dots = any(len(x) > 1 for x in arms["samples"])
    _finish(fig, arms["provenance"], note="bar: median" + ("; dots: repeats" if dots else " (one pass per arm)")
            + "; text: prepare/finalize mode where logged")
    return fig


def falsification_heatmap(passed: pd.DataFrame, outcomes: pd.DataFrame, *, title: str = "Single-variable control",
                          provenance: tuple[str, ...] | pd.Series = ()) -> Figure:
    """arm x model grid: green where the run passed, red where it failed, grey where it did not run;
    each cell printed with its outcome ("rc=1"). `passed` / `outcomes`:
    `harness.analyze.studies.diagnostics.FalsificationMatrix.passed` / `.outcomes`."""
    if passed.empty:
        return _empty(title, "No runs.")
    codes = passed.apply(lambda col: col.map(lambda v: 1.0 if v is True or v is np.True_ else
                                             0.0 if v is False or v is np.False_ else np.nan)).astype(float)
    fig = Figure(figsize=(2.2 + 1.3 * passed.shape[1], 1.0 + 0.45 * passed.shape[0]))
    ax = fig.add_subplot()
    sns.heatmap(codes, ax=ax, cmap=ListedColormap([FAIL, PASS]), vmin=0, vmax=1, cbar=False,
                annot=outcomes.to_numpy(), fmt="", annot_kws={"fontsize": 9, "color": "white"},
                linewidths=0.5, linecolor="white", mask=codes.isna())
    ax.set_facecolor("#dddddd")
    ax.set_xlabel("model")
    ax.set_ylabel("")
    ax.set_title(title)
    _finish(fig, pd.Series(list(provenance)), note="green: passed; red: failed; grey: not run")
    return fig


__all__ = ["arm_bars", "coverage_heatmap", "dispersion_strip", "falsification_heatmap", "ratio_dots",
           "ratio_vs_decode", "repeat_strip"]


def serve_curve(curve: pd.DataFrame, *, model: str, device: str = "device",
                title: str = "Throughput vs interactivity") -> Figure:
    """One model's serving curve per leg: output tok/s per device against tok/s per user (one point per
    load point, labelled with its concurrency), the Pareto points ringed. Columns: leg, concurrency,
    tok_s_per_device, tok_s_per_user, pareto."""
    c = curve[curve["model"] == model] if len(curve) else curve
    if c.empty:
        return _empty(f"{title}: {model}", "No measured serving points.")
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    for (leg, g), color in zip(c.groupby("leg", sort=False), sns.color_palette("colorblind", c["leg"].nunique())):
        g = g.sort_values("tok_s_per_user")
        ax.plot(g["tok_s_per_user"], g["tok_s_per_device"], "-o", color=color, label=leg, ms=4)
        front = g[g["pareto"]]
        ax.scatter(front["tok_s_per_user"], front["tok_s_per_device"], s=90, facecolors="none", edgecolors=color)
        for _, r in g.iterrows():
            ax.annotate(f"c={int(r['concurrency'])}", (r["tok_s_per_user"], r["tok_s_per_device"]), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("tok/s per user (1000 / median TPOT)")
    ax.set_ylabel(f"output tok/s per {device}")
    ax.set_title(f"{title}: {model}")
    ax.legend(title="leg (ringed: Pareto points)", fontsize=8)
    _finish(fig, None, "Medians over repeats; each point is one load point (concurrency c).")
    return fig


def drift_scatter(frame: pd.DataFrame, summary: DriftSummary, *,
                  title: str = "Drift: each run's speed against the time it started") -> Figure:
    """Each timestamped repeat's speed relative to its cell's median (above 1 faster) against its start
    time, coloured by leg (marker by series when there are several); a line at 1.0, dotted lines at
    ±band, the largest slow episode shaded. Long pauses between sittings split the time axis into
    panels, so minutes stay readable across hours. The lines under the title give the trend (Spearman),
    how closely the legs of one repeat moved together (Pearson, over pairs) and the largest episode.

    `frame`: `harness.analyze.studies.drift.drift_frame` columns — series, time, leg_label, speed, provenance;
    `summary`: its `harness.analyze.studies.drift.DriftSummary`.
    """
    import matplotlib.dates as mdates
    from matplotlib.lines import Line2D

    if frame.empty:
        return _empty(title, "No repeated run recorded when it started: there is no drift to show.")
    df = frame.assign(t=frame["time"].dt.tz_convert("UTC").dt.tz_localize(None))
    panels = _sittings(df["t"])
    spans = [max((b - a).total_seconds(), 60.0) for a, b in panels]
    widths = [max(s, 0.15 * sum(spans)) for s in spans]
    fig = Figure(figsize=(min(11.0, 6.5 + 1.2 * (len(panels) - 1)), 4.2))
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True, gridspec_kw={"width_ratios": widths})[0]
    legs = list(dict.fromkeys(df.sort_values("leg_order", kind="stable")["leg_label"] if "leg_order" in df.columns
                              else df["leg_label"]))
    colours = dict(zip(legs, sns.color_palette("deep", len(legs))))
    series = list(dict.fromkeys(df["series"]))
    markers = dict(zip(series, "osD^vP*X" * 2))
    band = summary.band
    ep = summary.episode
    days = df["t"].dt.date.nunique() > 1
    for ax, (a, b), span in zip(axes, panels, spans):
        pad = pd.Timedelta(seconds=0.06 * span + 20)
        d = df[(df["t"] >= a) & (df["t"] <= b)]
        for (lg, s), g in d.groupby(["leg_label", "series"], sort=False):
            ax.plot(g["t"], g["speed"], markers[s], color=colours[lg], ms=5, alpha=0.85, ls="none")
        ax.axhline(1.0, color="#777777", lw=0.9)
        for y in (1 - band, 1 + band):
            ax.axhline(y, color="#999999", lw=0.8, ls=":")
        if ep is not None:
            lo, hi = ep.start.tz_convert("UTC").tz_localize(None), ep.end.tz_convert("UTC").tz_localize(None)
            if hi >= a and lo <= b:
                half = pd.Timedelta(seconds=0.02 * span + 10)
                ax.axvspan(lo - half, hi + half, color=FAIL, alpha=0.12, lw=0)
        ax.set_xlim(a - pad, b + pad)
        ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=2, maxticks=max(3, int(6 * span / max(spans)))))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
        ax.tick_params(axis="both", labelsize=8)
        ax.grid(alpha=0.3)
        if days or len(panels) > 1:
            ax.set_title(a.strftime("%Y-%m-%d") if days else f"from {a:%H:%M}", fontsize=8, color="#555555")
    axes[0].set_ylabel("speed ÷ its cell's median (> 1: faster)", fontsize=9)
    axes[0].set_xlabel("start time (UTC)", fontsize=9)
    handles = [Line2D([], [], marker="o", color=colours[lg], ls="none", label=lg) for lg in legs]
    if len(series) > 1:
        handles += [Line2D([], [], marker=markers[s], color="#555555", ls="none", label=s) for s in series]
    if ep is not None:
        from matplotlib.patches import Patch

        handles.append(Patch(color=FAIL, alpha=0.12, label=f"largest episode below {1 - band:.2f}"))
    axes[-1].legend(handles=handles, title="leg" + (" / series" if len(series) > 1 else ""), fontsize=7,
                    title_fontsize=7, loc="best")
    # The statistics wrapped to the figure's width, so they are never clipped at its edges.
    fig.suptitle(title + "\n" + textwrap.fill(_drift_line(summary), int(fig.get_figwidth() * 14)), fontsize=9)
    _finish(fig, df["provenance"],
            note=f"Speed: each run's figure ÷ the median of its cell's repeats (ms per token inverted); dotted: "
                 f"±{band:.0%}. {len(df)} runs of cells with repeats; runs without a start time are not drawn.")
    return fig


def _sittings(times: pd.Series, *, gap: pd.Timedelta = pd.Timedelta(minutes=30),
              most: int = 6) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """(first, last) time of each sitting: runs split at pauses longer than `gap`, at most `most` panels
    (only the longest pauses split)."""
    t = times.sort_values().reset_index(drop=True)
    pauses = t.diff().iloc[1:]
    cut = sorted(i for i in pauses[pauses > gap].sort_values(ascending=False).index[:most - 1])
    edges = [0, *cut, len(t)]
    return [(t.iloc[i], t.iloc[j - 1]) for i, j in zip(edges, edges[1:])]


def _drift_line(summary: DriftSummary) -> str:
    """The statistics the drift figure's title carries, or "too few" where they would say nothing."""
    tr, co, ep = summary.trend, summary.comovement, summary.episode
    if tr.rho is not None:
        trend = f"speed vs time: Spearman ρ = {tr.rho:+.2f} (p = {tr.p:.2g}, n = {tr.n})"
    else:
        trend = f"speed vs time: {'too few runs' if tr.too_few else 'no variation'} (n = {tr.n})"
    if co.r is not None:
        legs = f"legs of one repeat together: r = {co.r:+.2f} over {co.n} pairs"
    else:
        legs = f"legs of one repeat together: {'too few pairs' if co.too_few else 'no variation'} ({co.n} pairs)"
    worst = (f"no run below {1 - summary.band:.2f}" if ep is None else
             f"largest episode: {ep.n} run{'s' if ep.n != 1 else ''} of {', '.join(ep.legs)}, "
             f"down to {ep.min_speed:.2f}")
    return "; ".join([trend, legs, worst])


def history_lines(points: pd.DataFrame, *, title: str, unit: str, change_points: Sequence[str] = (),
                  levels: Sequence[float] = ()) -> Figure:
    """One (model, workload)'s metric over releases (`points`: label, value, low, high, in release order;
    a release without a value is a gap), each release's interval, the fitted levels as a step line and
    the releases that start a new level marked by dashed lines."""
    fig = Figure(figsize=(7, 3.2))
    ax = fig.add_subplot()
    x = np.arange(len(points))
    ok = points["value"].notna().to_numpy()
    v = points["value"].to_numpy(dtype=float)
    lo = points["low"].fillna(points["value"]).to_numpy(dtype=float)
    hi = points["high"].fillna(points["value"]).to_numpy(dtype=float)
    # The interval is the geometric mean's and the dot the canonical value (a median): drawn apart, as the
    # dot need not lie at the interval's centre.
    ax.vlines(x[ok], lo[ok], hi[ok], color="#4c72b0", linewidth=2, alpha=0.5)
    ax.plot(x[ok], v[ok], "o", color="#4c72b0")
    labels = points["label"].astype(str).tolist()
    for leg in change_points:
        if leg in points["leg"].tolist():
            i = points["leg"].tolist().index(leg)
            ax.axvline(i - 0.5, color=FAIL, linestyle="--", linewidth=1)
    if len(levels) and ok.any():
        idx = list(x[ok])
        starts = [0] + [idx.index(points["leg"].tolist().index(leg)) for leg in change_points
                        if points["leg"].tolist().index(leg) in idx]
        ends = starts[1:] + [len(idx)]
        for level, a, b in zip(levels, starts, ends):
            ax.hlines(level, idx[a] - 0.3, idx[b - 1] + 0.3, color="#555555", linewidth=1.5)
    for i in x[~ok]:
        ax.text(i, np.nanmin(v) if ok.any() else 0, "×", ha="center", va="center", color=FAIL, fontsize=14)
    ax.set_xticks(x, labels)
    ax.set_xlabel("release")
    ax.set_ylabel(unit)
    ax.set_title(title)
    _finish(fig, None, "dashed: a new level starts (step detection); grey: the fitted levels; ×: not measured")
    return fig


def latency_vs_load(probes: pd.DataFrame, *, model: str, workload: str,
                    bounds: Sequence[tuple[str, float, float]] = (), capacities: dict[str, float] | None = None,
                    labels: dict[str, str] | None = None) -> Figure:
    """A capacity search's latency-vs-load curve: p50/p90/p99 TTFT and TPOT (ms, log scale) against
    the offered load, every probe of every repeat as a dot (one line per leg and percentile through the
    median at each probed load), the SLO's bounds as horizontal lines and each leg's capacity as a dotted vertical.
    `probes`: harness.analyze.capacity.probes columns; `bounds`: (metric, p, max) as declared."""
    p = probes[(probes["model"] == model) & (probes["workload"] == workload)] if len(probes) else probes
    title = f"Latency vs load: {model} / {workload}"
    if p.empty:
        return _empty(title, "No capacity probe was measured.")
    axis = str(p["axis"].iloc[0])
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    fig = Figure(figsize=(11.0, 3.8))
    axes = fig.subplots(1, 3, sharex=True)
    legs = list(dict.fromkeys(p["leg"]))
    colours = dict(zip(legs, sns.color_palette("colorblind", len(legs))))
    styles = {"p50": ":", "p90": "--", "p99": "-"}
    for ax, metric, name in zip(axes, ("ttft", "tpot"), ("TTFT", "TPOT")):
        for leg in legs:
            g = p[p["leg"] == leg].sort_values("value")
            for q, ls in styles.items():
                col = f"{metric}_{q}_ms"
                ok = g[g[col].notna()]
                # Every probe as a dot; the line through the median at each probed load, so that the
                # repeats' probes at one load do not draw a zig-zag between them.
                ax.plot(ok["value"], ok[col], "o", ms=2.5, color=colours[leg], alpha=0.6)
                med = ok.groupby("value")[col].median()
                ax.plot(med.index, med.values, ls, color=colours[leg], lw=1,
                        label=f"{(labels or {}).get(leg, leg)} {q}")
            if capacities and capacities.get(leg):
                ax.axvline(capacities[leg], color=colours[leg], ls=":", lw=1)
        for m, q, mx in bounds:
            if m == f"{metric}_ms":
                ax.axhline(mx, color="#b2182b", lw=1.2)
                ax.annotate(f"SLO p{q:g} ≤ {mx:g} ms", (0.02, mx), xycoords=("axes fraction", "data"), fontsize=7,
                            color="#b2182b", xytext=(0, 3), textcoords="offset points")
        ax.set_xscale("log" if axis == "request_rate" else "linear")
        if axis == "request_rate":
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_yscale("log")
        # Plain numbers at 1, 2, 5 per decade: a bound of 50 ms reads as 50, not 5 x 10^1.
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("offered rate (requests/s)" if axis == "request_rate" else "concurrency (requests in flight)")
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(name)
    ax = axes[2]
    for leg in legs:
        g = p[p["leg"] == leg].sort_values("value")
        ax.plot(g["value"], g["goodput_req_s"], "o", ms=2.5, alpha=0.6, color=colours[leg])
        med = g.groupby("value")["goodput_req_s"].median()
        ax.plot(med.index, med.values, "-", lw=1, color=colours[leg], label=(labels or {}).get(leg, leg))
        if capacities and capacities.get(leg):
            ax.axvline(capacities[leg], color=colours[leg], ls=":", lw=1)
    if axis == "request_rate":
        lim = [p["value"].min(), p["value"].max()]
        ax.plot(lim, lim, color="#999999", lw=0.8, ls="--", label="goodput = offered")
    ax.set_xlabel(axes[0].get_xlabel())
    ax.set_ylabel("goodput (req/s)")
    ax.set_title("Goodput")
    ax.legend(fontsize=7)
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle(title, fontsize=10)
    _finish(fig, None, "Every probe of every repeat as a dot, lines through the median at each probed load (p50 dotted, p90 dashed, p99 solid); red: the SLO's bound; "
            "dotted verticals: each leg's median capacity; goodput counts the requests meeting every bound.")
    return fig


def half_pass_lines(pts: pd.DataFrame, servers: pd.DataFrame, *, model: str, workload: str,
                    labels: dict[str, str] | None = None) -> Figure:
    """Per SLO bound, every probe's p99 against its offered rate (log-log), one colour per leg and one
    marker per server, each server's fitted line (harness.analyze.halfpass: it meets the bound at the
    server's crossing) and the bound. `pts`: analyze.serve.points; `servers`: analyze.halfpass.per_server."""
    p = pts[(pts["model"] == model) & (pts["workload"] == workload)]
    s = servers[(servers["model"] == model) & (servers["workload"] == workload)]
    title = f"Half-pass rate per server: {model} / {workload}"
    if p.empty or s.empty:
        return _empty(title, "No steady-state grid was measured.")
    fig = Figure(figsize=(10.0, 3.8))
    axes = fig.subplots(1, 2, sharex=True)
    legs = list(dict.fromkeys(s["leg"]))
    colours = dict(zip(legs, sns.color_palette("colorblind", len(legs))))
    markers, lines = "osD^v<>", ("-", "--", ":", "-.")
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter
    xs = np.geomspace(p["request_rate"].min() * 0.9, p["request_rate"].max() * 1.1, 50)
    for ax, short, col, bound_col in zip(axes, ("ttft", "tpot"), ("ttft_p99_ms", "tpot_p99_ms"),
                                         ("slo_ttft_ms", "slo_tpot_ms")):
        bound = float(p[bound_col].iloc[0])
        for r in s.itertuples():
            g = p[(p["leg"] == r.leg) & (p["repeat"] == r.server)]
            name = f"{(labels or {}).get(r.leg, r.leg)} server {r.server}"
            ax.plot(g["request_rate"], g[col], markers[(r.server - 1) % len(markers)], ms=4, alpha=0.7,
                    color=colours[r.leg], label=name)
            slope, cross = getattr(r, f"{short}_slope"), getattr(r, f"{short}_crossing")
            if cross is not None and np.isfinite(cross) and cross > 0:
                # The fitted line, drawn from its slope and the rate where it meets the bound.
                ax.plot(xs, bound * (xs / cross) ** slope, lines[(r.server - 1) % len(lines)], lw=1,
                        color=colours[r.leg], alpha=0.8)
        ax.axhline(bound, color="#b2182b", lw=1.2)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):   # plain numbers at 1, 2, 5 per decade
            axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("offered rate (requests/s)")
        ax.set_ylabel(f"p99 {short.upper()} (ms)")
        ax.set_title(f"p99 {short.upper()} (SLO ≤ {bound:g} ms)")
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    _finish(fig, None, "Each probe's p99 as a marker; each server's least-squares line of log p99 on log rate; red: the "
            "SLO's bound; a server's line style and marker name it. A server's half-pass rate is the lowest rate at which one of its "
            "lines meets its bound.")
    return fig
