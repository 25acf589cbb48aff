"""Forced-backend arms ("The MoE kernel is not the explanation"): throughput per (leg, arm), the MoE
routing each run logged (prepare/finalize class, SM split; parsed by `harness.core.logs`), refused
arms with their refusal, and what the arms say about the routing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness import workloads
from harness.analyze.canonical import canonicalize
from harness.analyze.dataset import Dataset
from harness.analyze.failure import signature
from harness.analyze.stats import Ratio, ratio, spread
from harness.analyze.tables import MISSING, fmt_ci, fmt_ratio
from harness.core.errors import UserError
from harness.core.logs import log_facts, pf_mode, sm_short
from harness.analyze.studies.common import (fmt_value, in_order, is_present, names, pick_one, record_of, run_log,
                                        scenario_order, series_records, why_failed)


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
        got = log_facts(run_log(ds, d))
        src = "run.log"
        man = record_of(ds, d).manifest
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

    Routing: run.log parsed by `harness.core.logs.LOG_FACTS`; transcribed records carry it as manifest keys
    `moe_prepare_finalize` / `moe_sm_split` instead. `reference` ("LEG:ARM", default: the first row
    that ran) is the row every other row is compared with (ratio and its Welch t 95% interval, > 1 is faster).
    Row order: legs in study order, arms in the scenario's order where one is given.
    """
    where = f"{ds.root} series {series}"
    recs = series_records(ds, series)
    model = pick_one(recs["model"], model, "model", where)
    recs = recs[recs["model"] == model]
    workload = pick_one(recs["workload"], workload, "workload", where)
    recs = recs[recs["workload"] == workload]
    _, _, sc_arms = scenario_order(scenario)
    leg_sel, arm_sel = names(legs), names(arms)
    leg_order = [lg for lg in in_order(recs["leg"], ds.study.leg_names) if not leg_sel or lg in leg_sel]
    arm_order = [a for a in in_order(recs["arm"], sc_arms) if not arm_sel or a in arm_sel]
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
            rec0 = record_of(ds, runs["run_dir"].iloc[0])
            sig = failed["failure_signature"].dropna()
            sig_id = sig.iloc[0] if len(sig) else None
            sig_obj = signature(sig_id) if sig_id else None
            reason = pd.Series([why_failed(r) for r in failed.to_dict("records")], dtype=object)
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
    # The reference against itself is 1.00x by definition, not a ratio of its repeats.
    higher = workloads.metric_of(kind).higher_is_better
    ratios = [Ratio(value=1.0) if me else
              ratio(ref_samples, s, higher_is_better=higher) if s and ref_samples else Ratio(value=None)
              for s, me in zip(table["samples"], is_ref)]
    table["vs_reference"] = [r.value for r in ratios]
    table["vs_reference_low"] = [r.low for r in ratios]
    table["vs_reference_high"] = [r.high for r in ratios]
    table["vs_reference_verdict"] = ["reference" if me else r.verdict for r, me in zip(ratios, is_ref)]
    unit = workloads.metric_of(kind).unit
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
        "SM split": [sm_short(x) or ("none" if n and src != "not logged" and p else MISSING)
                     for x, n, src, p in zip(table["sm_split"], table["n"], table["routing_source"],
                                             table["prepare_finalize"])],
        "routing from": table["routing_source"],
        "refusal / failure": [MISSING if not is_present(r) else str(r) for r in table["reason"]],
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
    unit = workloads.metric_of(arms.kind).unit

    def routing(r: pd.Series) -> str:
        if not isinstance(r["mode"], str):
            return "routing not logged"
        split = sm_short(r["sm_split"])
        return f"{r['mode']}, {split if split and split != 'none' else 'no SM split'}"

    out.append(f"Reference {ref_label}: {fmt_value(ref['value'], arms.kind)} {unit} ({routing(ref)}).")
    others = t[(t["leg"] != ref["leg"]) & (t["n"] > 0)]
    same_leg = t[(t["leg"] == ref["leg"]) & (t["n"] > 0) & (t["arm"] != ref["arm"])]
    for group in (others, same_leg):
        for r in group.itertuples():
            ci = f" [{r.vs_reference_low:.2f}, {r.vs_reference_high:.2f}]" if is_present(r.vs_reference_low) else ""
            same = (bool(ref["mode"]) and r.mode == ref["mode"]
                    and (sm_short(r.sm_split) or "none") == (sm_short(ref["sm_split"]) or "none"))
            tag = " — the reference's routing" if same else ""
            verdict = f", {r.vs_reference_verdict}" if r.vs_reference_verdict not in ("single pass", "missing") else ""
            out.append(f"{r.leg_label} {r.arm}: {fmt_value(r.value, arms.kind)} {unit}, {r.vs_reference:.2f}x of "
                       f"the reference{ci}{verdict} ({routing(pd.Series(r._asdict()))}{tag}).")
    if len(others):
        has_mode = bool(ref["mode"])
        same_routing = others[[bool(has_mode and m == ref["mode"]
                                    and (sm_short(s) or "none") == (sm_short(ref["sm_split"]) or "none"))
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
