"""The study's diagnostic sub-studies as plain functions; the notebooks in `notebooks/` call these.

- `repeat_study`: one model measured several times on two legs ("Is the 0.26 regression real?"):
  repeats per leg, median, spread, the gap between the medians against the spread, the ratio's
  bootstrap interval (`harness.analyze.stats.ratio`), and how decode-bound each workload is.
- `arm_table` / `arm_conclusion`: forced-backend arms ("The MoE kernel is not the explanation"):
  throughput per (leg, arm), the MoE routing each run logged (prepare/finalize class, SM split),
  and refused arms with their refusal.
- `falsification_matrix` / `single_variable_conclusion`: arm x model -> exit status, and which
  single change flips every outcome of the baseline row ("The cutlass chain, end to end").
- `samples_frame` / `dispersion_frame` / `ratio_frame` / `coverage_frame`: dispersion and ratios of
  every model and leg of a study ("Known limitations").
- `measure`: launches a diagnostic's sweep through `harness.measure.sweep`, waiting for the node lock.

Everything is computed from the records; transcribed figures keep `provenance` in every frame so
that tables and figures can label them.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.measure import guard

from harness.core import paths
from harness.analyze.canonical import METRIC, UNIT, Canonical, canonicalize, provenance_note
from harness.analyze.dataset import Dataset, read_record
from harness.core.errors import UserError
from harness.analyze.failure import signature
from harness.schema.record import RunRecord
from harness.analyze.stats import Ratio, ratio, spread
from harness.analyze.tables import MISSING, fmt_ci, fmt_ratio, model_order, row_key, short_labels

# --- small helpers --------------------------------------------------------------------------------


def names(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """A list parameter as given on a papermill command line: "a,b", ["a", "b"], "" or None."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(x.strip() for x in value.split(",") if x.strip())
    return tuple(str(x) for x in value)


def study_path(results_dir: str | Path) -> Path:
    """A study folder given relative to the project root (how the notebooks name them) or absolute."""
    p = Path(results_dir)
    if p.is_absolute() or p.exists():
        return p
    return paths.PROJ_ROOT / p


def _present(v: object) -> bool:
    return v is not None and not (isinstance(v, float) and np.isnan(v))


def _record(ds: Dataset, run_dir: str) -> RunRecord:
    return read_record(ds.root / run_dir / "results.json")


