"""The single-variable falsification matrix ("The cutlass chain, end to end"): arm x model -> exit
status, and which single change flips every outcome of the baseline row."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.analyze.dataset import Dataset
from harness.core.errors import UserError
from harness.analyze.studies.common import in_order, names, record_of, scenario_order, series_records, why_failed
from harness.schema.record import RunRecord


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


def _change_md(change: str) -> str:
    """An arm's change as text for markdown: each flag, variable and pin in code markup, so that a
    typesetter does not turn a flag's `--` into a dash."""
    out = []
    for part in change.split("; ") if change else []:
        head, sep, tail = part.partition(" (baseline ")
        m = re.fullmatch(r"(pin |unpin |without )?(\S+(?: \S+)?)", head)
        if m and (m.group(1) or head.startswith("--") or re.match(r"\w+=", head)):
            head = f"{m.group(1) or ''}`{m.group(2)}`"
        out.append(head + (f"{sep}`{tail[:-1]}`)" if sep else ""))
    return "; ".join(out)


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
    recs = series_records(ds, series)
    leg_sel = names(legs)
    if leg_sel:
        recs = recs[recs["leg"].isin(leg_sel)]
    sc_models, _, sc_arms = scenario_order(scenario)
    if baseline not in set(recs["arm"]):
        raise UserError(f"{where}: no baseline arm {baseline!r} (arms: {', '.join(dict.fromkeys(recs['arm']))})")
    models = in_order(recs["model"], sc_models)
    arm_order = in_order(recs["arm"], sc_arms)
    arm_order.remove(baseline)
    arm_order.insert(0, baseline)
    leg_order = in_order(recs["leg"], ds.study.leg_names)
    legs_of = {a: [lg for lg in leg_order if ((recs["arm"] == a) & (recs["leg"] == lg)).any()] for a in arm_order}
    base_leg = legs_of[baseline][0]
    if len(legs_of[baseline]) > 1:
        raise UserError(f"{where}: the baseline arm {baseline!r} ran on several legs ({', '.join(legs_of[baseline])}); "
                        "choose one with legs=")
    base_run = recs[(recs["arm"] == baseline) & (recs["leg"] == base_leg)]["run_dir"].iloc[0]
    base_spec = _what_ran(record_of(ds, base_run))
    labels, row_info = [], []
    for a in arm_order:
        for lg in legs_of[a]:
            label = a if len(legs_of[a]) == 1 else f"{a} ({ds.study.label(lg)})"
            rec = record_of(ds, recs[(recs["arm"] == a) & (recs["leg"] == lg)]["run_dir"].iloc[0])
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
                rec = record_of(ds, r.run_dir)
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
                    reasons.at[info["row"], m] = why_failed(r._asdict())
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
        return ", ".join(f"`{r}` ({_change_md(matrix.rows.at[r, 'change']) or 'no change'})" for r in rows)

    if len(every) == 1:
        r = every[0]
        single = matrix.rows.at[r, "n_changes"] == 1
        row_state = _state([bool(x) for x in matrix.passed.loc[r, base_models].tolist()])
        parts.append(f"Only `{r}` flips every outcome: {n} of {n} model(s) {base_state} under the baseline "
                     f"`{matrix.baseline}` and {row_state} under `{r}`, which changes "
                     f"{'one thing' if single else str(matrix.rows.at[r, 'n_changes']) + ' things'}: "
                     f"{_change_md(matrix.rows.at[r, 'change'])}.")
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
