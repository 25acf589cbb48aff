"""The published B200 study's tables, parsed back from their verbatim copies.

`results/b200-reference/published/` holds each of the study's tables copied character for
character (tab-separated, code markup and all). This module gives them back as rows of strings as
printed, so that a test can compare a generated table with the printed one cell by cell, and it
parses printed cells ("21,943", "1.01x", "—", "rc=1") into values where a comparison needs numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness.core import paths

PUBLISHED = paths.RESULTS / "b200-reference" / "published"
MISSING = "—"

# name -> (file, the study's section heading it is printed under)
TABLES: dict[str, tuple[str, str]] = {
    "coverage": ("coverage.tsv", "Coverage"),
    "throughput": ("throughput.tsv", "Full data / Throughput (tok/s, higher is better)"),
    "latency": ("latency.tsv", "Full data / Latency (ms/tok, lower is better)"),
    "failure_attribution": ("failure-attribution.tsv", "Failure attribution / Two root causes, not three"),
    "cutlass_falsification": ("cutlass-falsification.tsv",
                              "Failure attribution / The cutlass chain, end to end"),
    "repeat_235b": ("repeat-235b.tsv", "Is the 0.26 regression on Qwen3-VL-235B-FP8 real? / "
                                       "Three repeats per leg: it holds"),
    "moe_routing": ("moe-routing.tsv", "Is the 0.26 regression on Qwen3-VL-235B-FP8 real? / "
                                       "The MoE kernel is not the explanation"),
    "moe_arms": ("moe-arms.tsv", "Is the 0.26 regression on Qwen3-VL-235B-FP8 real? / "
                                 "The MoE kernel is not the explanation"),
    "runtime_stack": ("runtime-stack.tsv", "Runtime stack per leg"),
}
# Quoted lines the transcription reads besides the tables.
QUOTES: dict[str, str] = {"diag_traceback": "diag-traceback.txt", "moe_refusal": "moe-refusal.txt"}


@dataclass(frozen=True)
class PublishedTable:
    name: str
    section: str
    header: list[str]
    rows: list[list[str]]

    def column(self, name: str) -> list[str]:
        i = self.header.index(name)
        return [r[i] for r in self.rows]

    def records(self) -> list[dict[str, str]]:
        return [dict(zip(self.header, r)) for r in self.rows]

    def row(self, *first: str) -> list[str]:
        """The one row whose leading cells are `first` (markup ignored)."""
        found = [r for r in self.rows if [plain(c) for c in r[:len(first)]] == list(first)]
        if len(found) != 1:
            raise KeyError(f"{self.name}: {len(found)} rows start with {first!r}")
        return found[0]


def read_table(name: str, root: Path = PUBLISHED) -> PublishedTable:
    file, section = TABLES[name]
    lines = (root / file).read_text(encoding="utf-8").splitlines()
    cells = [line.split("\t") for line in lines]
    for i, r in enumerate(cells):
        if len(r) != len(cells[0]):
            raise ValueError(f"{file} line {i + 1}: {len(r)} cells, header has {len(cells[0])}")
    return PublishedTable(name=name, section=section, header=cells[0], rows=cells[1:])


def all_tables(root: Path = PUBLISHED) -> dict[str, PublishedTable]:
    return {name: read_table(name, root) for name in TABLES}


def quote(name: str, root: Path = PUBLISHED) -> list[str]:
    return (root / QUOTES[name]).read_text(encoding="utf-8").splitlines()


def plain(cell: str) -> str:
    """A cell without the report's code markup: "`gpt-oss-120b`" -> "gpt-oss-120b"."""
    return cell.replace("`", "").strip()


def value(cell: str) -> float | None:
    """A printed number: "21,943" -> 21943.0, "1.01x" -> 1.01, "rc=1" -> 1.0, "—" -> None."""
    if cell.strip() == MISSING:
        return None
    m = re.fullmatch(r"(?:rc=)?(-?[\d,]*\.?\d+)x?", cell.strip())
    if not m:
        raise ValueError(f"not a printed number: {cell!r}")
    return float(m.group(1).replace(",", ""))


def values(cell: str) -> list[float]:
    """A cell of several figures: "4,503 / 4,512 / 4,482" -> [4503.0, 4512.0, 4482.0]."""
    return [v for v in (value(part) for part in cell.split(" / ")) if v is not None]


def bounds(cell: str) -> tuple[float, float]:
    """The interval of true values that print as `cell` (half a unit of its last digit each way)."""
    v = value(cell)
    if v is None:
        raise ValueError(f"no figure in {cell!r}")
    digits = cell.replace(",", "").rstrip("x")
    half = 0.5 * 10.0 ** -(len(digits.split(".")[1]) if "." in digits else 0)
    return v - half, v + half


def ratio_agrees(printed: str, numerator: str, denominator: str) -> bool:
    """Whether a printed ratio ("2.33x") can come from figures that print as `numerator` and
    `denominator`. The study computed its ratios before rounding, so a ratio recomputed from the
    printed figures may differ in the last digit (644 / 277 gives 2.32x, printed 2.33x)."""
    (n_lo, n_hi), (d_lo, d_hi), (p_lo, p_hi) = bounds(numerator), bounds(denominator), bounds(printed)
    return n_lo / d_hi <= p_hi and p_lo <= n_hi / d_lo
