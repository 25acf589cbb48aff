"""Everything derived from a study folder, written at once: the top of the analysis step."""

from __future__ import annotations

from pathlib import Path

from harness.analyze.canonical import Canonical, canonical_md, canonicalize
from harness.analyze.dataset import load
from harness.analyze.equivalence import write_equivalence
from harness.analyze.export import export
from harness.analyze.failure import failure_table
from harness.analyze.manifest import manifest_md
from harness.analyze.modes import write_modes
from harness.analyze.tables import Table, _write_table, write_tables
from harness.schema.outdir import output_dir


def write_study(study_dir: Path, out_dir: Path | None = None, *, allow_reused: bool | None = None,
                allow_different_work: bool | None = None, replace: bool = False) -> tuple[Canonical, list[Path]]:
    """Everything derived from a study folder: CANONICAL.md, MANIFEST.md, tables/ (with the failure
    attribution), compare/ and export/, under `out_dir` (default: `<study_dir>/derived`), built in a
    new folder and moved into place whole (schema.outdir: an `out_dir` the harness did not write is
    refused; one it wrote is replaced only with `replace`, the default folder always). A profile-diff/
    that `harness compare profiles` wrote into the default folder is carried over."""
    study_dir = Path(study_dir)
    dest = Path(out_dir) if out_dir is not None else study_dir / "derived"
    with output_dir(dest, verb="tables", replace=replace, default=out_dir is None, keep=("profile-diff",)) as tmp:
        canon, written = derive_into(study_dir, tmp, allow_reused=allow_reused,
                                     allow_different_work=allow_different_work)
    return canon, [dest / p.relative_to(tmp) for p in written]


def derive_into(study_dir: Path, out_dir: Path, *, allow_reused: bool | None = None,
                allow_different_work: bool | None = None) -> tuple[Canonical, list[Path]]:
    """write_study's files, written straight into `out_dir`: a new folder its caller owns (a
    temporary one from schema.outdir)."""
    study_dir, out_dir = Path(study_dir), Path(out_dir)
    ds = load(study_dir)
    canon = canonicalize(ds, allow_reused=allow_reused, allow_different_work=allow_different_work)
    texts = {"CANONICAL.md": canonical_md(canon), "MANIFEST.md": manifest_md(canon)}
    fail = failure_table(ds)
    fail_t = Table(name="failures", title="Failure attribution", data=fail, display=fail.drop(columns=["group"]),
                   notes=("Built from the records: per leg, the models with no passing run in the main "
                          "series or passing only under a pin, grouped by failure signature (harness.analyze.failure).",))
    written = write_tables(canon, out_dir)
    written += _write_table(fail_t, out_dir / "tables" / "failures")
    for name, text in texts.items():
        (out_dir / name).write_text(text, encoding="utf-8")
        written.append(out_dir / name)
    written += export(canon, out_dir / "export")
    written += write_equivalence(ds, out_dir / "tables")
    written += write_modes(ds, out_dir / "tables")
    return canon, written
