"""Everything derived from a study folder, written at once: the top of the analysis step."""

from __future__ import annotations

import os
from pathlib import Path

from harness.analyze.canonical import Canonical, canonical_md, canonicalize
from harness.analyze.dataset import load
from harness.analyze.equivalence import write_equivalence
from harness.analyze.export import export
from harness.analyze.failure import failure_table
from harness.analyze.manifest import manifest_md
from harness.analyze.tables import Table, _write_table, write_tables


def write_study(study_dir: Path, out_dir: Path | None = None, *, allow_reused: bool | None = None,
                allow_different_work: bool | None = None) -> tuple[Canonical, list[Path]]:
    """Everything derived from a study folder: CANONICAL.md, MANIFEST.md, tables/ (with the failure
    attribution), compare/ and export/, under `out_dir` (default: `<study_dir>/derived`)."""
    study_dir = Path(study_dir)
    out_dir = Path(out_dir) if out_dir is not None else study_dir / "derived"
    ds = load(study_dir)
    canon = canonicalize(ds, allow_reused=allow_reused, allow_different_work=allow_different_work)
    # Build every text before writing any file: an error leaves nothing half-written.
    texts = {"CANONICAL.md": canonical_md(canon), "MANIFEST.md": manifest_md(canon)}
    fail = failure_table(ds)
    fail_t = Table(name="failures", title="Failure attribution", data=fail, display=fail.drop(columns=["group"]),
                   notes=("Built from the records: per leg, the models with no passing run in the main "
                          "series or passing only under a pin, grouped by failure signature (harness.analyze.failure).",))
    written = write_tables(canon, out_dir)
    written += _write_table(fail_t, out_dir / "tables" / "failures")
    for name, text in texts.items():
        path = out_dir / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        written.append(path)
    written += export(canon, out_dir / "export")
    written += write_equivalence(ds, out_dir / "tables")
    return canon, written
