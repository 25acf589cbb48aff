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
import shutil
import tempfile
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import pandas as pd

from harness import workloads
from harness.analyze import capacity as acap
from harness.analyze.canonical import Canonical, provenance_note
from harness.core.errors import UserError
from harness.analyze.fmt import (MISSING, fmt_ci, fmt_ms, fmt_ratio, fmt_tok_s, fmt_verdict, markdown_table,  # noqa: F401
                                 short_labels, ticked)
from harness.analyze.order import _legs, leg_pairs, model_order, order_frame, row_key  # noqa: F401
from harness.workloads.base import Metric
from harness.analyze.significance import METHOD, NESTED_METHOD, footnote
from harness.analyze.verdicts import (CellVerdict, StudyVerdicts, cell_ratio, paired_cell, study_alpha,  # noqa: F401
                                      study_looks, study_margin, study_verdicts)

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

# A serve workload with a capacity search is judged by its capacity at the SLO (harness.analyze.verdicts),
# not by its kind's own metric (for serve, peak throughput): its rows have a table of their own, so that a row's figures
# are what its ratio and verdict are computed from.
CAPACITY = Metric(key="capacity", unit="req/s", higher_is_better=True, digits=2,
                  title="Serving: capacity at the SLO (req/s, higher is better; per leg the median over its searches)")
HALF_PASS = Metric(key="capacity", unit="req/s", higher_is_better=True, digits=2,
                   title="Serving: half-pass rate at the SLO (req/s, higher is better; per leg the median over its "
                         "servers, harness.analyze.halfpass)")

def _ratio_label(kind: str, old: str, new: str, short: dict[str, str]) -> str:
    return workloads.metric_of(kind).ratio_label(short[old], short[new])


