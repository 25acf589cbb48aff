"""A study page's markdown source without Quarto or a kernel: index.qmd's markdown chunks and the output
of its `output: asis` cells, run in this process, in page order. Figure cells (those with a `label`)
are skipped, so what comes back is the text the sections emit, the same text REPORT.md is made from
before Pandoc typesets it; it is fast enough for tests that read the page as a reader would."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from harness.publish.render import QMD, parse_qmd


def page_source(study_dir: Path | str, *, qmd: Path = QMD) -> str:
    """The page's markdown source for `study_dir` (parameters as index.qmd's defaults, study replaced)."""
    _, chunks = parse_qmd(qmd.read_text(encoding="utf-8"), qmd)
    scope: dict[str, Any] = {"display": lambda *a, **k: None}
    parts: list[str] = []
    for ch in chunks:
        if ch.kind == "markdown":
            parts.append(ch.text)
            continue
        if "label" in ch.options:
            continue
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(ch.text, str(qmd), "exec"), scope)  # noqa: S102  (the project's own index.qmd)
        if "parameters" in (ch.options.get("tags") or []):
            scope["study"] = str(study_dir)
        if buf.getvalue().strip():
            parts.append(buf.getvalue().rstrip("\n"))
    return "\n\n".join(parts) + "\n"
