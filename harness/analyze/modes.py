"""Does the paired design change any number? Two series of one study measured the same legs, one in
the paired, interleaved design and one serially (one engine per group or per run); per (model,
workload), the ratio of their version ratios, with its interval.

If pairing only removes noise, the two modes estimate one version ratio and their ratio is 1 within
its interval. Each mode's ratio comes from its own rule (the nested paired rule; Welch's on repeats),
exactly as its table prints it; the two are independent measurements, so on the log scale the
difference has variance se_paired^2 + se_serial^2, with Welch–Satterthwaite degrees of freedom.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from harness import workloads
from harness.analyze.canonical import canonicalize
from harness.analyze.dataset import Dataset
from harness.analyze.significance import ALPHA, Test
from harness.analyze.stats import Ratio


@dataclass(frozen=True, kw_only=True)
class ModeRow:
    model: str
    workload: str
    paired: Ratio
    serial: Ratio
    value: float | None          # paired ratio ÷ serial ratio (geometric means)
    low: float | None
    high: float | None


def _log_point(r: Ratio) -> tuple[float, Test] | None:
    t = r.test
    if t is None or not (t.se > 0) or not math.isfinite(t.df):
        return None
    return math.log(t.ratio), t


def mode_agreement(ds: Dataset, *, paired: str, serial: str, old: str, new: str,
                   alpha: float = ALPHA) -> list[ModeRow]:
    """Per (model, workload) measured in both series: the two modes' new-vs-old ratios and their ratio."""
    from scipy import stats as sps

    from harness.analyze.tables import cell_ratio

    cp = canonicalize(ds, series=paired, allow_reused=True)
    cs = canonicalize(ds, series=serial, allow_reused=True)
    cells_p = {(c["leg"], c["model"], c["workload"]): c for c in cp.cells.to_dict("records")}
    cells_s = {(c["leg"], c["model"], c["workload"]): c for c in cs.cells.to_dict("records")}
    kinds = {(m, w): c["kind"] for (_, m, w), c in cells_p.items()}
    both = sorted(set(kinds) & {(m, w) for _, m, w in cells_s})
    rows = []
    for model, workload in both:
        metric = workloads.metric_of(kinds[(model, workload)])
        # Each mode's ratio exactly as its own table prints it (the paired rule or Welch's).
        rp = cell_ratio(cp, cells_p.get((old, model, workload)), cells_p.get((new, model, workload)), metric)
        rs = cell_ratio(cs, cells_s.get((old, model, workload)), cells_s.get((new, model, workload)), metric)
        lp, ls = _log_point(rp), _log_point(rs)
        value = low = high = None
        if lp is not None and ls is not None:
            (mp, tp), (ms, ts) = lp, ls
            vp, vs = tp.se ** 2, ts.se ** 2
            df = (vp + vs) ** 2 / (vp ** 2 / tp.df + vs ** 2 / ts.df)
            half = float(sps.t.ppf(1 - alpha / 2, df)) * math.sqrt(vp + vs)
            d = mp - ms
            value, low, high = math.exp(d), math.exp(d - half), math.exp(d + half)
        rows.append(ModeRow(model=model, workload=workload, paired=rp, serial=rs, value=value, low=low, high=high))
    return rows


def mode_agreement_md(rows: list[ModeRow]) -> str:
    out = ["| model | workload | paired (n pairs) | serial (n per side) | paired ÷ serial [95% CI] |",
           "|---|---|---|---|---|"]
    for r in rows:
        both = "—" if r.value is None else f"{r.value:.3f} [{r.low:.3f}, {r.high:.3f}]"
        out.append(f"| `{r.model}` | {r.workload} | {r.paired.label()} ({r.paired.n_old}) | "
                   f"{r.serial.label()} ({r.serial.n_old}/{r.serial.n_new}) | {both} |")
    return "\n".join(out) + "\n"


def mode_pairs(ds: Dataset) -> list[tuple[str, str, str, str]]:
    """(paired series, serial series, old leg, new leg) for every paired-design series of the study and
    every serial series beside it that measured the same two legs (study.yaml's leg order: old first)."""
    recs = ds.records
    if recs.empty or "paired_block" not in recs:
        return []
    is_paired = recs["paired_block"].notna()
    order = [leg.name for leg in ds.study.legs] if ds.study.legs else sorted(recs["leg"].unique())
    out = []
    for ps in sorted(recs.loc[is_paired, "series"].unique()):
        legs_p = set(recs.loc[recs["series"] == ps, "leg"])
        for ss in sorted(recs.loc[~is_paired, "series"].unique()):
            legs = [ln for ln in order if ln in legs_p & set(recs.loc[recs["series"] == ss, "leg"])]
            if len(legs) == 2:
                out.append((ps, ss, legs[0], legs[1]))
    return out


def write_modes(ds: Dataset, out_dir: Path) -> list[Path]:
    """tables/modes.md and .csv: each paired series against each serial series of the same two legs
    (none when the study has no such pair of series)."""
    import pandas as pd

    blocks, rows_csv = [], []
    for ps, ss, old, new in mode_pairs(ds):
        rows = mode_agreement(ds, paired=ps, serial=ss, old=old, new=new)
        if not rows:
            continue
        blocks.append(f"### Paired series `{ps}` against serial series `{ss}` ({new} vs {old})\n\n"
                      + mode_agreement_md(rows))
        for r in rows:
            rows_csv.append({"paired_series": ps, "serial_series": ss, "old": old, "new": new, "model": r.model,
                             "workload": r.workload, "paired": r.paired.value, "paired_low": r.paired.low,
                             "paired_high": r.paired.high, "paired_verdict": r.paired.verdict,
                             "serial": r.serial.value, "serial_low": r.serial.low, "serial_high": r.serial.high,
                             "serial_verdict": r.serial.verdict, "ratio": r.value, "low": r.low, "high": r.high})
    if not blocks:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    note = ("_Each mode's ratio (new vs old, above 1 the newer leg is faster) and verdict as its own table "
            "computes it (paired: the nested rule over engine blocks; serial: Welch's t over repeats), each "
            "cell alone (no table-wide control here); paired ÷ serial is their ratio with a Welch–"
            "Satterthwaite 95% interval (harness.analyze.modes). An interval that holds 1.00 means the two "
            "modes agree within it._\n")
    md, csv = out_dir / "modes.md", out_dir / "modes.csv"
    md.write_text("## Does the paired design change any number?\n\n" + "\n".join(blocks) + "\n" + note,
                  encoding="utf-8")
    pd.DataFrame(rows_csv).to_csv(csv, index=False)
    return [md, csv]
