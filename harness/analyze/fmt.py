"""How numbers, ratios and names are printed in every table and report (compute elsewhere, format here)."""

from __future__ import annotations

import os

import pandas as pd

from harness.analyze.stats import Ratio

MISSING = "—"


def fmt_tok_s(v: float | None) -> str:
    return MISSING if v is None or pd.isna(v) else f"{v:,.0f}"


def fmt_share(v: float | None) -> str:
    return MISSING if v is None or pd.isna(v) else f"{v:.1%}"


def fmt_ms(v: float | None) -> str:
    return MISSING if v is None or pd.isna(v) else f"{v:.2f}"


def fmt_ratio(r: Ratio) -> str:
    return MISSING if r.value is None else f"{r.value:.2f}x"


def fmt_ci(r: Ratio) -> str:
    return f"[{r.low:.2f}, {r.high:.2f}]" if r.low is not None and r.high is not None else ""


def fmt_verdict(r: Ratio) -> str:
    if r.verdict == "too few repeats" and r.needs is not None:
        what = "engine blocks" if r.unit != "repeat" and r.needs == 2 and r.n_old >= 3 else (
            "per side" if r.unit == "repeat" else "pairs")
        return f"too few repeats (needs ≥ {r.needs} {what})"
    if r.verdict == "equivalent" and r.margin is not None:
        return f"equivalent within ±{r.margin:.0%}"
    if r.verdict == "undecided":
        if r.test is not None and r.test.verdict in ("faster", "slower", "equivalent"):
            # Decided alone, not once the table's cells are decided together (false discovery rate).
            alone = r.test.verdict + (f" within ±{r.margin:.0%}" if r.test.verdict == "equivalent" and r.margin else "")
            return f"undecided across the table ({alone} alone)"
        unit = {"repeat": "repeats per side", "pair": "pairs", "engine block": "engine blocks"}.get(r.unit, r.unit)
        return f"undecided (~{r.needs} {unit} would likely decide)" if r.needs else "undecided"
    return MISSING if r.verdict == "missing" else r.verdict


def fmt_n(r: Ratio) -> str:
    """Repeats per side behind a ratio, old/new: the verdict's sample size."""
    return f"{r.n_old}/{r.n_new}"


def ticked(name: str) -> str:
    return f"`{name}`"


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub pipe table of `df` as strings."""
    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")
    head = "| " + " | ".join(cell(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def short_labels(labels: list[str]) -> dict[str, str]:
    """Ratio-column labels: the leg labels without their common dotted prefix ("0.18" -> "18")."""
    if len(labels) < 2:
        return {x: x for x in labels}
    prefix = os.path.commonprefix(labels)
    cut = prefix.rfind(".") + 1
    if cut and all(len(x) > cut for x in labels):
        return {x: x[cut:] for x in labels}
    return {x: x for x in labels}
