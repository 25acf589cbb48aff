"""Loader for the labelled corpus of real vLLM failure excerpts (tests/data/vllm_logs).

The corpus is test data for failure attribution: each entry is a short verbatim excerpt
from a public issue thread (or one of the study's own failures) and the class and evidence
line a classifier must produce for it. See tests/data/vllm_logs/README.md.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

CORPUS_DIR = Path(__file__).parent / "data" / "vllm_logs"
INDEX = CORPUS_DIR / "INDEX.tsv"

# INDEX.tsv format history:
#   v1 - columns file, source, class, evidence, note (header row required).
# A later version adds columns at the end; the loader checks the header so an old
# reader never silently misreads a newer index.
COLUMNS = ("file", "source", "class", "evidence", "note")

# The fixed vocabulary of issue 16; the classifier's --json "class" field uses the same.
CLASSES = (
    "unsupported-architecture",
    "config-unparseable",
    "transformers-api-drift",
    "dependency-window",
    "dependency-abi",
    "jit-build",
    "out-of-memory",
    "distributed-init",
    "input-shape",
    "quantization-refused",
    "timeout",
    "killed",
    "unknown",
)

# owner/repo#number as GitHub spells it, or "study" for the study's own failures.
SOURCE_RE = re.compile(r"^(study|[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}#[1-9][0-9]*)$")
FILE_RE = re.compile(r"^[0-9]{3}-[a-z0-9][a-z0-9-]*\.log$")


class Entry(BaseModel):
    model_config = ConfigDict(frozen=True)

    file: str
    text: str
    source: str
    klass: str
    evidence: str
    note: str = ""


def _read_index(index: Path) -> list[list[str]]:
    # Plain tab split, not the csv module: evidence lines carry quotes that must stay verbatim.
    lines = index.read_text(encoding="utf-8").splitlines()
    if not lines or tuple(lines[0].split("\t")) != COLUMNS:
        raise ValueError(f"{index}: header must be the tab-separated columns {', '.join(COLUMNS)}")
    rows = []
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != len(COLUMNS):
            raise ValueError(f"{index}:{n}: expected {len(COLUMNS)} tab-separated cells, got {len(cells)}")
        rows.append(cells)
    return rows


def corpus(directory: Path = CORPUS_DIR) -> list[Entry]:
    """Every indexed entry, with its excerpt's text, in index order."""
    entries = []
    for file, source, klass, evidence, note in _read_index(directory / "INDEX.tsv"):
        path = directory / file
        if not path.is_file():
            raise ValueError(f"{directory / 'INDEX.tsv'}: {file} is indexed but missing")
        entries.append(
            Entry(
                file=file,
                text=path.read_text(encoding="utf-8"),
                source=source,
                klass=klass,
                evidence=evidence,
                note=note,
            )
        )
    return entries


# --- the tuning / held-out split (issue 38) ---------------------------------------------------------

def thread_of(entry: Entry) -> str:
    """The group an entry is split with: its source thread; each study entry is its own group."""
    return f"study:{entry.file}" if entry.source == "study" else entry.source


def split(entries: list[Entry]) -> tuple[list[Entry], list[Entry]]:
    """(tuning half, held-out half), by source thread: excerpts of one thread stay on one side.
    Threads are taken in the order of their name's sha256 and each goes to the smaller half so far,
    so the split is fixed by the corpus alone (no seed, no choice) and the halves stay near equal."""
    groups: dict[str, list[Entry]] = {}
    for e in entries:
        groups.setdefault(thread_of(e), []).append(e)
    tune: list[Entry] = []
    held: list[Entry] = []
    for key in sorted(groups, key=lambda k: hashlib.sha256(k.encode()).hexdigest()):
        (tune if len(tune) <= len(held) else held).extend(groups[key])
    return tune, held
