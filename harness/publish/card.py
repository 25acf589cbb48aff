"""The dataset card `README.md`: a Hugging Face YAML header, then REPORT.md's text unchanged, so its
body is the report by construction."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the card is written by the render, which should not pay for pandas at start-up
    from harness.analyze.canonical import Canonical

CARD_CONFIGS: tuple[tuple[str, str], ...] = (
    ("canonical", "export/canonical.parquet"),
    ("throughput", "tables/throughput.parquet"),
    ("latency", "tables/latency.parquet"),
    ("coverage", "tables/coverage.parquet"),
    ("failures", "tables/failures.parquet"),
)


def card_header(canon: Canonical, out_dir: Path | None = None) -> str:
    """The Hugging Face dataset-card YAML header; `configs` names the Parquet files that exist."""
    import yaml

    s = canon.study
    transcribed = "transcribed" in canon.provenances or s.provenance == "transcribed"
    rows = len(canon.cells)
    size = "n<1K" if rows < 1000 else "1K<n<10K" if rows < 10_000 else "10K<n<100K"
    configs = []
    for name, path in CARD_CONFIGS:
        if out_dir is not None and not (out_dir / path).exists():
            continue
        c: dict[str, Any] = {"config_name": name, "data_files": [{"split": "train", "path": path}]}
        if name == "canonical":
            c["default"] = True
        configs.append(c)
    meta = {
        "license": str(s.extra.get("license", "apache-2.0")),
        "pretty_name": s.title or s.name,
        "tags": ["benchmark", "vllm", "llm-inference", "throughput", "latency",
                 "transcribed" if transcribed else "measured"],
        "size_categories": [size],
        "configs": configs,
    }
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000) + "---\n"


def card_text(header: str, report_md: str) -> str:
    """The card: the header, then REPORT.md's text unchanged (so its body *is* the report)."""
    return header + report_md


def card_body(card: str) -> str:
    """The card without its YAML header."""
    m = re.match(r"---\n.*?\n---\n", card, flags=re.S)
    return card[m.end():] if m else card
