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
    ("verdicts", "export/verdicts.parquet"),     # every step cell's one verdict (harness.analyze.verdicts)
    ("throughput", "tables/throughput.parquet"),
    ("latency", "tables/latency.parquet"),
    ("serve", "tables/serve.parquet"),
    ("capacity", "tables/capacity.parquet"),   # written only where a capacity search ran
    ("equivalence", "tables/equivalence.parquet"),
    ("coverage", "tables/coverage.parquet"),
    ("failures", "tables/failures.parquet"),
)
# The Hub shows `pretty_name` as the dataset's name: a study's title is a sentence, so a long one is cut.
PRETTY_MAX = 60


def short_name(title: str, limit: int = PRETTY_MAX) -> str:
    """A title short enough to be a name: itself if it fits, else its head before the first ": ", " — ",
    " (" or ", " that fits, else its words up to the limit with an ellipsis."""
    title = " ".join(title.split())
    if len(title) <= limit:
        return title
    for sep in (": ", " — ", " (", ", "):
        head = title.split(sep)[0].strip()
        if 10 <= len(head) <= limit:
            return head
    cut = title[:limit - 1].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + "…"


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


def _features(path: Path) -> list[dict[str, Any]]:
    """The Parquet file's columns as the Hub's `dataset_info.features` list."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def dtype(t: pa.DataType) -> Any:
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return {"sequence": dtype(t.value_type)}
        if pa.types.is_boolean(t):
            return "bool"
        if pa.types.is_integer(t):
            return "int64"
        if pa.types.is_floating(t):
            return "float64"
        if pa.types.is_timestamp(t):
            return "timestamp[us]"
        return "string"

    return [{"name": f.name, "dtype": dtype(f.type)} for f in pq.read_schema(path)]


def card_header(canon: Canonical, out_dir: Path | None = None) -> str:
    """The Hugging Face dataset-card YAML header. `configs` names the Parquet files that exist and hold
    rows, each with its feature schema; a transcribed study's licence and source are the source's
    (the document its records name)."""
    import yaml

    s = canon.study
    transcribed = "transcribed" in canon.provenances or s.provenance == "transcribed"
    recs = canon.dataset.records
    docs = sorted({str(d) for d in recs["source_document"].dropna()}) if "source_document" in recs else []
    source = "; ".join(docs) or None
    rows = len(canon.cells)
    size = "n<1K" if rows < 1000 else "1K<n<10K" if rows < 10_000 else "10K<n<100K"
    configs, infos = [], []
    for name, path in CARD_CONFIGS:
        if out_dir is not None and (not (out_dir / path).exists() or _rows(out_dir / path) == 0):
            continue   # an empty table is not offered as data
        c: dict[str, Any] = {"config_name": name, "data_files": [{"split": "train", "path": path}]}
        if name == "canonical":
            c["default"] = True
        configs.append(c)
        if out_dir is not None:
            infos.append({"config_name": name, "features": _features(out_dir / path),
                          "splits": [{"name": "train", "num_examples": _rows(out_dir / path)}]})
    meta: dict[str, Any] = {}
    if transcribed:
        # The figures are a third party's, copied: their licence is the source's, not this project's.
        meta.update({"license": "other", "license_name": "the source study's licence",
                     "license_details": f"Transcribed from {source or 'a published study'}; the figures "
                                        f"remain under the source's licence."})
    else:
        meta["license"] = str(s.extra.get("license", "apache-2.0"))
    meta.update({
        "pretty_name": short_name(str(s.extra.get("short_name") or s.title or s.name)),
        "language": ["en"],
        "task_categories": ["other"],
        "annotations_creators": ["found" if transcribed else "machine-generated"],
        "language_creators": ["found" if transcribed else "machine-generated"],
        "source_datasets": [f"extended|{source}" if transcribed and source else "original"],
        "tags": ["benchmark", "vllm", "llm-inference", "throughput", "latency",
                 "transcribed" if transcribed else "measured"],
        "size_categories": [size],
        "configs": configs,
    })
    if infos:
        meta["dataset_info"] = infos
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000) + "---\n"


def card_text(header: str, report_md: str) -> str:
    """The card: the header, then REPORT.md's text unchanged (so its body *is* the report)."""
    return header + report_md


def card_body(card: str) -> str:
    """The card without its YAML header."""
    m = re.match(r"---\n.*?\n---\n", card, flags=re.S)
    return card[m.end():] if m else card
