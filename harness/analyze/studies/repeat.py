"""The repeat study: one model measured several times on two legs ("Is the 0.26 regression real?").

Repeats per leg, median, spread, the gap between the medians against the spread, the ratio's
significance rule's interval (`harness.analyze.stats.ratio`), how decode-bound each workload is, and checks of
a spread claim and of the main table's single pass against the repeats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.analyze.canonical import canonicalize, provenance_note
from harness.analyze.dataset import Dataset
from harness.analyze.stats import ALPHA, METHOD, footnote, ratio
from harness.analyze.tables import MISSING, fmt_ci, fmt_ratio, row_key, short_labels
from harness.core.errors import UserError
from harness.analyze.studies.common import (fmt_pct, fmt_value, is_present, leg_pair, mad, names, pick_one,
                                        record_of, series_records)
from harness.schema.record import RunRecord
from harness.workloads import metric_of


def decode_share(rec: RunRecord) -> tuple[float | None, str]:
    """How decode-bound the run's workload is: output tokens as a share of all tokens, and where the
    numbers come from.

    Measured time comes first: the share of each request's time spent decoding (first to last token)
    against time to first token, from vLLM's request stats (`phases`, harness.measure.worker.kernel_trace).
    Then the tokens the run actually processed (`work`). Without them, the workload's declared
    lengths (`workload_spec`); for an image, video or audio workload those count only the text part of
    the prompt, so the share is an upper bound and says so. Transcribed records usually hold neither.
    """
    if rec.phases is not None and rec.phases.decode_share is not None:
        return rec.phases.decode_share, "measured decode time"
    p, o = rec.work.prompt_tokens, rec.work.output_tokens
    if p is not None and o is not None and p + o > 0:
        return o / (p + o), "measured tokens"
    spec = rec.workload_spec
    i, out = spec.get("input_len"), spec.get("output_len")
    if isinstance(i, int) and isinstance(out, int) and i + out > 0:
        modality = spec.get("modality", "text")
        if modality == "text":
            return out / (i + out), "declared lengths"
        return out / (i + out), f"declared text lengths only ({modality} tokens not counted: an upper bound)"
    return None, "not recorded"


# --- the repeat study ------------------------------------------------------------------------------

SIGNAL_RULE = (f"a workload's difference is signal when the project's one significance rule ({METHOD}, "
               f"α={ALPHA:g}, harness.analyze.significance) calls it faster or slower; the gap and the repeat "
               "spreads are shown beside it, not decided on")


@dataclass(frozen=True, kw_only=True)
class RepeatStudy:
    """`table`: numbers, one row per workload. `display`: the study's repeat table as printed, with
    the interval, spreads and gap-vs-spread beside it. `samples`: one row per repeat."""

    study: str
    series: str
    model: str
    old: str
    new: str
    old_label: str
    new_label: str
    table: pd.DataFrame
    display: pd.DataFrame
    samples: pd.DataFrame
    exclusions: pd.DataFrame
    notes: tuple[str, ...]

    @property
    def ratio_label(self) -> str:
        return pair_label(self.old_label, self.new_label)


def pair_label(old_label: str, new_label: str) -> str:
    """The study's ratio heading: "26/18" for legs labelled 0.18 and 0.26."""
    short = short_labels([old_label, new_label])
    return f"{short[new_label]}/{short[old_label]}"