def _metric_table(canon: Canonical, kind: str, legs: list[tuple[str, str]], name: str, title: str,
                  capacity: bool = False) -> Table:
    """The kind's metric per (model, workload) and leg, and per pair of neighbouring legs in `legs` the
    cell's verdict as the study decided it (`verdicts.study_verdicts`: read, never recomputed here).
    `capacity`: only the rows of serve workloads that searched for a capacity, their figures the capacities
    (the kind's own table leaves those rows out)."""
    metric = CAPACITY if capacity else workloads.metric_of(kind)
    sv = study_verdicts(canon)
    caps = sv.capacities   # keyed by (model, workload): only a searching kind's rows are in it

    def fmt(v: float | None) -> str:
        return MISSING if v is None or pd.isna(v) else metric.fmt(v)
    all_labels = [lb for _, lb in _legs(canon)]
    short = short_labels(all_labels)
    exp = canon.expected[canon.expected["kind"] == kind]
    rows = order_frame(canon, exp.drop_duplicates(["model", "workload"])[["model", "workload", "tp"]])
    rows = rows.loc[[((m, w) in caps) == capacity for m, w in zip(rows["model"], rows["workload"])]]
    # Plain dict lookups: a table is built per leg pair, and frames are slow to index cell by cell.
    cells = {(c["leg"], c["model"], c["workload"]): c for c in canon.cells.to_dict("records")}
    pairs = list(zip(legs, legs[1:]))
    data_rows, disp_rows, shown = [], [], []
    verdicts_all: list[list[CellVerdict | None]] = []
    for r in rows.to_dict("records"):
        model, workload = r["model"], r["workload"]
        d: dict[str, object] = {"model": model, "tp": int(r["tp"]), "workload": workload}
        s: dict[str, object] = {"model": ticked(model), "tp": str(d["tp"]), "workload": workload}
        for leg, label in legs:
            if capacity:
                found = caps[(model, workload)].get(leg, [])
                d[label] = acap.center(found)
                d[f"{label} n"] = len(found)
            else:
                c = cells.get((leg, model, workload))
                d[label] = float(c["value"]) if c is not None else None
                d[f"{label} n"] = int(c["n"]) if c is not None else 0
            s[label] = fmt(d[label])
        vs: list[CellVerdict | None] = []
        for (old, old_lb), (new, new_lb) in pairs:
            lab = _ratio_label(kind, old_lb, new_lb, short)
            v = sv.get(kind, model, workload, old, new)
            vs.append(v)
            if v is not None and v.verdict != "missing":
                shown.append(v)
            # The columns a CSV or Parquet reader gets: the same object the page prints.
            d[lab] = v.table_ratio if v is not None else None
            d[f"{lab} low"], d[f"{lab} high"] = (v.low, v.high) if v is not None and v.confidence else (None, None)
            d[f"{lab} verdict"] = v.verdict if v is not None else "missing"
            d[f"{lab} verdict text"] = v.text if v is not None else "missing"
            d[f"{lab} rule"] = v.rule_text if v is not None else None
            d[f"{lab} unit"] = v.unit if v is not None else None
            d[f"{lab} units"] = v.units if v is not None else 0
            d[f"{lab} family"] = v.family_text if v is not None else None
            d[f"{lab} p"] = v.p if v is not None else None
            d[f"{lab} p adjusted"] = v.p_adj if v is not None else None
            s[lab] = f"{v.table_ratio:.2f}x" if v is not None and v.table_ratio is not None else MISSING
        verdicts_all.append(vs)
        data_rows.append(d)
        disp_rows.append(s)
    display = pd.DataFrame(disp_rows, columns=["model", "tp", "workload", *[lb for _, lb in legs],
                                               *[_ratio_label(kind, a[1], b[1], short) for a, b in pairs]])
    any_ci = any(v.confidence for v in shown)
    if any_ci:
        for j, (a, b) in enumerate(pairs):
            lab = _ratio_label(kind, a[1], b[1], short)
            # A study measured until decided tests at alpha / looks: its intervals are that much wider.
            level = "95%" if study_looks(canon) == 1 else f"{1 - study_alpha(canon):.1%}"
            display[f"{lab} {level} CI"] = [vs[j].interval_text if vs[j] is not None else "" for vs in verdicts_all]
            display[f"{lab} units"] = [vs[j].units_text if vs[j] is not None and vs[j].ratio is not None else MISSING
                                       for vs in verdicts_all]
            display[f"{lab} verdict"] = [vs[j].text if vs[j] is not None else MISSING for vs in verdicts_all]
    notes = [n for n in (provenance_note(canon),) if n]
    if shown and not any_ci:
        notes.append("No ratio has a confidence interval: each has a side with one run (an interval needs two a side)."
                     if any(v.n_old > 1 or v.n_new > 1 for v in shown) else
                     "Every ratio is a single pass: one timed run per side, so no confidence interval.")
    elif any_ci:
        notes += rule_notes(sv, shown)
    notes.append(metric.ratio_note())
    return Table(name=name, title=title, data=pd.DataFrame(data_rows), display=display, notes=tuple(notes))


def rule_notes(sv: StudyVerdicts, shown: list[CellVerdict]) -> list[str]:
    """The lines under a table of verdicts: the rules its cells were decided by (only those: a paired
    table carries no repeat-rule footnote), the family, and the study's level."""
    canon = sv.canon
    out = []
    rules = {v.rule for v in shown if v.ratio is not None}
    if METHOD in rules:
        out.append("Ratios of medians where the rule is Welch's. \"single pass\": one run on each side, no interval.")
        out.append(footnote())
    if NESTED_METHOD in rules:
        engine_sd = canon.study.extra.get("engine_sd")
        out.append(f"paired cells ({NESTED_METHOD}): the ratio is the geometric mean of pass pairs run back to back on "
                   "both legs' resident engines; the units column counts the engine blocks (fresh engines per block) "
                   "and the pairs inside them; "
                   + (f"with the declared bound engine_sd = {float(engine_sd):.4f} (study.yaml) the pairs are the units "
                      "where a cell's blocks agree with it, its block means otherwise"
                      if engine_sd is not None else "the units are the block means (no engine_sd bound declared), so "
                      "the interval has blocks − 1 degrees of freedom")
                   + " (docs/statistics.md).")
    fams = {(v.family, v.family_size) for v in shown if v.p_adj is not None}
    for fam, _ in sorted(fams):
        v = next(x for x in shown if x.family == fam and x.p_adj is not None)
        out.append(table_note(sv.margin, sv.margin_source, v.family_text))
    looks = study_looks(canon)
    if looks > 1:
        out.append(f"measured until decided ({looks} planned looks, study.yaml): every cell and the family "
                   f"are tested at α/{looks} = {study_alpha(canon):.4f}, so the verdict at the look where "
                   "the sweep stopped keeps its error rate ≤ α (docs/statistics.md); the intervals are "
                   f"{1 - study_alpha(canon):.1%} intervals.")
    return out


