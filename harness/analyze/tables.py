"""The study's tables, generated from the canonical runs; nothing in them is typed by hand.

Each table is a `Table`: `data` (numbers, for CSV/Parquet and notebooks) and `display` (the strings
the study prints: "21,943" tok/s, "3.82" ms/tok, "1.01x" ratios, "—" for missing, model names in
backticks). Ratios come from `harness.analyze.stats.ratio` on the canonical samples: with repeats on both
sides they carry the significance rule's 95% interval and verdict (`harness.analyze.significance`, named in a
footnote under every table with intervals, beside the n per side), otherwise they are labelled single pass.

Row order: study.yaml's `model_order` / `workload_order` where given, then the order the study's
sweeps ran them (the scenario's order), then alphabetical.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import combinations
from pathlib import Path

import pandas as pd

from harness import workloads
from harness.analyze.canonical import Canonical, provenance_note
from harness.analyze.dataset import Dataset
from harness.core.errors import UserError
from harness.analyze.fmt import (MISSING, fmt_ci, fmt_ms, fmt_ratio, fmt_tok_s, fmt_verdict, markdown_table,  # noqa: F401
                                 short_labels, ticked)
from harness.analyze.order import _legs, leg_pairs, model_order, order_frame, row_key  # noqa: F401
from harness.analyze.fmt import fmt_n
from harness.analyze.significance import (ALPHA, MARGIN_DEFAULT, NESTED_METHOD, TABLE_RULE, decide_table,
                                          default_margin, look_alpha)
from harness.analyze.stats import Ratio, footnote, nested_ratio, ratio
from harness.workloads.base import Metric

@dataclass(frozen=True, kw_only=True)
class Table:
    name: str
    title: str
    data: pd.DataFrame        # numbers; one row per display row
    display: pd.DataFrame     # the printed strings
    notes: tuple[str, ...] = ()

    def markdown(self, *, heading: bool = True) -> str:
        out = [f"### {self.title}", ""] if heading else []
        out.append(markdown_table(self.display))
        if self.notes:
            out += [""] + [f"_{n}_" for n in self.notes]
        return "\n".join(out) + "\n"


# --- the tables ----------------------------------------------------------------------------------

def _ratio_label(kind: str, old: str, new: str, short: dict[str, str]) -> str:
    return workloads.metric_of(kind).ratio_label(short[old], short[new])


def _metric_table(canon: Canonical, kind: str, legs: list[tuple[str, str]], name: str, title: str) -> Table:
    metric = workloads.metric_of(kind)

    def fmt(v: float | None) -> str:
        return MISSING if v is None or pd.isna(v) else metric.fmt(v)
    all_labels = [lb for _, lb in _legs(canon)]
    short = short_labels(all_labels)
    exp = canon.expected[canon.expected["kind"] == kind]
    rows = order_frame(canon, exp.drop_duplicates(["model", "workload"])[["model", "workload", "tp"]])
    # Plain dict lookups: a table is built per leg pair, and frames are slow to index cell by cell.
    cells = {(c["leg"], c["model"], c["workload"]): c for c in canon.cells.to_dict("records")}
    pairs = list(zip(legs, legs[1:]))
    margin, margin_source = study_margin(canon)
    engine_sd = canon.study.extra.get("engine_sd")   # named in the paired cells' note
    data_rows, disp_rows, any_ci = [], [], False
    ratios_all: list[list[Ratio]] = []
    for r in rows.to_dict("records"):
        model, workload = r["model"], r["workload"]
        d: dict[str, object] = {"model": model, "tp": int(r["tp"]), "workload": workload}
        s: dict[str, object] = {"model": ticked(model), "tp": str(d["tp"]), "workload": workload}
        for leg, label in legs:
            c = cells.get((leg, model, workload))
            d[label] = float(c["value"]) if c is not None else None
            d[f"{label} n"] = int(c["n"]) if c is not None else 0
            s[label] = fmt(d[label])
        rs = []
        for (old, old_lb), (new, new_lb) in pairs:
            lab = _ratio_label(kind, old_lb, new_lb, short)
            rt = cell_ratio(canon, cells.get((old, model, workload)), cells.get((new, model, workload)), metric,
                            margin=margin)
            rs.append(rt)
            any_ci |= rt.low is not None
            d[lab], d[f"{lab} low"], d[f"{lab} high"], d[f"{lab} verdict"] = rt.value, rt.low, rt.high, rt.verdict
            s[lab] = fmt_ratio(rt)
        ratios_all.append(rs)
        data_rows.append(d)
        disp_rows.append(s)
    # The table is many tests: its verdicts are decided together (false discovery rate at alpha).
    ratios_all = table_verdicts(ratios_all, alpha=study_alpha(canon))
    for d, rs in zip(data_rows, ratios_all):
        for ((old, old_lb), (new, new_lb)), rt in zip(pairs, rs):
            d[f"{_ratio_label(kind, old_lb, new_lb, short)} verdict"] = rt.verdict
    display = pd.DataFrame(disp_rows, columns=["model", "tp", "workload", *[lb for _, lb in legs],
                                               *[_ratio_label(kind, a[1], b[1], short) for a, b in pairs]])
    if any_ci:
        for j, (a, b) in enumerate(pairs):
            lab = _ratio_label(kind, a[1], b[1], short)
            # A study measured until decided tests at alpha / looks: its intervals are that much wider.
            level = "95%" if study_looks(canon) == 1 else f"{1 - study_alpha(canon):.1%}"
            display[f"{lab} {level} CI"] = [fmt_ci(rs[j]) for rs in ratios_all]
            display[f"{lab} n"] = [fmt_n(rs[j]) for rs in ratios_all]
            display[f"{lab} verdict"] = [fmt_verdict(rs[j]) for rs in ratios_all]
    notes = [n for n in (provenance_note(canon),) if n]
    flat = [rt for rs in ratios_all for rt in rs if rt.value is not None]
    if flat and not any_ci:
        notes.append("Every ratio is a single pass: one timed run per side, so no confidence interval.")
    elif any_ci:
        notes.append("Ratios are ratios of medians. \"single pass\": one run on each side, no interval.")
        notes.append(footnote())
        notes.append(table_note(margin, margin_source, sum(r.test is not None for rs in ratios_all for r in rs)))
        looks = study_looks(canon)
        if looks > 1:
            notes.append(f"measured until decided ({looks} planned looks, study.yaml): every cell and the table "
                         f"are tested at α/{looks} = {study_alpha(canon):.4f}, so the verdict at the look where "
                         "the sweep stopped keeps its error rate ≤ α (docs/statistics.md); the intervals are "
                         f"{1 - study_alpha(canon):.1%} intervals.")
        if any(r.method == NESTED_METHOD for rs in ratios_all for r in rs):
            notes.append(f"paired cells ({NESTED_METHOD}): n counts pass pairs run back to back on both legs' resident "
                         "engines; the ratio is their geometric mean; engine instances enter through "
                         + (f"the measured bound engine_sd = {float(engine_sd):.4f} (study.yaml)" if engine_sd is not None
                            else "their block means (no engine_sd bound declared)") + " (docs/statistics.md).")
    notes.append(metric.ratio_note())
    return Table(name=name, title=title, data=pd.DataFrame(data_rows), display=display, notes=tuple(notes))


def study_margin(canon: Canonical) -> tuple[float, str]:
    """The study's equivalence margin and where it comes from: study.yaml's `margin`, else the
    default for the device kind its canonical runs were measured on."""
    declared = canon.study.extra.get("margin")
    if declared is not None:
        return float(declared), "study.yaml"
    devices = canon.dataset.records.get("device")
    device = next((str(d) for d in devices.dropna()), None) if devices is not None else None
    kind = "cpu" if default_margin(device) == MARGIN_DEFAULT["cpu"] else "gpu"
    return default_margin(device), f"the {kind.upper()} default"


def study_looks(canon: Canonical) -> int:
    """How many looks the study's sweep planned (`looks` in study.yaml, written by `sweep --until-decided`;
    1 for a fixed design)."""
    return int(canon.study.extra.get("looks") or 1)


def study_alpha(canon: Canonical) -> float:
    """The level the study's cells are tested at: alpha / looks (significance.look_alpha)."""
    return look_alpha(study_looks(canon))