def repeat_study(ds: Dataset, *, series: str, model: str | None = None, legs: str | Sequence[str] = (),
                 workloads: str | Sequence[str] = (), arm: str = "default",
                 main_series: str | None = None) -> RepeatStudy:
    """The repeat table of `model` in `series` between two legs (old first).

    Repeats are the canonical runs of the series (`harness.analyze.canonical`'s rule: ok, clean, not reused
    unless the study allows it, same work); the ratio is new/old for throughput and old/new for
    latency (above 1.00x the new leg is faster), with `harness.analyze.stats.ratio`'s interval (the one significance rule).
    `main_series` (default: the study's) adds each leg's single-pass value from the main table.
    """
    where = f"{ds.root} series {series}"
    recs = series_records(ds, series)
    recs = recs[recs["arm"] == arm]
    if recs.empty:
        raise UserError(f"{where}: no records of arm {arm!r}")
    model = pick_one(recs["model"], model, "model", where)
    recs = recs[recs["model"] == model]
    old, new = leg_pair(ds, list(dict.fromkeys(recs["leg"])), names(legs), where)
    canon = canonicalize(ds, series=series, arm=arm)
    wanted = names(workloads)
    for w in wanted:
        if w not in set(recs["workload"]):
            raise UserError(f"{where}: no workload {w!r} for {model} (has: {', '.join(dict.fromkeys(recs['workload']))})")
    key = row_key(ds)
    wl_order = sorted((w for w in dict.fromkeys(recs["workload"]) if not wanted or w in wanted),
                      key=lambda w: key(model, w))
    old_label, new_label = ds.study.label(old), ds.study.label(new)

    runs = canon.runs
    runs = runs[(runs["model"] == model) & runs["leg"].isin([old, new]) & runs["workload"].isin(wl_order)]
    samples = pd.DataFrame({
        "workload": runs["workload"], "leg": runs["leg"], "leg_label": [ds.study.label(x) for x in runs["leg"]],
        "repeat": runs["repeat"], "kind": runs["kind"],
        "value": [float(r[metric_of(r["kind"]).key]) for r in runs.to_dict("records")],
        "provenance": runs["provenance"], "run_dir": runs["run_dir"],
    })
    rank = {w: i for i, w in enumerate(wl_order)} | {old: 0, new: 1}
    samples = samples.assign(_w=samples["workload"].map(rank), _l=samples["leg"].map(rank)).sort_values(
        ["_w", "_l", "repeat"]).drop(columns=["_w", "_l"]).reset_index(drop=True)

    main_cells = pd.DataFrame()
    main_series = main_series if main_series is not None else ds.study.main_series
    if main_series and main_series != series and (ds.records["series"] == main_series).any():
        main_cells = canonicalize(ds, series=main_series).cells

    rows, disp = [], []
    for w in wl_order:
        cell = {lg: canon.cells[(canon.cells["leg"] == lg) & (canon.cells["model"] == model)
                                & (canon.cells["workload"] == w)] for lg in (old, new)}
        known = recs.loc[recs["workload"] == w, "kind"].dropna()
        kind = next((c["kind"].iloc[0] for c in cell.values() if len(c)), None) or \
            (known.iloc[0] if len(known) else "throughput")
        s_old = tuple(cell[old]["samples"].iloc[0]) if len(cell[old]) else ()
        s_new = tuple(cell[new]["samples"].iloc[0]) if len(cell[new]) else ()
        r = ratio(s_old, s_new, higher_is_better=metric_of(kind).higher_is_better)
        m_old = float(np.median(s_old)) if s_old else None
        m_new = float(np.median(s_new)) if s_new else None
        gap = max(m_old, m_new) / min(m_old, m_new) - 1 if m_old and m_new else None
        spreads = [x for x in (r.spread_old, r.spread_new) if x is not None]
        widest = max(spreads) if spreads else None
        gap_over = gap / widest if gap is not None and widest else None
        differs = r.low is not None and (r.low > 1 or r.high < 1)
        signal = None if r.low is None else bool(differs)
        wl_runs = runs[runs["workload"] == w]
        share, source = None, "not recorded"
        if len(wl_runs):
            share, source = decode_share(record_of(ds, wl_runs["run_dir"].iloc[0]))
        out_per_seq = None
        if len(wl_runs) and is_present(wl_runs["output_tokens"].iloc[0]) and is_present(wl_runs["num_seqs"].iloc[0]):
            out_per_seq = float(wl_runs["output_tokens"].iloc[0]) / float(wl_runs["num_seqs"].iloc[0])
        row: dict[str, Any] = {
            "workload": w, "kind": kind, "unit": metric_of(kind).unit,
            "old_samples": s_old, "old_n": len(s_old), "old_median": m_old,
            "old_spread": r.spread_old, "old_mad": mad(s_old),
            "new_samples": s_new, "new_n": len(s_new), "new_median": m_new,
            "new_spread": r.spread_new, "new_mad": mad(s_new),
            "ratio": r.value, "ci_low": r.low, "ci_high": r.high, "verdict": r.verdict,
            "gap": gap, "widest_spread": widest, "gap_over_spread": gap_over, "signal": signal,
            "decode_share": share, "decode_share_source": source, "output_tokens_per_seq": out_per_seq,
            "provenance": ",".join(sorted(set(wl_runs["provenance"]))) if len(wl_runs) else "",
        }
        for side, lg, med in (("old", old, m_old), ("new", new, m_new)):
            mc = main_cells[(main_cells["leg"] == lg) & (main_cells["model"] == model)
                            & (main_cells["workload"] == w)] if len(main_cells) else main_cells
            main_v = float(mc["value"].iloc[0]) if len(mc) else None
            row[f"{side}_main"] = main_v
            row[f"{side}_vs_main"] = med / main_v - 1 if main_v and med else None
        rows.append(row)
        label = pair_label(old_label, new_label)
        disp.append({
            "workload": w,
            f"{old_label} ({len(s_old)} reps)": " / ".join(fmt_value(v, kind) for v in s_old) or MISSING,
            f"{old_label} median": fmt_value(m_old, kind),
            f"{new_label} ({len(s_new)} reps)": " / ".join(fmt_value(v, kind) for v in s_new) or MISSING,
            f"{new_label} median": fmt_value(m_new, kind),
            label: fmt_ratio(r), "95% CI": fmt_ci(r) or MISSING, "verdict": r.verdict,
            "spread (range/median)": f"{fmt_pct(r.spread_old)} / {fmt_pct(r.spread_new)}",
            "spread (MAD/median)": f"{fmt_pct(mad(s_old))} / {fmt_pct(mad(s_new))}",
            "gap": fmt_pct(gap),
            "gap / spread": MISSING if gap_over is None else f"{gap_over:.1f}x",
            "decode share": fmt_pct(share, 0) + (" *" if share is not None and not source.startswith("measured") else ""),
        })
    excl = canon.exclusions
    excl = excl[(excl["model"] == model) & excl["leg"].isin([old, new]) & excl["workload"].isin(wl_order)]
    table = pd.DataFrame(rows)
    notes = [n for n in (provenance_note(canon),) if n]
    notes.append(f"Ratio {pair_label(old_label, new_label)}: "
                 "ratio of medians, above 1.00x the newer leg is faster (harness.analyze.stats.ratio).")
    notes.append(footnote())
    notes.append("Spread: (max - min) / median of a leg's repeats (harness.analyze.stats.spread); MAD: median absolute "
                 "deviation / median. Gap: the larger median over the smaller, minus 1.")
    sources = sorted(set(table["decode_share_source"])) if len(table) else []
    starred = any(s not in ("measured tokens", "measured decode time", "not recorded") for s in sources)
    notes.append("Decode share: decode time / (time to first token + decode time) per request, median, where vLLM's "
                 "request stats were recorded (measured decode time); otherwise output tokens / (prompt + output "
                 "tokens) of the workload; source: "
                 + "; ".join(sources) + (" (* not from measured tokens)" if starred else "") + ".")
    if len(excl):
        notes.append(f"{len(excl)} run(s) left out by the canonical rule; see `exclusions`.")
    fewest = min([n for n in (*table.get("old_n", []), *table.get("new_n", [])) if n > 0], default=0)
    if 0 < fewest < 3:
        notes.append(f"Only {fewest} repeat(s) on a side: the rule's interval is wide and only a gap large against "
                     "the spread reaches a verdict (docs/statistics.md).")
    return RepeatStudy(study=ds.study.name, series=series, model=model, old=old, new=new, old_label=old_label,
                       new_label=new_label, table=table, display=pd.DataFrame(disp), samples=samples,
                       exclusions=excl.reset_index(drop=True), notes=tuple(notes))


