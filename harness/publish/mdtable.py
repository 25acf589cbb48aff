"""Pipe tables as the report prints them: a column whose cells are numbers (figures, ratios,
intervals, counts, "—") is right-aligned, so digits line up; everything else stays left-aligned.

`table_md` prints a frame; `align_tables` fixes the rule line of every pipe table already in a
markdown text (the sections that print tables through `harness.analyze.fmt.markdown_table`)."""

from __future__ import annotations

import re

import pandas as pd

from harness.analyze.fmt import markdown_table

# A numeric cell: "21,943", "3.82", "1.01x", "0.70x [0.69, 0.73]", "13/15", "12.5%", "n=3", "—".
_NUM = re.compile(r"^\s*(?:—|-|[~≈<>]?\s*[+-]?\d[\d,]*(?:\.\d+)?(?:x|%| ?tok/s| ?ms| ?s)?"
                  r"(?:\s*\[[^\]]*\])?(?:\s*/\s*\d[\d,]*(?:\.\d+)?)*(?:\s*[⚠*†])?)\s*$")


# Columns of names that look like numbers (leg labels "0.26", steps): left-aligned as text.
LABELS = frozenset({"leg", "step", "version", "release", "arm", "model", "workload"})


def numeric(cells: list[str]) -> bool:
    vals = [c for c in cells if c.strip() not in ("", "—", "-")]
    return bool(vals) and all(_NUM.match(c) for c in vals)


def _split(line: str) -> list[str]:
    inner = line.strip()[1:-1]
    return [c.strip() for c in re.split(r"(?<!\\)\|", inner)]


def align_tables(md: str) -> str:
    """Right-align the numeric columns of every pipe table in `md` (rule lines `|---|` only)."""
    lines = md.split("\n")
    i = 0
    while i < len(lines) - 1:
        head, rule = lines[i], lines[i + 1]
        if head.startswith("|") and re.fullmatch(r"\|(?:\s*:?-{3,}:?\s*\|)+", rule.strip()):
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            body = [_split(ln) for ln in lines[i + 2:j]]
            n = len(_split(head))
            cols = [[r[k] for r in body if k < len(r)] for k in range(n)]
            names = _split(head)
            lines[i + 1] = "|" + "|".join("---:" if numeric(c) and names[k] not in LABELS else "---"
                                          for k, c in enumerate(cols)) + "|"
            i = j
            continue
        i += 1
    return "\n".join(lines)


def table_md(df: pd.DataFrame) -> str:
    return align_tables(markdown_table(df))