def cell_ratio(canon: Canonical, a: dict | None, b: dict | None, metric: Metric, *,
               margin: float | None = None) -> Ratio:
    """The ratio of two canonical cells (old, new) as every table prints it: the paired design's nested
    rule where both cells hold paired passes, else Welch's rule on their repeats; with the study's margin
    (`study_margin`; a caller that asks for many cells passes it once). A table decides its cells
    together afterwards (`table_verdicts`)."""
    if margin is None:
        margin, _ = study_margin(canon)
    engine_sd = canon.study.extra.get("engine_sd")
    sa, sb = (tuple(a["samples"]) if a is not None else ()), (tuple(b["samples"]) if b is not None else ())
    pa, pb = (a.get("pairs") if a is not None else None), (b.get("pairs") if b is not None else None)
    alpha = study_alpha(canon)
    if pa and pb:
        return paired_cell(pa, pb, metric=metric, margin=margin, engine_sd=engine_sd, alpha=alpha)
    return ratio(sa, sb, higher_is_better=metric.higher_is_better, margin=margin, confidence=1 - alpha)


def paired_cell(old: dict, new: dict, *, metric: Metric, margin: float, engine_sd: float | None,
                alpha: float = ALPHA) -> Ratio:
    """Two legs' paired passes, matched by (engine block, round); a pass without its partner is left
    out (the pair is incomplete). The nested rule (`stats.nested_ratio`) decides; its point value is
    the geometric mean pair ratio rather than the ratio of medians."""
    blocks: dict[int, list[tuple[float, float]]] = {}
    for key in sorted(set(old) & set(new)):
        blocks.setdefault(key[0], []).append((old[key], new[key]))
    return nested_ratio(list(blocks.values()), higher_is_better=metric.higher_is_better, margin=margin,
                        engine_sd=None if engine_sd is None else float(engine_sd), confidence=1 - alpha)