def repeat_conclusion(study: RepeatStudy) -> list[str]:
    """One sentence per workload, by SIGNAL_RULE, then what the decode shares allow to say."""
    out = []
    lab = study.ratio_label
    for r in study.table.itertuples():
        if r.ratio is None or not is_present(r.ratio):
            out.append(f"{r.workload}: no ratio (a leg has no canonical repeat).")
            continue
        ci = f" [{r.ci_low:.2f}, {r.ci_high:.2f}]" if is_present(r.ci_low) else ""
        head = f"{r.workload}: {lab} = {r.ratio:.2f}x{ci}, {r.verdict}"
        if r.gap_over_spread is None or not is_present(r.gap_over_spread):
            out.append(head + f"; {r.old_n} and {r.new_n} repeat(s), so no spread to weigh the gap against.")
            continue
        weigh = (f"the medians differ by {r.gap:.1%}, the larger repeat spread is {r.widest_spread:.1%} "
                 f"(gap {r.gap_over_spread:.1f}x the spread)")
        verdict = "signal, not noise" if r.signal else "not distinguishable from the repeat spread"
        out.append(f"{head}; {weigh}: {verdict}.")
    t = study.table
    have = t[t["decode_share"].map(is_present) & t["ratio"].map(is_present)] if len(t) else t
    if len(have) >= 2:
        rho = have["decode_share"].rank().corr(have["ratio"].rank())
        order = ", ".join(f"{r.workload} {r.decode_share:.0%} -> {r.ratio:.2f}x"
                          for r in have.sort_values("decode_share").itertuples())
        direction = ("falls as the workload is more decode-bound" if rho < 0 else
                     "rises as the workload is more decode-bound" if rho > 0 else "does not move with decode share")
        few = (f"; with {len(have)} workloads any order is a perfect rank correlation, so this shows the order, "
               "not a trend") if len(have) < 3 else ""
        # The order of the ratios is only evidence where the ratios themselves are: with every
        # ratio inside the repeat noise, a rank correlation over them describes that noise.
        moved = have["verdict"].isin(["faster", "slower"]).any()
        noise = ("" if moved else "; no ratio among them differs from 1.00 by the significance rule, so this order "
                 "is read from the repeat noise and is no evidence either way")
        out.append(f"Against decode share ({order}): the ratio {direction} (Spearman rank correlation "
                   f"{rho:+.2f} over {len(have)} workloads{few}{noise}).")
    elif len(t):
        tok = ", ".join(f"{r.workload} {r.output_tokens_per_seq:,.0f}" for r in t.itertuples()
                        if is_present(r.output_tokens_per_seq))
        out.append("Decode share: these records do not hold the prompt tokens of the work, so how decode-bound "
                   "each workload is cannot be computed from them" + (f" (output tokens per sequence: {tok})" if tok else "")
                   + ".")
    return out