def table_note(margin: float, source: str, family: str) -> str:
    return (f"equivalent within ±{margin:.0%}: the interval lies inside [{1 / (1 + margin):.3f}, {1 + margin:.3f}] "
            f"(two one-sided tests; margin from {source}); verdicts decided together by {family} (the expected "
            "share of wrong verdicts among the decided ones ≤ α), the same verdicts on every view of the study; "
            "\"undecided\" says how many units would likely decide it, or that the cell is decided alone but not "
            "across its family.")


def kind_table(canon: Canonical, kind: str) -> Table:
    """The kind's metric per (model, workload), one column per leg, ratios between consecutive legs."""
    return _metric_table(canon, kind, _legs(canon), kind, workloads.metric_of(kind).title)


def _capacity_kind(canon: Canonical) -> str | None:
    """The workload kind whose rows searched for a capacity (a server kind), None where none did."""
    caps = study_verdicts(canon).capacities
    exp = canon.expected
    kinds = [k for m, w, k in zip(exp["model"], exp["workload"], exp["kind"]) if (m, w) in caps]
    return kinds[0] if kinds else None


def capacity_table(canon: Canonical) -> Table | None:
    """Per workload that searched: the capacity at the SLO per leg, ratios between consecutive legs."""
    kind = _capacity_kind(canon)
    if kind is None:
        return None
    # A study of steady grids alone is titled for what its figures are: half-pass rates, not searches.
    sv = study_verdicts(canon)
    title = HALF_PASS.title if sv.half_pass and set(sv.capacities) <= sv.half_pass else CAPACITY.title
    return _metric_table(canon, kind, _legs(canon), "capacity", title, capacity=True)


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
    titles = {k: workloads.metric_of(k).title.split(" (", 1) for k in workloads.KINDS}
    out = [_metric_table(canon, k, [a, b], f"compare-{k}", f"{titles[k][0]}, {a[1]} vs {b[1]} ({titles[k][1]}")
           for k in workloads.KINDS]
    kind = _capacity_kind(canon)
    if kind is not None:
        head, tail = CAPACITY.title.split(" (", 1)
        out.append(_metric_table(canon, kind, [a, b], "compare-capacity", f"{head}, {a[1]} vs {b[1]} ({tail}",
                                 capacity=True))
    return tuple(out)


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
        # The capacity table only where a search ran, so that other studies' folders keep their files.
        extra = [t for t in (capacity_table(canon),) if t is not None]
        for t in (coverage(canon), *(kind_table(canon, k) for k in workloads.KINDS), *extra):
            _write_table(t, scratch / "tables" / t.name)
        for (a, la), (b, lb) in combinations(_legs(canon), 2):
            per_kind = compare(canon, a, b)
            folder = scratch / "compare"
            folder.mkdir(parents=True, exist_ok=True)
            # A kind the study never measured (serving, say) gets no empty table of its own.
            shown = [x for x in per_kind if len(x.data)] or list(per_kind[:1])
            (folder / f"{a}_vs_{b}.md").write_text(f"## {la} vs {lb}\n\n" + "\n".join(x.markdown() for x in shown),
                                                  encoding="utf-8")
            keys = {f"compare-{k}": workloads.metric_of(k).key for k in workloads.KINDS} | {"compare-capacity": CAPACITY.key}
            pd.concat([x.data.assign(metric=keys[x.name]) for x in per_kind]
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