def table_verdicts(rows: list[list[Ratio]], *, alpha: float = ALPHA) -> list[list[Ratio]]:
    """Every cell of a table decided together: Benjamini–Hochberg over the cells' tests at `alpha` (the
    study's level, `study_alpha`; `significance.decide_table`); each cell keeps its own interval."""
    flat = [r for rs in rows for r in rs]
    decided = decide_table([r.test for r in flat], alpha=alpha)
    it = iter(decided)
    return [[replace(r, verdict=v) if r.test is not None and v is not None else r for r, v in zip(rs, it)]
            for rs in rows]


def table_note(margin: float, source: str, tests: int) -> str:
    return (f"equivalent within ±{margin:.0%}: the interval lies inside [{1 / (1 + margin):.3f}, {1 + margin:.3f}] "
            f"(two one-sided tests; margin from {source}); verdicts over the table's {tests} tested cells decided "
            f"together ({TABLE_RULE}: the expected share of wrong verdicts among the decided ones ≤ α); "
            "\"undecided\" says how many repeats per side would likely decide it.")


def kind_table(canon: Canonical, kind: str) -> Table:
    """The kind's metric per (model, workload), one column per leg, ratios between consecutive legs."""
    return _metric_table(canon, kind, _legs(canon), kind, workloads.metric_of(kind).title)


def throughput(canon: Canonical) -> Table:
    return kind_table(canon, "throughput")


def latency(canon: Canonical) -> Table:
    return kind_table(canon, "latency")


def _leg(canon: Canonical, name_or_label: str) -> tuple[str, str]:
    for name, label in _legs(canon):
        if name_or_label in (name, label):
            return name, label
    raise UserError(f"no leg {name_or_label!r} in study {canon.study.name} "
                    f"(has: {', '.join(n for n, _ in _legs(canon))})")


def compare(canon: Canonical, leg_a: str, leg_b: str) -> tuple[Table, ...]:
    """Any two legs (names or labels), A as the old side: one table per workload kind."""
    a, b = _leg(canon, leg_a), _leg(canon, leg_b)
    if a == b:
        raise UserError(f"compare: {leg_a!r} and {leg_b!r} are the same leg")
    titles = {k: workloads.metric_of(k).title.split(" (") for k in workloads.KINDS}
    return tuple(_metric_table(canon, k, [a, b], f"compare-{k}", f"{titles[k][0]}, {a[1]} vs {b[1]} ({titles[k][1]}")
                 for k in workloads.KINDS)


