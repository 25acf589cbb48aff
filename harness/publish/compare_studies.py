"""Two studies side by side, printed: the comparison `harness.analyze.compare_studies` computed (each
side the study's own verdict, and whether the step's effect transfers), as a table and its markdown."""

from __future__ import annotations

import pandas as pd

from harness.analyze.compare_studies import Comparison
from harness.analyze.tables import ticked


def comparison_table(c: Comparison) -> pd.DataFrame:
    return pd.DataFrame([{"model · workload": f"{ticked(r.model)} · {r.workload}", "step": r.step,
                          f"{c.a}": r.a.text(), f"{c.b}": r.b.text(), "does it transfer?": r.verdict}
                         for r in c.rows], columns=["model · workload", "step", c.a, c.b, "does it transfer?"])


def compare_studies_md(c: Comparison, *, one_sided: bool = False) -> str:
    """The comparison as markdown; cells that only one study has are counted, and listed with
    `one_sided`."""
    from harness.publish.mdtable import table_md

    shown = c.rows if one_sided else c.two_sided
    hidden = len(c.rows) - len(shown)
    lines = [f"# {c.a} vs {c.b}: does it transfer?", "",
             f"{len(c.rows)} (model, workload, step) cells in either study; {len(c.both)} have a ratio in both, and "
             f"{len(c.transferring)} of those read the same in both (faster, slower, or flat)."
             + (f" {hidden} cells that only one study has are left out (`--all` lists them)." if hidden else ""), "",
             table_md(comparison_table(Comparison(a=c.a, b=c.b, band=c.band, rows=shown))), "",
             f"_A is `{c.a}`, B is `{c.b}`. Each side is that study's own ratio, interval and verdict, as its page "
             f"prints them (`harness.analyze.verdicts`): the rule's 95% interval, or for transcribed figures the range "
             f"their printed rounding allows; \"printed ratio\": the source printed only the ratio. A side without a "
             f"test (a single pass per side, a printed ratio) is read against the flat band, ±{c.band:.0%} of 1.00x; "
             f"flat is \"equivalent\" where a test decided it. Built by `harness compare studies`._"]
    return "\n".join(lines) + "\n"

