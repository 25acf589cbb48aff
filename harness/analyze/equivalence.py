"""Same work and the same answer: the outputs of two legs' equivalence runs, prompt by prompt.

An equivalence run (harness.workloads.equivalence) decodes a fixed, seeded set of prompts greedily
and keeps, per prompt, the output token ids and the log-probabilities of every position. Two runs of
the same (model, workload, arm) on two legs did the same work on the same weights, so greedy decoding
must give the same tokens up to numerical noise. Per prompt:

- identical: the same token ids; the largest log-probability gap of the chosen tokens says how far
  the numbers moved (`LOGPROB_TOL`);
- otherwise the first diverging position, the reference leg's top-2 log-probability gap there, how
  much the reference preferred its own token to the other leg's, and the largest log-probability gap
  of the (identical) chosen tokens before it.

Verdicts (per prompt, and per pair: the worst of its prompts, in the order below):
- "different inputs": the legs did not decode the same prompt token ids (a processor or chat
  template changed); the outputs are not compared;
- "different answers": a prompt diverges where the reference leg's top choice was clear (top-2 gap at
  or above `NEAR_TIE`);
- "numerical drift": every divergence follows a near-tie on the reference leg (top-2 gap below
  `NEAR_TIE`), or the tokens are identical but a chosen token's log-probability moved by more than
  `LOGPROB_TOL`;
- "same answers": identical tokens, log-probabilities within `LOGPROB_TOL`.
- "not applicable": a side loaded dummy weights (`load_format: dummy`): each leg draws its own
  random initialisation, so different outputs say nothing.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analyze.dataset import Dataset
from harness.core.errors import UserError
from harness.workloads import equivalence as kind

# Thresholds, in nats (natural-log probability). 0.1 nats: the top two tokens' probabilities within
# about 10% of each other, where a last-bit difference in a matmul's summation order can swap them.
NEAR_TIE = 0.1
# Float32 on one machine repeats to about 1e-6 nats; 1e-3 is far above that and far below what a
# lower precision (bfloat16 keeps 8 bits of mantissa: about 4e-3 relative) moves.
LOGPROB_TOL = 1e-3

SAME, DRIFT, DIFFERENT, INPUTS, NA = ("same answers", "numerical drift", "different answers",
                                      "different inputs", "not applicable")
# Worst first: a pair's verdict is the first of these any of its prompts has.
ORDER = (INPUTS, DIFFERENT, DRIFT, SAME)


def thresholds_text() -> str:
    return (f"Thresholds: a divergence is numerical drift when the reference leg's top-2 log-probability gap at "
            f"the diverging position is below {NEAR_TIE:g} nats, different answers otherwise; identical tokens "
            f"whose chosen log-probabilities differ by more than {LOGPROB_TOL:g} nats are numerical drift too. "
            f"Dummy-weight runs are not applicable (each leg initialises its own random weights).")


@dataclass(frozen=True, kw_only=True)
class PromptDiff:
    i: int
    verdict: str
    identical: bool
    diverge_at: int | None = None          # first position where the token ids differ
    ref_token: int | None = None
    other_token: int | None = None
    ref_top2_gap: float | None = None      # reference leg, at the diverging position
    other_top2_gap: float | None = None
    ref_margin: float | None = None        # ref lp(ref token) - ref lp(other token) at divergence
    ref_margin_at_least: bool = False      # the other token is outside the reference's top-k: a lower bound
    lp_gap_before: float | None = None     # max |lp_ref - lp_other| of the chosen tokens before divergence
    ref_eos_at: int | None = None
    other_eos_at: int | None = None


def _top2_gap(top: list) -> float | None:
    return float(top[0][1]) - float(top[1][1]) if len(top) >= 2 else None


def _lp_gap(a: list, b: list) -> float | None:
    gaps = [abs(float(x) - float(y)) for x, y in zip(a, b) if x is not None and y is not None]
    return max(gaps) if gaps else None


def compare_prompt(ref: dict[str, Any], other: dict[str, Any], *, near_tie: float = NEAR_TIE,
                   tol: float = LOGPROB_TOL) -> PromptDiff:
    """One prompt's outputs on the reference side and the other side (rows of outputs.jsonl.gz)."""
    base = {"i": int(ref["i"]), "ref_eos_at": ref.get("eos_at"), "other_eos_at": other.get("eos_at")}
    if ref.get("prompt_sha256") != other.get("prompt_sha256"):
        return PromptDiff(**base, verdict=INPUTS, identical=False)
    # What a request returns ends at its first EOS: anything decoded past it (ignore_eos) is not an answer.
    a, b = (list(r["token_ids"])[:r["eos_at"] + 1] if r.get("eos_at") is not None else list(r["token_ids"])
            for r in (ref, other))
    j = next((p for p, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if j is None and len(a) == len(b):
        gap = _lp_gap(ref["logprobs"], other["logprobs"])
        return PromptDiff(**base, verdict=DRIFT if gap is not None and gap > tol else SAME, identical=True,
                          lp_gap_before=gap)
    j = min(len(a), len(b)) if j is None else j    # one side stopped earlier: it diverged there
    ref_top = ref["top"][j] if j < len(ref["top"]) else []
    oth_top = other["top"][j] if j < len(other["top"]) else []
    gap = _top2_gap(ref_top)
    rt, ot = (a[j] if j < len(a) else None), (b[j] if j < len(b) else None)
    margin, at_least = None, False
    if ref_top and rt is not None:
        mine = ref["logprobs"][j]
        theirs = next((float(lp) for tid, lp in ref_top if tid == ot), None)
        if mine is not None and theirs is not None:
            margin = float(mine) - theirs
        elif mine is not None:
            margin, at_least = float(mine) - float(ref_top[-1][1]), True
    # No top-2 on the reference (logprobs absent) cannot show a near-tie: the divergence counts as clear.
    verdict = DRIFT if gap is not None and gap < near_tie else DIFFERENT
    return PromptDiff(**base, verdict=verdict, identical=False, diverge_at=j, ref_token=rt, other_token=ot,
                      ref_top2_gap=gap, other_top2_gap=_top2_gap(oth_top), ref_margin=margin,
                      ref_margin_at_least=at_least, lp_gap_before=_lp_gap(ref["logprobs"][:j], other["logprobs"][:j]))


@dataclass(frozen=True, kw_only=True)
class Side:
    """One run's outputs: the leg and arm it ran on, its folder (relative to the study) and its rows."""
    leg: str
    label: str
    arm: str
    run_dir: str
    rows: list[dict[str, Any]] | None = None
    dummy: bool = False
    problem: str = ""                      # why the rows could not be read


@dataclass(frozen=True, kw_only=True)
class Comparison:
    model: str
    workload: str
    arm: str
    ref: str                               # labels; the reference is the older leg
    other: str
    verdict: str
    prompts: int = 0
    identical: int = 0
    drift: int = 0
    different: int = 0
    inputs_differ: int = 0
    first_divergence: list[int] = field(default_factory=list)   # per diverging prompt
    lp_gap: float | None = None            # max chosen-token log-probability gap before any divergence
    min_top2_gap: float | None = None      # smallest reference top-2 gap at a divergence
    reason: str = ""
    diffs: list[PromptDiff] = field(default_factory=list)
    run_dirs: tuple[str, str] = ("", "")

    @property
    def share_identical(self) -> float | None:
        return self.identical / self.prompts if self.prompts else None


def compare_outputs(ref: list[dict[str, Any]], other: list[dict[str, Any]], *, near_tie: float = NEAR_TIE,
                    tol: float = LOGPROB_TOL) -> tuple[str, list[PromptDiff], str]:
    """(verdict, per-prompt diffs, reason) of two runs' rows, matched by prompt index."""
    theirs = {int(r["i"]): r for r in other}
    if sorted(theirs) != sorted(int(r["i"]) for r in ref):
        return INPUTS, [], f"the runs decoded different prompt sets ({len(ref)} vs {len(other)} prompts)"
    diffs = [compare_prompt(r, theirs[int(r["i"])], near_tie=near_tie, tol=tol) for r in ref]
    verdict = next((v for v in ORDER if any(d.verdict == v for d in diffs)), SAME)
    return verdict, diffs, ""


def compare_sides(model: str, workload: str, a: Side, b: Side) -> Comparison:
    head = {"model": model, "workload": workload, "arm": a.arm if a.arm == b.arm else f"{a.arm} vs {b.arm}",
            "ref": a.label if a.arm == b.arm else f"{a.label} {a.arm}", "other": b.label if a.arm == b.arm else
            f"{b.label} {b.arm}", "run_dirs": (a.run_dir, b.run_dir)}
    if a.dummy or b.dummy:
        return Comparison(**head, verdict=NA, reason="dummy weights (load_format: dummy): each leg initialises "
                                                      "its own random weights")
    for s in (a, b):
        if s.rows is None:
            return Comparison(**head, verdict="missing", reason=f"{s.label}: {s.problem}")
    verdict, diffs, reason = compare_outputs(a.rows or [], b.rows or [])
    div = [d for d in diffs if d.diverge_at is not None]
    gaps = [d.lp_gap_before for d in diffs if d.lp_gap_before is not None]
    tops = [d.ref_top2_gap for d in div if d.ref_top2_gap is not None]
    return Comparison(**head, verdict=verdict, prompts=len(diffs), identical=sum(d.identical for d in diffs),
                      drift=sum(d.verdict == DRIFT for d in diffs), different=sum(d.verdict == DIFFERENT for d in diffs),
                      inputs_differ=sum(d.verdict == INPUTS for d in diffs),
                      first_divergence=[int(d.diverge_at) for d in div if d.diverge_at is not None],
                      lp_gap=max(gaps) if gaps else None, min_top2_gap=min(tops) if tops else None,
                      reason=reason, diffs=diffs)


# --- from a study -------------------------------------------------------------------------------

def _side(ds: Dataset, r: dict[str, Any]) -> Side:
    run_dir = Path(ds.root) / str(r["run_dir"])
    base = {"leg": r["leg"], "label": ds.study.label(r["leg"]), "arm": r["arm"], "run_dir": str(r["run_dir"])}
    rec = ds.record(str(r["run_dir"]))
    if str((rec.engine_args or {}).get("load_format", "")).lower() == "dummy":
        return Side(**base, dummy=True)
    kept = rec.work.outputs
    if not kept:
        return Side(**base, problem=f"{run_dir / 'results.json'}: the record keeps no outputs")
    try:
        return Side(**base, rows=ds.outputs(str(r["run_dir"])))
    except (OSError, ValueError, EOFError) as e:
        return Side(**base, problem=str(e))


def sides(ds: Dataset, *, series: str | None = None) -> dict[tuple[str, str, str, str], Side]:
    """(leg, model, workload, arm) -> the outputs of its first passing equivalence run (lowest repeat)
    of the series, runs measured under --allow-dirty left out."""
    df = ds.records
    series = series or ds.study.main_series
    sel = df[(df["kind"] == kind.NAME) & (df["status"] == "ok") & (df["series"] == series)
             & ~df["allow_dirty"].astype(bool)]
    out: dict[tuple[str, str, str, str], Side] = {}
    for r in sel.sort_values(["repeat"], kind="stable").to_dict("records"):
        key = (r["leg"], r["model"], r["workload"], r["arm"])
        if key not in out:
            out[key] = _side(ds, r)
    return out


def _leg_order(ds: Dataset) -> list[str]:
    legs = [x.name for x in ds.study.legs]
    for leg in ds.records["leg"]:
        if leg not in legs:
            legs.append(leg)
    return legs


def _pick(ds: Dataset, name: str) -> str:
    for leg in _leg_order(ds):
        if name in (leg, ds.study.label(leg)):
            return leg
    raise UserError(f"{ds.root}: no leg {name!r} in study {ds.study.name} (has: {', '.join(_leg_order(ds))})")


def compare_study(ds: Dataset, legs: tuple[str, str] | None = None, *, series: str | None = None) -> list[Comparison]:
    """Every (model, workload, arm) of the study's equivalence runs, between consecutive legs (older
    leg as the reference), or between the two `legs` given (names or labels; the first is the reference)."""
    if legs is not None:
        a, b = _pick(ds, legs[0]), _pick(ds, legs[1])
        if a == b:
            raise UserError(f"{ds.root}: equivalence --legs {legs[0]!r} {legs[1]!r} name the same leg ({a}); a leg "
                            f"compared with itself says nothing")
        pairs = [(a, b)]
    else:
        order = _leg_order(ds)
        pairs = list(zip(order, order[1:]))
    got = sides(ds, series=series)
    df = ds.records
    ran = df[(df["kind"] == kind.NAME) & (df["series"] == (series or ds.study.main_series))]
    # Every (model, workload, arm) that has an equivalence run, passing or not: a missing side is said.
    cells = list(dict.fromkeys(zip(ran["model"], ran["workload"], ran["arm"])))
    out = []
    for a, b in pairs:
        for model, workload, arm in cells:
            sa, sb = got.get((a, model, workload, arm)), got.get((b, model, workload, arm))
            if sa is None or sb is None:
                gone = " or ".join(ds.study.label(x) for x, s in ((a, sa), (b, sb)) if s is None)
                head = {"model": model, "workload": workload, "arm": arm, "ref": ds.study.label(a),
                        "other": ds.study.label(b)}
                out.append(Comparison(**head, verdict="missing", reason=f"no passing equivalence run on {gone}"))
                continue
            out.append(compare_sides(model, workload, sa, sb))
    return out


@dataclass(frozen=True, kw_only=True)
class StepVerdict:
    model: str
    step: str                              # "0.27 → 0.32", as the answer table names a step
    verdict: str
    workloads: tuple[str, ...]
    note: str = ""


def equivalence_by_step(ds: Dataset, *, arm: str = "default") -> dict[tuple[str, str], StepVerdict]:
    """(model, step) -> the equivalence verdict between consecutive legs, the worst over the model's
    equivalence workloads of `arm`; absent where the study has no equivalence run for the model."""
    out: dict[tuple[str, str], StepVerdict] = {}
    rank = {v: i for i, v in enumerate((INPUTS, DIFFERENT, "missing", DRIFT, SAME, NA))}
    for c in compare_study(ds):
        if c.arm != arm:
            continue
        step = f"{c.ref} → {c.other}"
        prev = out.get((c.model, step))
        if prev is None or rank.get(c.verdict, 0) < rank.get(prev.verdict, 0):
            wl = (prev.workloads if prev else ()) + (c.workload,)
            out[(c.model, step)] = StepVerdict(model=c.model, step=step, verdict=c.verdict, workloads=wl,
                                               note=_summary(c))
        else:
            out[(c.model, step)] = StepVerdict(**{**prev.__dict__, "workloads": prev.workloads + (c.workload,)})
    return out


# --- printing -----------------------------------------------------------------------------------

def _num(v: float | None, spec: str = ".2g") -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _summary(c: Comparison) -> str:
    if c.verdict in (NA, "missing"):
        return c.reason
    parts = [f"{c.identical}/{c.prompts} prompts identical"]
    if c.first_divergence:
        parts.append(f"first divergence at token {min(c.first_divergence)}")
    return ", ".join(parts)


def equivalence_frame(comps: list[Comparison]) -> pd.DataFrame:
    """One row per comparison, numbers only (the CSV)."""
    rows = [{"model": c.model, "workload": c.workload, "arm": c.arm, "reference": c.ref, "other": c.other,
             "verdict": c.verdict, "prompts": c.prompts, "identical": c.identical,
             "share_identical": c.share_identical, "drift": c.drift, "different": c.different,
             "inputs_differ": c.inputs_differ,
             "first_divergence_min": min(c.first_divergence) if c.first_divergence else None,
             "first_divergence": " ".join(map(str, c.first_divergence)), "max_logprob_gap": c.lp_gap,
             "min_top2_gap_at_divergence": c.min_top2_gap, "near_tie_nats": NEAR_TIE, "logprob_tol_nats": LOGPROB_TOL,
             "reason": c.reason, "reference_run": c.run_dirs[0], "other_run": c.run_dirs[1]} for c in comps]
    return pd.DataFrame(rows)


def equivalence_md(comps: list[Comparison], *, title: str = "Output equivalence") -> str:
    from harness.analyze.fmt import markdown_table, ticked

    lines = [f"### {title}", ""]
    if not comps:
        return "\n".join(lines + ["No equivalence runs to compare.", ""])
    show = pd.DataFrame([{
        "model": ticked(c.model), "workload": c.workload, "arm": c.arm, "step": f"{c.ref} → {c.other}",
        "identical": f"{c.identical}/{c.prompts}" if c.prompts else "—",
        "first divergence": (f"{min(c.first_divergence)} (of {len(c.first_divergence)} prompts)"
                             if c.first_divergence else "—"),
        "max log-prob gap": _num(c.lp_gap), "min top-2 gap at divergence": _num(c.min_top2_gap),
        "verdict": c.verdict + (f" ({c.reason})" if c.reason else ""),
    } for c in comps])
    lines += [markdown_table(show), "", f"_{thresholds_text()}_",
              "", "_First divergence: the earliest output position where the token ids differ (0 = the first "
              "generated token). Max log-prob gap: the largest difference of a chosen token's log-probability "
              "between the two sides at positions before any divergence. Top-2 gap: the reference leg's "
              "log-probability of its best token minus its second best, at the diverging position._", ""]
    diverged = [(c, d) for c in comps for d in c.diffs if d.diverge_at is not None]
    if diverged:
        rows = [{"model · workload": f"{ticked(c.model)} · {c.workload}", "step": f"{c.ref} → {c.other}",
                 "prompt": d.i, "position": d.diverge_at, "tokens": f"{d.ref_token} vs {d.other_token}",
                 "ref top-2 gap": _num(d.ref_top2_gap, ".3g"), "other top-2 gap": _num(d.other_top2_gap, ".3g"),
                 "ref margin": ("≥ " if d.ref_margin_at_least else "") + _num(d.ref_margin, ".3g"),
                 "gap before": _num(d.lp_gap_before), "verdict": d.verdict} for c, d in diverged]
        lines += ["#### Diverging prompts", "", markdown_table(pd.DataFrame(rows)), "",
                  "_Ref margin: the reference leg's log-probability of its own token minus that of the other "
                  "leg's token (≥: the other token was outside the reference's top-k)._", ""]
    return "\n".join(lines)


def write_equivalence(ds: Dataset, out_dir: Path) -> list[Path]:
    """output-equivalence.md and .csv under `out_dir` (beside the kind's own speed table, equivalence.*),
    for a study with equivalence runs; nothing for any other study."""
    if not (ds.records["kind"] == kind.NAME).any():
        return []
    comps = compare_study(ds)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (("output-equivalence.md", equivalence_md(comps)),
                       ("output-equivalence.csv", equivalence_frame(comps).to_csv(index=False))):
        path = out_dir / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        written.append(path)
    return written