def coverage(canon: Canonical) -> Table:
    """Per leg: models with a canonical measurement for every workload they have, and the others."""
    order = {m: i for i, m in enumerate(model_order(canon.dataset))}
    exp = canon.expected
    wanted = exp.groupby("model")["workload"].agg(set)
    models = sorted(wanted.index, key=lambda m: (order.get(m, len(order)), m))
    have = canon.cells.groupby(["leg", "model"])["workload"].agg(set) if len(canon.cells) else pd.Series(dtype=object)
    runs = canon.dataset.records
    runs = runs[(runs["series"] == canon.series) & (runs["arm"] == canon.arm)]
    data, disp, any_excluded = [], [], False
    for leg, label in _legs(canon):
        passing = [m for m in models if (leg, m) in have.index and wanted[m] <= have[(leg, m)]]
        missing = [m for m in models if m not in passing]
        ran = runs[runs["leg"] == leg]
        failed_models = set(ran.loc[ran["status"] != "ok", "model"])
        failing = [m for m in missing if m in failed_models]
        excluded = [m for m in missing if m not in failed_models]
        any_excluded |= bool(excluded)
        data.append({"leg": leg, "label": label, "passing": len(passing), "models": len(models),
                     "failing": ", ".join(failing), "not canonical for other reasons": ", ".join(excluded)})
        disp.append({"leg": leg, "passing": f"{len(passing)}/{len(models)}",
                     "failing": ", ".join(map(ticked, failing)) or MISSING,
                     "not canonical for other reasons": ", ".join(map(ticked, excluded)) or MISSING})
    display = pd.DataFrame(disp)
    if not any_excluded:
        display = display.drop(columns=["not canonical for other reasons"])
    notes = ("A model passes on a leg when every workload it has in the series has a canonical measurement "
             "there; see CANONICAL.md for why anything else is missing.",)
    return Table(name="coverage", title="Coverage", data=pd.DataFrame(data), display=display,
                 notes=tuple(n for n in (provenance_note(canon), *notes) if n))


# --- files ---------------------------------------------------------------------------------------

def _write_table(t: Table, stem: Path) -> list[Path]:
    stem.parent.mkdir(parents=True, exist_ok=True)
    md, csv, pq = (stem.parent / f"{stem.name}{ext}" for ext in (".md", ".csv", ".parquet"))
    md.write_text(t.markdown(), encoding="utf-8")
    t.data.to_csv(csv, index=False)
    t.data.to_parquet(pq, index=False)
    return [md, csv, pq]


def write_tables(canon: Canonical, out_dir: Path) -> list[Path]:
    """tables/{coverage,throughput,latency}.{md,csv,parquet} and compare/<a>_vs_<b>.{md,csv} for
    every pair of legs (older first), under `out_dir`. Built in a scratch folder first, so a
    failure leaves nothing half-written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".tables-", dir=out_dir))
    try:
        for t in (coverage(canon), *(kind_table(canon, k) for k in workloads.KINDS)):
            _write_table(t, scratch / "tables" / t.name)
        for (a, la), (b, lb) in combinations(_legs(canon), 2):
            per_kind = compare(canon, a, b)
            folder = scratch / "compare"
            folder.mkdir(parents=True, exist_ok=True)
            # A kind the study never measured (serving, say) gets no empty table of its own.
            shown = [x for x in per_kind if len(x.data)] or list(per_kind[:1])
            (folder / f"{a}_vs_{b}.md").write_text(f"## {la} vs {lb}\n\n" + "\n".join(x.markdown() for x in shown),
                                                  encoding="utf-8")
            pd.concat([x.data.assign(metric=workloads.metric_of(k).key) for x, k in zip(per_kind, workloads.KINDS)]
                      ).to_csv(folder / f"{a}_vs_{b}.csv", index=False)
        return _move_into(scratch, out_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _move_into(scratch: Path, out_dir: Path) -> list[Path]:
    written = []
    for src in sorted(p for p in scratch.rglob("*") if p.is_file()):
        dst = out_dir / src.relative_to(scratch)
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
        written.append(dst)
    return written