def spread_check(study: RepeatStudy, limit: float) -> pd.DataFrame:
    """Every (workload, leg) repeat spread against `limit` (a claim such as "spread under 1.5%"),
    under both measures: range/median (harness.analyze.stats.spread) and MAD/median."""
    rows = []
    for r in study.table.itertuples():
        for side, label in (("old", study.old_label), ("new", study.new_label)):
            for measure_name, col in (("range/median", f"{side}_spread"), ("MAD/median", f"{side}_mad")):
                v = getattr(r, col)
                rows.append({"workload": r.workload, "leg": label, "measure": measure_name, "spread": v,
                             "under_limit": bool(v < limit) if is_present(v) else None})
    return pd.DataFrame(rows, columns=["workload", "leg", "measure", "spread", "under_limit"])


def spread_check_text(study: RepeatStudy, limit: float) -> list[str]:
    """Per measure: where the spread is under `limit` and where it is not."""
    chk = spread_check(study, limit)
    out = []
    for measure_name, g in chk.groupby("measure", sort=False):
        g = g.dropna(subset=["spread"])
        over = g[~g["under_limit"].astype(bool)]
        if over.empty:
            out.append(f"{measure_name}: every leg and workload under {limit:.1%} "
                       f"(largest {g['spread'].max():.1%}).")
        else:
            out.append(f"{measure_name}: over {limit:.1%} for " + ", ".join(
                f"{r.leg} {r.workload} ({r.spread:.1%})" for r in over.itertuples()) + "; under it for the rest.")
    return out


def main_table_check(study: RepeatStudy) -> list[str]:
    """How far each repeat median lands from the main table's single pass."""
    out = []
    t = study.table
    for side, label in (("old", study.old_label), ("new", study.new_label)):
        for r in t.itertuples():
            main, med, d = getattr(r, f"{side}_main"), getattr(r, f"{side}_median"), getattr(r, f"{side}_vs_main")
            if is_present(main) and is_present(med):
                out.append(f"{label} {r.workload}: median of repeats {fmt_value(med, r.kind)} vs main table "
                           f"{fmt_value(main, r.kind)} ({d:+.1%})")
    return out