def _log(ds: Dataset, run_dir: str) -> str:
    try:
        return (ds.root / run_dir / "run.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def fmt_value(v: float | None, kind: str) -> str:
    if not _present(v):
        return MISSING
    return f"{v:,.0f}" if kind == "throughput" else f"{v:.2f}"


def fmt_pct(v: float | None, digits: int = 1) -> str:
    return MISSING if not _present(v) else f"{v * 100:.{digits}f}%"


def mad(samples: Sequence[float]) -> float | None:
    """Median absolute deviation from the median, relative to the median (robust to one outlier)."""
    a = np.asarray(samples, dtype=float)
    if len(a) < 2:
        return None
    med = float(np.median(a))
    return float(np.median(np.abs(a - med)) / med)


def _scenario_order(scenario: str | None) -> tuple[list[str], list[str], list[str]]:
    """(models, workloads, arms) in the scenario's order; empty lists without a scenario."""
    if not scenario:
        return [], [], []
    from harness.measure.scenario import load_scenario

    sc = load_scenario(scenario)
    return [m.name for m in sc.models], [w.name for w in sc.workloads], [a.name for a in sc.arms]


def scenario_series(scenario: str | None, default: str = "") -> str:
    """The series a scenario's sweep records under (its `series:`, else its name)."""
    if not scenario:
        return default
    from harness.measure.scenario import load_scenario

    return load_scenario(scenario).series_tag


def _ordered(found: Sequence[str], preferred: Sequence[str]) -> list[str]:
    found = list(dict.fromkeys(found))
    return [x for x in preferred if x in found] + [x for x in found if x not in preferred]


def _series_records(ds: Dataset, series: str) -> pd.DataFrame:
    df = ds.records
    sel = df[df["series"] == series]
    if sel.empty:
        have = ", ".join(sorted(set(df["series"]))) or "none"
        raise UserError(f"{ds.root}: no records of series {series!r} (series there: {have})")
    return sel


def _pick_one(values: Sequence[str], wanted: str | None, what: str, where: str) -> str:
    values = list(dict.fromkeys(values))
    if wanted:
        if wanted not in values:
            raise UserError(f"{where}: no {what} {wanted!r} (has: {', '.join(values)})")
        return wanted
    if len(values) != 1:
        raise UserError(f"{where}: {len(values)} {what}s ({', '.join(values)}); name one")
    return values[0]


def _leg_pair(ds: Dataset, present: Sequence[str], legs: Sequence[str], where: str) -> tuple[str, str]:
    """(old, new): the legs given, or the study's two legs that the records have, in study order."""
    if legs:
        for lg in legs:
            if lg not in present:
                raise UserError(f"{where}: no records of leg {lg!r} (has: {', '.join(present)})")
        if len(legs) != 2:
            raise UserError(f"{where}: legs: expected two (old,new), got {len(legs)}")
        return legs[0], legs[1]
    ordered = _ordered(present, ds.study.leg_names)
    if len(ordered) != 2:
        raise UserError(f"{where}: {len(ordered)} legs ({', '.join(ordered)}); name two as legs=old,new")
    return ordered[0], ordered[1]


# --- decode-boundness ------------------------------------------------------------------------------

def decode_share(rec: RunRecord) -> tuple[float | None, str]:
    """How decode-bound the run's workload is: output tokens as a share of all tokens, and where the
    numbers come from.

    The tokens the run actually processed (`work`) come first. Without them, the workload's declared
    lengths (`workload_spec`); for an image, video or audio workload those count only the text part of
    the prompt, so the share is an upper bound and says so. Transcribed records usually hold neither.
    """
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

SIGNAL_RULE = ("a workload's difference is signal when the 95% bootstrap interval of the ratio of medians "
               "excludes 1.0 and the gap between the medians is larger than the larger repeat spread "
               "(range/median) of the two legs")


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
    latency (above 1.00x the new leg is faster), with `harness.analyze.stats.ratio`'s bootstrap interval.
    `main_series` (default: the study's) adds each leg's single-pass value from the main table.
    """
    where = f"{ds.root} series {series}"
    recs = _series_records(ds, series)
    recs = recs[recs["arm"] == arm]
    if recs.empty:
        raise UserError(f"{where}: no records of arm {arm!r}")
    model = _pick_one(recs["model"], model, "model", where)
    recs = recs[recs["model"] == model]
    old, new = _leg_pair(ds, list(dict.fromkeys(recs["leg"])), names(legs), where)
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
        "value": [float(r[METRIC[r["kind"]]]) for r in runs.to_dict("records")],
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
        r = ratio(s_old, s_new, higher_is_better=(kind == "throughput"))
        m_old = float(np.median(s_old)) if s_old else None
        m_new = float(np.median(s_new)) if s_new else None
        gap = max(m_old, m_new) / min(m_old, m_new) - 1 if m_old and m_new else None
        spreads = [x for x in (r.spread_old, r.spread_new) if x is not None]
        widest = max(spreads) if spreads else None
        gap_over = gap / widest if gap is not None and widest else None
        differs = r.low is not None and (r.low > 1 or r.high < 1)
        signal = (None if gap_over is None or r.low is None
                  else bool(differs and gap is not None and widest is not None and gap > widest))
        wl_runs = runs[runs["workload"] == w]
        share, source = None, "not recorded"
        if len(wl_runs):
            share, source = decode_share(_record(ds, wl_runs["run_dir"].iloc[0]))
        out_per_seq = None
        if len(wl_runs) and _present(wl_runs["output_tokens"].iloc[0]) and _present(wl_runs["num_seqs"].iloc[0]):
            out_per_seq = float(wl_runs["output_tokens"].iloc[0]) / float(wl_runs["num_seqs"].iloc[0])
        row: dict[str, Any] = {
            "workload": w, "kind": kind, "unit": UNIT[kind],
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
            "decode share": fmt_pct(share, 0) + (" *" if share is not None and source != "measured tokens" else ""),
        })
    excl = canon.exclusions
    excl = excl[(excl["model"] == model) & excl["leg"].isin([old, new]) & excl["workload"].isin(wl_order)]
    table = pd.DataFrame(rows)
    notes = [n for n in (provenance_note(canon),) if n]
    notes.append(f"Ratio {pair_label(old_label, new_label)}: "
                 "ratio of medians, above 1.00x the newer leg is faster; 95% CI: percentile bootstrap over "
                 "each side's repeats (harness.analyze.stats.ratio).")
    notes.append("Spread: (max - min) / median of a leg's repeats (harness.analyze.stats.spread); MAD: median absolute "
                 "deviation / median. Gap: the larger median over the smaller, minus 1.")
    sources = sorted(set(table["decode_share_source"])) if len(table) else []
    starred = any(s not in ("measured tokens", "not recorded") for s in sources)
    notes.append("Decode share: output tokens / (prompt + output tokens) of the workload; source: "
                 + "; ".join(sources) + (" (* not from measured tokens)" if starred else "") + ".")
    if len(excl):
        notes.append(f"{len(excl)} run(s) left out by the canonical rule; see `exclusions`.")
    fewest = min([n for n in (*table.get("old_n", []), *table.get("new_n", [])) if n > 0], default=0)
    if 0 < fewest < 3:
        notes.append(f"Only {fewest} repeat(s) on a side: the bootstrap resamples so few values that its interval "
                     "understates the uncertainty; weigh it against the spread.")
    return RepeatStudy(study=ds.study.name, series=series, model=model, old=old, new=new, old_label=old_label,
                       new_label=new_label, table=table, display=pd.DataFrame(disp), samples=samples,
                       exclusions=excl.reset_index(drop=True), notes=tuple(notes))


def repeat_conclusion(study: RepeatStudy) -> list[str]:
    """One sentence per workload, by SIGNAL_RULE, then what the decode shares allow to say."""
    out = []
    lab = study.ratio_label
    for r in study.table.itertuples():
        if r.ratio is None or not _present(r.ratio):
            out.append(f"{r.workload}: no ratio (a leg has no canonical repeat).")
            continue
        ci = f" [{r.ci_low:.2f}, {r.ci_high:.2f}]" if _present(r.ci_low) else ""
        head = f"{r.workload}: {lab} = {r.ratio:.2f}x{ci}, {r.verdict}"
        if r.gap_over_spread is None or not _present(r.gap_over_spread):
            out.append(head + f"; {r.old_n} and {r.new_n} repeat(s), so no spread to weigh the gap against.")
            continue
        weigh = (f"the medians differ by {r.gap:.1%}, the larger repeat spread is {r.widest_spread:.1%} "
                 f"(gap {r.gap_over_spread:.1f}x the spread)")
        verdict = "signal, not noise" if r.signal else "not distinguishable from the repeat spread"
        out.append(f"{head}; {weigh}: {verdict}.")
    t = study.table
    have = t[t["decode_share"].map(_present) & t["ratio"].map(_present)] if len(t) else t
    if len(have) >= 2:
        rho = have["decode_share"].rank().corr(have["ratio"].rank())
        order = ", ".join(f"{r.workload} {r.decode_share:.0%} -> {r.ratio:.2f}x"
                          for r in have.sort_values("decode_share").itertuples())
        direction = ("falls as the workload is more decode-bound" if rho < 0 else
                     "rises as the workload is more decode-bound" if rho > 0 else "does not move with decode share")
        few = (f"; with {len(have)} workloads any order is a perfect rank correlation, so this shows the order, "
               "not a trend") if len(have) < 3 else ""
        out.append(f"Against decode share ({order}): the ratio {direction} (Spearman rank correlation "
                   f"{rho:+.2f} over {len(have)} workloads{few}).")
    elif len(t):
        tok = ", ".join(f"{r.workload} {r.output_tokens_per_seq:,.0f}" for r in t.itertuples()
                        if _present(r.output_tokens_per_seq))
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
                             "under_limit": bool(v < limit) if _present(v) else None})
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
            if _present(main) and _present(med):
                out.append(f"{label} {r.workload}: median of repeats {fmt_value(med, r.kind)} vs main table "
                           f"{fmt_value(main, r.kind)} ({d:+.1%})")
    return out


# --- forced-backend arms ---------------------------------------------------------------------------

# What vLLM logs about the MoE path a run took. Prepare/finalize: `logger.info_once("Using %s",
# prepare_finalize.__class__.__name__)` in each quantization oracle; SM split: flashinfer's TRT-LLM
# fused MoE launch; backend: the FP8/FP4 oracles' selection line.
LOG_FACTS: dict[str, re.Pattern[str]] = {
    "prepare_finalize": re.compile(r"Using (?P<value>MoEPrepareAndFinalize\w*?(?:Modular|Monolithic))\b"),
    "sm_split": re.compile(r"(?P<used>\d+) SMs used for MoE,\s*(?P<reserved>\d+) SMs reserved"),
    "moe_backend": re.compile(r"Using (?P<value>[A-Z][A-Z0-9_]+(?: \w+)?) MoE backend"),
    "enforce_eager": re.compile(r"enforce_eager=(?P<value>True|False)"),
}


def log_facts(text: str) -> dict[str, str]:
    """The MoE routing (and whether the engine ran eager) as a run's log states it; absent keys: not logged."""
    out: dict[str, str] = {}
    for key, pat in LOG_FACTS.items():
        m = pat.search(text)
        if not m:
            continue
        if key == "sm_split":
            out[key] = f"{m['used']} SMs used for MoE, {m['reserved']} reserved"
        else:
            out[key] = m["value"]
    return out


def pf_mode(prepare_finalize: str | None) -> str | None:
    """"Modular" or "Monolithic" from a prepare/finalize class name (or the short form a record holds)."""
    if not isinstance(prepare_finalize, str) or not prepare_finalize:
        return None
    m = re.search(r"(Modular|Monolithic)$", prepare_finalize)
    return m.group(1) if m else prepare_finalize


def _sm_short(split: str | None) -> str | None:
    if not isinstance(split, str) or not split:
        return None
    m = re.match(r"(\d+) SMs", split)
    return f"{m.group(1)} SMs" if m else split


@dataclass(frozen=True, kw_only=True)
class ArmTable:
    """`table`: one row per (leg, arm), numbers and parsed routing. `display`: as printed."""

    study: str
    series: str
    model: str
    workload: str
    kind: str
    reference: tuple[str, str] | None
    table: pd.DataFrame
    display: pd.DataFrame
    notes: tuple[str, ...]


def _routing(ds: Dataset, run_dirs: Sequence[str]) -> tuple[dict[str, str], str]:
    """Routing facts of the runs (run.log first, then the record's manifest keys), and their source."""
    facts: dict[str, list[str]] = {}
    sources = set()
    for d in run_dirs:
        got = log_facts(_log(ds, d))
        src = "run.log"
        man = _record(ds, d).manifest
        # A log that shows the routing is the whole answer (no SM split line means none); the
        # manifest keys stand in only where no log states it, as for transcribed records.
        if "prepare_finalize" not in got and "sm_split" not in got and (
                man.get("moe_prepare_finalize") or man.get("moe_sm_split")):
            for key in ("prepare_finalize", "sm_split"):
                if man.get(f"moe_{key}"):
                    got[key] = str(man[f"moe_{key}"])
            src = "record manifest"
        if "prepare_finalize" in got or "sm_split" in got:
            sources.add(src)
        for k, v in got.items():
            facts.setdefault(k, [])
            if v not in facts[k]:
                facts[k].append(v)
    return {k: " | ".join(v) for k, v in facts.items()}, " + ".join(sorted(sources)) or "not logged"


def _why(row: dict[str, Any]) -> str:
    """A failed run's cause in one line: the line its failure signature matched, where one did (it
    names the root cause even when vLLM's wrapper exception came last), else the recorded reason."""
    sig, err, reason = row.get("failure_signature"), row.get("failure_error"), row.get("failure_reason")
    if isinstance(sig, str) and sig != "unknown" and isinstance(err, str) and err:
        return err
    return reason if isinstance(reason, str) and reason else (err if isinstance(err, str) else "")


def _ref(reference: str | Sequence[str] | None) -> tuple[str, str] | None:
    if not reference:
        return None
    if isinstance(reference, str):
        leg, sep, arm = reference.partition(":")
        if not sep:
            raise UserError(f"reference {reference!r}: expected LEG:ARM")
        return leg, arm
    leg, arm = reference
    return str(leg), str(arm)


def arm_table(ds: Dataset, *, series: str, model: str | None = None, workload: str | None = None,
              legs: str | Sequence[str] = (), arms: str | Sequence[str] = (), scenario: str | None = None,
              reference: str | Sequence[str] | None = None) -> ArmTable:
    """Throughput (or latency) per (leg, arm) of one model and workload, with the MoE routing each
    run logged and the refusal of arms that did not run.

    Routing: run.log parsed by LOG_FACTS; transcribed records carry it as manifest keys
    `moe_prepare_finalize` / `moe_sm_split` instead. `reference` ("LEG:ARM", default: the first row
    that ran) is the row every other row is compared with (ratio and bootstrap CI, > 1 is faster).
    Row order: legs in study order, arms in the scenario's order where one is given.
    """
    where = f"{ds.root} series {series}"
    recs = _series_records(ds, series)
    model = _pick_one(recs["model"], model, "model", where)
    recs = recs[recs["model"] == model]
    workload = _pick_one(recs["workload"], workload, "workload", where)
    recs = recs[recs["workload"] == workload]
    _, _, sc_arms = _scenario_order(scenario)
    leg_sel, arm_sel = names(legs), names(arms)
    leg_order = [lg for lg in _ordered(recs["leg"], ds.study.leg_names) if not leg_sel or lg in leg_sel]
    arm_order = [a for a in _ordered(recs["arm"], sc_arms) if not arm_sel or a in arm_sel]
    kind = recs["kind"].dropna().iloc[0] if recs["kind"].notna().any() else "throughput"
    cells = {a: canonicalize(ds, series=series, arm=a).cells for a in arm_order}
    rows = []
    for lg in leg_order:
        for a in arm_order:
            runs = recs[(recs["leg"] == lg) & (recs["arm"] == a)]
            if runs.empty:
                continue
            c = cells[a]
            c = c[(c["leg"] == lg) & (c["model"] == model) & (c["workload"] == workload)]
            samples = tuple(c["samples"].iloc[0]) if len(c) else ()
            ok_dirs = tuple(c["run_dirs"].iloc[0]) if len(c) else ()
            failed = runs[runs["status"] != "ok"]
            facts, source = _routing(ds, ok_dirs or tuple(runs["run_dir"]))
            if not ok_dirs:
                facts = {k: v for k, v in facts.items() if k == "enforce_eager"}
                source = "—"
            rec0 = _record(ds, runs["run_dir"].iloc[0])
            sig = failed["failure_signature"].dropna()
            sig_id = sig.iloc[0] if len(sig) else None
            sig_obj = signature(sig_id) if sig_id else None
            reason = pd.Series([_why(r) for r in failed.to_dict("records")], dtype=object)
            if samples:
                status = "ok" if failed.empty else f"ok ({len(samples)} of {len(runs)} runs)"
            elif sig_id == "moe-quant-scheme-refused":
                status = "refused"
            else:
                status = str(failed["status"].iloc[0]) if len(failed) else "no canonical run"
            rows.append({
                "leg": lg, "leg_label": ds.study.label(lg), "arm": a,
                "description": str(rec0.arm_spec.get("description", "")),
                "engine_args": dict(rec0.arm_spec.get("engine_args", {})), "env": dict(rec0.arm_spec.get("env", {})),
                "pins": tuple(rec0.arm_spec.get("pins", [])),
                "status": status, "n": len(samples), "runs": len(runs), "samples": samples,
                "value": float(np.median(samples)) if samples else None, "spread": spread(samples) if samples else None,
                "prepare_finalize": facts.get("prepare_finalize"), "mode": pf_mode(facts.get("prepare_finalize")),
                "sm_split": facts.get("sm_split"), "moe_backend": facts.get("moe_backend"),
                "enforce_eager": facts.get("enforce_eager"), "routing_source": source,
                "reason": reason.iloc[0] if len(reason) else None,
                "signature": sig_id, "root_cause": sig_obj.root_cause if sig_obj else None,
                "provenance": ",".join(sorted(set(runs["provenance"]))), "run_dirs": tuple(runs["run_dir"]),
            })
    table = pd.DataFrame(rows)
    if table.empty:
        raise UserError(f"{where}: no runs of {model} / {workload}")
    ref = _ref(reference)
    if ref is None:
        ran = table[table["n"] > 0]
        ref = (ran["leg"].iloc[0], ran["arm"].iloc[0]) if len(ran) else None
    elif not ((table["leg"] == ref[0]) & (table["arm"] == ref[1]) & (table["n"] > 0)).any():
        raise UserError(f"{where}: reference {ref[0]}:{ref[1]} has no canonical run")
    ref_samples: tuple[float, ...] = ()
    if ref is not None:
        ref_samples = table[(table["leg"] == ref[0]) & (table["arm"] == ref[1])]["samples"].iloc[0]
    is_ref = [ref is not None and (lg, a) == ref for lg, a in zip(table["leg"], table["arm"])]
    # The reference against itself is 1.00x by definition, not a bootstrap of its repeats.
    ratios = [Ratio(value=1.0) if me else
              ratio(ref_samples, s, higher_is_better=(kind == "throughput")) if s and ref_samples else Ratio(value=None)
              for s, me in zip(table["samples"], is_ref)]
    table["vs_reference"] = [r.value for r in ratios]
    table["vs_reference_low"] = [r.low for r in ratios]
    table["vs_reference_high"] = [r.high for r in ratios]
    table["vs_reference_verdict"] = ["reference" if me else r.verdict for r, me in zip(ratios, is_ref)]
    unit = UNIT[kind]
    ref_label = f"{ds.study.label(ref[0])} {ref[1]}" if ref else "—"
    disp = pd.DataFrame({
        "leg": table["leg_label"], "arm": [f"`{a}`" for a in table["arm"]],
        f"{workload} {unit}": [fmt_value(v, kind) if s in ("ok",) or str(s).startswith("ok") else s
                               for v, s in zip(table["value"], table["status"])],
        "repeats": [f"{n}/{m}" for n, m in zip(table["n"], table["runs"])],
        f"vs {ref_label}": ["reference" if me else
                            (fmt_ratio(r) + (f" {fmt_ci(r)}" if fmt_ci(r) else "")) if r.value is not None else MISSING
                            for r, me in zip(ratios, is_ref)],
        "prepare/finalize": [pf_mode(x) or MISSING for x in table["prepare_finalize"]],
        "SM split": [_sm_short(x) or ("none" if n and src != "not logged" and p else MISSING)
                     for x, n, src, p in zip(table["sm_split"], table["n"], table["routing_source"],
                                             table["prepare_finalize"])],
        "routing from": table["routing_source"],
        "refusal / failure": [MISSING if not _present(r) else str(r) for r in table["reason"]],
    })
    notes = []
    if (table["provenance"].str.contains("transcribed")).any():
        notes.append("Transcribed from the published study, not measured by this harness; the routing of "
                     "transcribed rows is the record's manifest keys, as the study printed it.")
    notes.append(f"Ratios against {ref_label}: ratio of medians, above 1.00x faster than the reference; "
                 "a bracketed 95% CI where both sides have repeats.")
    notes.append("Prepare/finalize and SM split are parsed from each run's run.log (vLLM's \"Using "
                 "MoEPrepareAndFinalize...\" and TRT-LLM's \"N SMs used for MoE, M SMs reserved\" lines); "
                 "\"none\" means the run logged a prepare/finalize class but no SM split, \"—\" that it "
                 "logged neither (a model without MoE layers, or an arm that did not start).")
    return ArmTable(study=ds.study.name, series=series, model=model, workload=workload, kind=kind, reference=ref,
                    table=table, display=disp, notes=tuple(notes))


def arm_conclusion(arms: ArmTable, *, recovers: float = 0.97) -> list[str]:
    """What the arms say about the routing: does any arm with the reference's routing structure
    (same prepare/finalize mode and SM split) on another leg reach the reference? `recovers`: the
    ratio to the reference that counts as reaching it."""
    t = arms.table
    out: list[str] = []
    if arms.reference is None:
        return ["No arm ran: nothing to compare."]
    ref = t[(t["leg"] == arms.reference[0]) & (t["arm"] == arms.reference[1])].iloc[0]
    ref_label = f"{ref['leg_label']} {ref['arm']}"
    unit = UNIT[arms.kind]

    def routing(r: pd.Series) -> str:
        if not isinstance(r["mode"], str):
            return "routing not logged"
        split = _sm_short(r["sm_split"])
        return f"{r['mode']}, {split if split and split != 'none' else 'no SM split'}"

    out.append(f"Reference {ref_label}: {fmt_value(ref['value'], arms.kind)} {unit} ({routing(ref)}).")
    others = t[(t["leg"] != ref["leg"]) & (t["n"] > 0)]
    same_leg = t[(t["leg"] == ref["leg"]) & (t["n"] > 0) & (t["arm"] != ref["arm"])]
    for group in (others, same_leg):
        for r in group.itertuples():
            ci = f" [{r.vs_reference_low:.2f}, {r.vs_reference_high:.2f}]" if _present(r.vs_reference_low) else ""
            same = (bool(ref["mode"]) and r.mode == ref["mode"]
                    and (_sm_short(r.sm_split) or "none") == (_sm_short(ref["sm_split"]) or "none"))
            tag = " — the reference's routing" if same else ""
            verdict = f", {r.vs_reference_verdict}" if r.vs_reference_verdict not in ("single pass", "missing") else ""
            out.append(f"{r.leg_label} {r.arm}: {fmt_value(r.value, arms.kind)} {unit}, {r.vs_reference:.2f}x of "
                       f"the reference{ci}{verdict} ({routing(pd.Series(r._asdict()))}{tag}).")
    if len(others):
        has_mode = bool(ref["mode"])
        same_routing = others[[bool(has_mode and m == ref["mode"]
                                    and (_sm_short(s) or "none") == (_sm_short(ref["sm_split"]) or "none"))
                               for m, s in zip(others["mode"], others["sm_split"])]]
        best = others.loc[others["vs_reference"].idxmax()]
        if has_mode and len(same_routing):
            top = same_routing.loc[same_routing["vs_reference"].idxmax()]
            if top["vs_reference"] >= recovers:
                out.append(f"An arm with the reference's routing recovers its throughput ({top['leg_label']} "
                           f"{top['arm']} at {top['vs_reference']:.2f}x): the routing can explain the gap.")
            else:
                out.append(f"The routing alone does not explain the gap: {top['leg_label']} {top['arm']} has the "
                           f"reference's routing and stays at {top['vs_reference']:.2f}x (it also changes the "
                           f"kernel, so this is not a single-variable test).")
        if best["vs_reference"] < recovers:
            out.append(f"No arm on {best['leg_label']} reaches the reference: the best is {best['arm']} at "
                       f"{best['vs_reference']:.2f}x.")
    refused = t[t["status"] == "refused"]
    if len(refused):
        out.append("Refused: " + "; ".join(f"{r.leg_label} {r.arm} ({r.reason})" for r in refused.itertuples()) + ".")
    failed = t[(t["n"] == 0) & (t["status"] != "refused")]
    if len(failed):
        out.append("Did not run: " + "; ".join(f"{r.leg_label} {r.arm} ({r.status}: {r.reason})"
                                               for r in failed.itertuples()) + ".")
    return out


# --- the falsification matrix ----------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class FalsificationMatrix:
    """arm x model outcomes. `rc`: exit status (0 for a run that finished ok, NaN where not run);
    `passed`: True/False/NaN; `outcomes`: the printed cells ("rc=1", "timeout"); `reasons`: each
    failed cell's failure reason. `rows`: per row the arm, its leg and its change from the baseline."""

    study: str
    series: str
    baseline: str
    outcomes: pd.DataFrame
    rc: pd.DataFrame
    passed: pd.DataFrame
    reasons: pd.DataFrame
    rows: pd.DataFrame
    provenance: tuple[str, ...]

    def markdown(self) -> str:
        from harness.analyze.tables import markdown_table

        show = self.outcomes.copy()
        show.insert(0, "arm", [f"{r} ({c})" if c else r for r, c in zip(show.index, self.rows["change"])])
        return markdown_table(show.reset_index(drop=True))


def _changes(spec: dict[str, Any], base: dict[str, Any]) -> list[str]:
    """What an arm changes relative to the baseline arm: engine args, environment, pins."""
    out = []
    for key, what in (("engine_args", "--{k} {v}"), ("env", "{k}={v}")):
        a, b = spec.get(key, {}) or {}, base.get(key, {}) or {}
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                if k not in a:
                    out.append(f"without {what.format(k=k.replace('_', '-'), v=b[k]).split(' ')[0]}")
                elif key == "engine_args":
                    v = a[k]
                    flag = f"--{k.replace('_', '-')}"
                    out.append(flag if v is True else f"{flag} {v}" + (f" (baseline {b[k]})" if k in b else ""))
                else:
                    out.append(what.format(k=k, v=a[k]) + (f" (baseline {b[k]})" if k in b else ""))
    pa, pb = set(spec.get("pins", []) or []), set(base.get("pins", []) or [])
    out += [f"pin {p}" for p in sorted(pa - pb)] + [f"unpin {p}" for p in sorted(pb - pa)]
    return out


def _what_ran(rec: RunRecord) -> dict[str, Any]:
    """The settings a run ran under: engine arguments as merged from model and arm, the arm's
    environment, and every pin (the leg's model pins and the arm's)."""
    return {"engine_args": rec.engine_args or rec.arm_spec.get("engine_args", {}),
            "env": rec.arm_spec.get("env", {}), "pins": rec.pins or rec.arm_spec.get("pins", [])}


def falsification_matrix(ds: Dataset, *, series: str, baseline: str = "baseline", scenario: str | None = None,
                         legs: str | Sequence[str] = ()) -> FalsificationMatrix:
    """The single-variable control as a matrix: one row per arm (per leg where an arm ran on more
    than one), one column per model; the baseline row is `baseline`. Every repeat must agree for a
    cell to count as passed; a cell whose repeats disagree is printed with both outcomes and counts
    as not passed."""
    where = f"{ds.root} series {series}"
    recs = _series_records(ds, series)
    leg_sel = names(legs)
    if leg_sel:
        recs = recs[recs["leg"].isin(leg_sel)]
    sc_models, _, sc_arms = _scenario_order(scenario)
    if baseline not in set(recs["arm"]):
        raise UserError(f"{where}: no baseline arm {baseline!r} (arms: {', '.join(dict.fromkeys(recs['arm']))})")
    models = _ordered(recs["model"], sc_models)
    arm_order = _ordered(recs["arm"], sc_arms)
    arm_order.remove(baseline)
    arm_order.insert(0, baseline)
    leg_order = _ordered(recs["leg"], ds.study.leg_names)
    legs_of = {a: [lg for lg in leg_order if ((recs["arm"] == a) & (recs["leg"] == lg)).any()] for a in arm_order}
    base_leg = legs_of[baseline][0]
    if len(legs_of[baseline]) > 1:
        raise UserError(f"{where}: the baseline arm {baseline!r} ran on several legs ({', '.join(legs_of[baseline])}); "
                        "choose one with legs=")
    base_run = recs[(recs["arm"] == baseline) & (recs["leg"] == base_leg)]["run_dir"].iloc[0]
    base_spec = _what_ran(_record(ds, base_run))
    labels, row_info = [], []
    for a in arm_order:
        for lg in legs_of[a]:
            label = a if len(legs_of[a]) == 1 else f"{a} ({ds.study.label(lg)})"
            rec = _record(ds, recs[(recs["arm"] == a) & (recs["leg"] == lg)]["run_dir"].iloc[0])
            spec = rec.arm_spec
            changes = [] if (a, lg) == (baseline, base_leg) else _changes(_what_ran(rec), base_spec)
            if lg != base_leg:
                changes = [f"leg {lg} instead of {base_leg}"] + changes
            labels.append(label)
            row_info.append({"row": label, "arm": a, "leg": lg, "leg_label": ds.study.label(lg),
                             "description": str(spec.get("description", "")),
                             "change": "; ".join(changes), "n_changes": len(changes),
                             "same_leg": lg == base_leg})
    rc = pd.DataFrame(np.nan, index=labels, columns=models, dtype=float)
    passed = pd.DataFrame(np.nan, index=labels, columns=models, dtype=object)
    outcomes = pd.DataFrame("—", index=labels, columns=models, dtype=object)
    reasons = pd.DataFrame("", index=labels, columns=models, dtype=object)
    for info in row_info:
        for m in models:
            g = recs[(recs["arm"] == info["arm"]) & (recs["leg"] == info["leg"]) & (recs["model"] == m)]
            if g.empty:
                continue
            cells, codes, oks = [], [], []
            for r in g.sort_values("repeat").itertuples():
                rec = _record(ds, r.run_dir)
                if r.status == "ok":
                    code, shown = 0, "rc=0"
                elif r.status == "timeout":
                    code, shown = None, "timeout"
                elif rec.failure and rec.failure.signal:
                    code, shown = None, f"signal {rec.failure.signal}"
                elif rec.failure and rec.failure.exit_code is not None:
                    code, shown = rec.failure.exit_code, f"rc={rec.failure.exit_code}"
                else:
                    code, shown = None, "failed"
                cells.append(shown)
                codes.append(code)
                oks.append(r.status == "ok")
                if r.status != "ok" and not reasons.at[info["row"], m]:
                    reasons.at[info["row"], m] = _why(r._asdict())
            outcomes.at[info["row"], m] = " / ".join(dict.fromkeys(cells))
            rc.at[info["row"], m] = codes[0] if len(set(codes)) == 1 and codes[0] is not None else np.nan
            passed.at[info["row"], m] = all(oks)
    return FalsificationMatrix(study=ds.study.name, series=series, baseline=baseline, outcomes=outcomes, rc=rc,
                               passed=passed, reasons=reasons, rows=pd.DataFrame(row_info).set_index("row"),
                               provenance=tuple(sorted(set(recs["provenance"]))))


@dataclass(frozen=True, kw_only=True)
class FalsificationConclusion:
    flips_every: tuple[str, ...]      # single-change rows on the baseline's leg that flip every outcome
    controls: tuple[str, ...]         # rows on another leg that flip every outcome (whole-stack controls)
    flips_some: tuple[str, ...]
    flips_none: tuple[str, ...]
    incomplete: tuple[str, ...]       # rows missing a model the baseline has
    text: str


def single_variable_conclusion(matrix: FalsificationMatrix) -> FalsificationConclusion:
    """Which arm(s) flip every outcome of the baseline row.

    A row flips an outcome when its pass/fail differs from the baseline's for that model; it flips
    every outcome when it does so for every model the baseline ran. Rows on the baseline's own leg
    that change one thing are the single-variable evidence; rows on another leg change the whole
    stack and are reported as controls, never as the explanation.
    """
    base = matrix.passed.loc[matrix.baseline]
    base_models = [m for m in base.index if isinstance(base[m], (bool, np.bool_))]
    every, controls, some, none, incomplete = [], [], [], [], []
    for row, info in matrix.rows.iterrows():
        if row == matrix.baseline:
            continue
        vals = matrix.passed.loc[row]
        have = [m for m in base_models if isinstance(vals[m], (bool, np.bool_))]
        flipped = [m for m in have if bool(vals[m]) != bool(base[m])]
        if len(have) < len(base_models):
            incomplete.append(row)
        if have and len(flipped) == len(base_models):
            (every if info["same_leg"] else controls).append(row)
        elif flipped:
            some.append(row)
        else:
            none.append(row)
    n = len(base_models)
    base_state = _state(base[base_models].tolist())
    parts = []

    def named(rows: list[str]) -> str:
        return ", ".join(f"`{r}` ({matrix.rows.at[r, 'change'] or 'no change'})" for r in rows)

    if len(every) == 1:
        r = every[0]
        single = matrix.rows.at[r, "n_changes"] == 1
        row_state = _state([bool(x) for x in matrix.passed.loc[r, base_models].tolist()])
        parts.append(f"Only `{r}` flips every outcome: {n} of {n} model(s) {base_state} under the baseline "
                     f"`{matrix.baseline}` and {row_state} under `{r}`, which changes "
                     f"{'one thing' if single else str(matrix.rows.at[r, 'n_changes']) + ' things'}: "
                     f"{matrix.rows.at[r, 'change']}.")
    elif every:
        parts.append(f"{len(every)} arms each flip every outcome: {named(every)}; the matrix does not single out "
                     "one change.")
    else:
        parts.append(f"No arm on the baseline's leg flips every outcome of `{matrix.baseline}` ({n} model(s), "
                     f"{base_state}).")
    if none:
        parts.append(f"No outcome changes under {named(none)}.")
    if some:
        parts.append(f"Some outcomes change under {named(some)}.")
    if controls:
        parts.append(f"{named(controls)} also flips every outcome; it runs on another leg, so it is a control "
                     "(the models can pass there), not a single change.")
    if incomplete:
        parts.append(f"Rows without every model: {', '.join(f'`{r}`' for r in incomplete)}.")
    if "transcribed" in matrix.provenance:
        parts.append("The outcomes are transcribed from the published study, not measured by this harness.")
    return FalsificationConclusion(flips_every=tuple(every), controls=tuple(controls), flips_some=tuple(some),
                                   flips_none=tuple(none), incomplete=tuple(incomplete), text=" ".join(parts))


def _state(vals: list[bool]) -> str:
    if all(vals):
        return "pass"
    if not any(vals):
        return "fail"
    return f"{sum(vals)} pass / {len(vals) - sum(vals)} fail"


# --- dispersion across a study ---------------------------------------------------------------------

def series_with(ds: Dataset, arm: str = "default") -> list[str]:
    """The study's series that hold runs of `arm`, main series first."""
    df = ds.records
    found = list(dict.fromkeys(df.loc[df["arm"] == arm, "series"]))
    return _ordered(found, [ds.study.main_series])


def canonical_all(ds: Dataset, *, series: str | Sequence[str] = (), arm: str = "default",
                  allow_reused: bool | None = None) -> list[Canonical]:
    """One canonical selection per series (default: every series with runs of `arm`);
    `allow_reused=None` takes the study's declaration (harness.analyze.canonical)."""
    chosen = names(series) or tuple(series_with(ds, arm))
    return [canonicalize(ds, series=s, arm=arm, allow_reused=allow_reused) for s in chosen]


def exclusions_frame(canons: Canonical | Sequence[Canonical]) -> pd.DataFrame:
    """Every run the canonical rule left out, with its reason, across the selections."""
    frames = [c.exclusions.assign(series=c.series) for c in ([canons] if isinstance(canons, Canonical) else canons)]
    cols = ["series", "leg", "model", "workload", "repeat", "reason"]
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)


def samples_frame(canons: Canonical | Sequence[Canonical]) -> pd.DataFrame:
    """One row per canonical repeat: series, model, workload, kind, leg, value, and its deviation from
    its cell's median (`rel_dev`, so models of very different speed share one axis)."""
    rows = []
    for c in ([canons] if isinstance(canons, Canonical) else canons):
        runs = c.runs
        med = {(r.leg, r.model, r.workload): r.value for r in c.cells.itertuples()}
        for r in runs.to_dict("records"):
            v = r[METRIC[r["kind"]]]
            m = med.get((r["leg"], r["model"], r["workload"]))
            rows.append({"series": c.series, "model": r["model"], "workload": r["workload"], "kind": r["kind"],
                         "leg": r["leg"], "leg_label": c.study.label(r["leg"]), "repeat": r["repeat"],
                         "value": float(v), "median": m, "rel_dev": float(v) / m - 1 if m else None,
                         "provenance": r["provenance"]})
    df = pd.DataFrame(rows, columns=["series", "model", "workload", "kind", "leg", "leg_label", "repeat",
                                     "value", "median", "rel_dev", "provenance"])
    return _in_table_order(df, [canons] if isinstance(canons, Canonical) else list(canons))


def dispersion_frame(canons: Canonical | Sequence[Canonical]) -> pd.DataFrame:
    """One row per canonical cell: n, median, min, max, spread (range/median), MAD/median, CV."""
    rows = []
    for c in ([canons] if isinstance(canons, Canonical) else canons):
        for r in c.cells.itertuples():
            a = np.asarray(r.samples, dtype=float)
            rows.append({"series": c.series, "model": r.model, "workload": r.workload, "kind": r.kind,
                         "leg": r.leg, "leg_label": r.leg_label, "n": r.n, "median": r.value,
                         "min": float(a.min()), "max": float(a.max()), "spread": spread(a), "mad": mad(a),
                         "cv": float(a.std(ddof=1) / a.mean()) if len(a) > 1 else None,
                         "provenance": r.provenance})
    df = pd.DataFrame(rows, columns=["series", "model", "workload", "kind", "leg", "leg_label", "n", "median",
                                     "min", "max", "spread", "mad", "cv", "provenance"])
    return _in_table_order(df, [canons] if isinstance(canons, Canonical) else list(canons))


def ratio_frame(canons: Canonical | Sequence[Canonical], *, pairs: str = "consecutive") -> pd.DataFrame:
    """One row per (series, model, workload, leg pair): ratio of medians (> 1: the newer leg is faster),
    bootstrap 95% CI and verdict from `harness.analyze.stats.ratio`. `pairs`: "consecutive" legs in study
    order, or "all" pairs (older first)."""
    from itertools import combinations, pairwise

    if pairs not in ("consecutive", "all"):
        raise UserError(f"pairs {pairs!r}: expected \"consecutive\" or \"all\"")
    rows = []
    for c in ([canons] if isinstance(canons, Canonical) else canons):
        legs = [lg for lg in c.study.leg_names if lg in set(c.cells["leg"])]
        legs += [lg for lg in dict.fromkeys(c.cells["leg"]) if lg not in legs]
        pair_list = list(pairwise(legs)) if pairs == "consecutive" else list(combinations(legs, 2))
        short = short_labels([c.study.label(lg) for lg in legs])
        cells = {(r["leg"], r["model"], r["workload"]): r for r in c.cells.to_dict("records")}
        keys = list(dict.fromkeys((r["model"], r["workload"], r["kind"]) for r in cells.values()))
        for model, wl, kind in keys:
            for old, new in pair_list:
                a, b = cells.get((old, model, wl)), cells.get((new, model, wl))
                if a is None or b is None:
                    continue
                rt = ratio(a["samples"], b["samples"], higher_is_better=(kind == "throughput"))
                lo, ln = c.study.label(old), c.study.label(new)
                rows.append({"series": c.series, "model": model, "workload": wl, "kind": kind, "old": old,
                             "new": new, "pair": f"{short[ln]}/{short[lo]}", "ratio": rt.value, "low": rt.low,
                             "high": rt.high, "verdict": rt.verdict, "n_old": rt.n_old, "n_new": rt.n_new,
                             "provenance": ",".join(sorted({a["provenance"], b["provenance"]}))})
    df = pd.DataFrame(rows, columns=["series", "model", "workload", "kind", "old", "new", "pair", "ratio", "low",
                                     "high", "verdict", "n_old", "n_new", "provenance"])
    return _in_table_order(df, [canons] if isinstance(canons, Canonical) else list(canons))


def _in_table_order(df: pd.DataFrame, canons: list[Canonical]) -> pd.DataFrame:
    """Rows in the study's table order: series as given, then model and workload (harness.analyze.tables)."""
    if df.empty or not canons:
        return df
    from harness.analyze.tables import row_key

    key = row_key(canons[0].dataset)
    series = {c.series: i for i, c in enumerate(canons)}
    order = sorted(range(len(df)), key=lambda i: (series.get(df["series"].iat[i], len(series)),
                                                   key(df["model"].iat[i], df["workload"].iat[i])))
    return df.iloc[order].reset_index(drop=True)


def coverage_frame(ds: Dataset, *, series: str | None = None, arm: str = "default",
                   allow_reused: bool | None = None) -> pd.DataFrame:
    """model x leg: "ok" (a canonical measurement for every workload), "partial", "failed" (no run
    passed), "excluded" (runs passed but none is canonical) or "not run"; for a coverage heat map."""
    series = series or ds.study.main_series
    c = canonicalize(ds, series=series, arm=arm, allow_reused=allow_reused)
    recs = ds.records[(ds.records["series"] == series) & (ds.records["arm"] == arm)]
    models = [m for m in model_order(ds) if m in set(recs["model"])]
    legs = [lg for lg in ds.study.leg_names if lg in set(recs["leg"])]
    legs += [lg for lg in dict.fromkeys(recs["leg"]) if lg not in legs]
    wanted = recs.groupby("model")["workload"].agg(set)
    have = c.cells.groupby(["leg", "model"])["workload"].agg(set) if len(c.cells) else pd.Series(dtype=object)
    out = pd.DataFrame("not run", index=models, columns=[ds.study.label(lg) for lg in legs], dtype=object)
    for lg in legs:
        for m in models:
            ran = recs[(recs["leg"] == lg) & (recs["model"] == m)]
            if ran.empty:
                continue
            got = have.get((lg, m), set())
            if got >= wanted[m]:
                state = "ok"
            elif got:
                state = "partial"
            elif (ran["status"] == "ok").any():
                state = "excluded"
            else:
                state = "failed"
            out.at[m, ds.study.label(lg)] = state
    out.index.name = "model"
    return out


# --- measuring -------------------------------------------------------------------------------------

# A Jupyter kernel forces colour on for everything it starts (FORCE_COLOR, CLICOLOR_FORCE); vLLM then
# writes ANSI codes into run.log, where the harness's log reading (process prefixes, tracebacks) does
# not find them. A run started from a notebook must log as one started from a shell.
_COLOUR_ENV = ("FORCE_COLOR", "CLICOLOR_FORCE", "CLICOLOR")


@contextlib.contextmanager
def _plain_logs() -> Iterator[None]:
    saved = {k: os.environ.pop(k) for k in _COLOUR_ENV if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def measure(*, scenario: str, results_dir: str | Path, legs: str | Sequence[str] = (),
            models: str | Sequence[str] = (), workloads: str | Sequence[str] = (), arms: str | Sequence[str] = (),
            repeats: int | None = None, resume: bool = False, timeout_s: float | None = None,
            lock_wait_s: float = 3600, poll_s: float = 30) -> Any:
    """Run a diagnostic's sweep into `results_dir` (its parent is the results root, its name the
    study) through `harness.measure.sweep`: repetition is the outer loop, envs are built first, and the
    node lock is taken. While another sweep holds the lock, wait (up to `lock_wait_s`) instead of
    failing; the wait only tries the lock, so nothing is resolved or started beside that sweep."""
    from harness.measure.sweep import SweepArgs, sweep

    study_dir = study_path(results_dir)
    args = SweepArgs(scenario=scenario, results=study_dir.parent, study=study_dir.name, legs=names(legs),
                     models=names(models), workloads=names(workloads), arms=names(arms), repeats=repeats,
                     resume=resume, timeout_s=timeout_s)
    deadline = time.monotonic() + lock_wait_s
    said = False
    while True:
        try:
            with guard.node_lock():
                pass
            with _plain_logs():
                return sweep(args)
        except UserError as e:
            # The lock can be taken between the probe and the sweep's own acquisition: wait again.
            if "another sweep is measuring" not in str(e) or time.monotonic() >= deadline:
                raise
            if not said:
                print(f"waiting for the node lock (up to {lock_wait_s:.0f} s): {e}", flush=True)
                said = True
            time.sleep(poll_s)


def measured_summary(res: Any) -> str:
    """One line about a finished `measure`."""
    failed = sum(r.status != "ok" for r in res.records)
    return (f"{len(res.records)} runs ({res.measured} measured, {res.reused} reused, {failed} not ok) under "
            f"{res.study_dir}; sweep index {res.index_path.name}")


__all__ = [
    "LOG_FACTS", "SIGNAL_RULE", "ArmTable", "FalsificationConclusion", "FalsificationMatrix", "RepeatStudy",
    "arm_conclusion", "arm_table", "canonical_all", "coverage_frame", "decode_share", "dispersion_frame", "exclusions_frame",
    "falsification_matrix", "fmt_pct", "fmt_value", "log_facts", "mad", "main_table_check", "measure",
    "measured_summary", "names", "pair_label", "pf_mode", "ratio_frame", "repeat_conclusion", "repeat_study",
    "samples_frame", "scenario_series", "series_with", "single_variable_conclusion", "spread_check",
    "spread_check_text", "study_path",
]
