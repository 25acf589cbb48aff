"""Where a verb may write its output, and how: the one helper every writing verb goes through.

No verb deletes or replaces anything it did not create. An output folder is built in a new hidden
temporary folder beside its destination (`.NAME.tmp-XXXX`, same file system), gets the marker
`.harness-output.json` (schema.output_marker) and is renamed into place; if the verb fails, only the
temporary folder goes and the destination is as it was. A single output file is written the same
way (a temporary file beside it, `os.replace`d) with its marker in a hidden sidecar
`.NAME.harness-output.json`; a file inside a marked folder needs no sidecar of its own.

Refused in one line (UserError naming the path and why) before anything is written:
- the destination is a symbolic link;
- it is a file system root, the user's home, the project root or `results/` (or holds one of them);
- it is a study folder (study.yaml or runs/ in it), or lies inside one, except in the study's own
  harness-owned folders (`derived/`, `report/`, `client-overhead/` and below: STUDY_OUTPUTS), and
  except a study's view files (`study_view=True`: crosscheck.md beside the records it summarises);
- it exists and the harness did not write it (no marker on it or on a folder above it): a non-empty
  folder, or a file;
- the harness wrote it, but `replace` is False and it is not the verb's own default destination
  (`default=True`: `STUDY/derived`, `STUDY/report`, the tiny model's cache folder, which each run
  rewrites as it always has): "pass --replace";
- a folder the harness wrote now holds a study it did not write (one moved in since).

Replacing a folder is two renames (the old one aside to `.NAME.old-XXXX`, the new one into place)
and then the old one deleted: at no point is anything lost, though for an instant the name is absent.

Why here, in schema/, and not in core/: the marker is a file the harness writes and reads back, so it
is a versioned pydantic model, and models live in schema/; core/ (the bottom layer) cannot import
them, and schema/ may import core/. Every layer above (measure, analyze, experiments, publish, cli)
may import this module.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from harness.core import paths
from harness.core.errors import UserError
from harness.schema import output_marker
from harness.schema.output_marker import FOLDER_MARKER, sidecar

# The folders inside a study that belong to the harness's verbs (written there by default).
STUDY_OUTPUTS = ("derived", "report", "client-overhead")


def is_study(d: Path) -> bool:
    """A study folder: its study.yaml or its runs/ in it."""
    return (d / "study.yaml").is_file() or (d / "runs").is_dir()


def _abs(p: Path) -> Path:
    """Absolute without resolving the last component (a symlink must be seen, not followed)."""
    p = Path(os.path.abspath(p))
    return p.parent.resolve() / p.name if p.name else p


def _protected(p: Path) -> str | None:
    """Why `p` (resolved) may never be an output destination, or None."""
    home = Path.home().resolve()
    named = {Path(p.anchor): "a file system root", home: "your home folder",
             paths.PROJ_ROOT.resolve(): "the project's root", paths.RESULTS.resolve(): "the results/ folder"}
    if p in named:
        return f"is {named[p]}"
    for q, what in named.items():
        if p in q.parents:
            return f"holds {what} ({q})"
    return None


def _study_above(p: Path) -> Path | None:
    proj = paths.PROJ_ROOT.resolve()
    for a in p.parents:
        if is_study(a):
            return a
        # The search ends at the checkout: a checkout is not a study's content, and a `runs/` that
        # happens to sit beside the clone must not lock the project's own folders (its model cache,
        # results/) away from every verb. Outside the checkout the search goes on to the root.
        if a == proj:
            break
    return None


def _marker_above(p: Path) -> Path | None:
    """The nearest folder marker on `p` itself or a folder above it (the harness wrote what is below)."""
    for a in (p, *p.parents):
        if (a / FOLDER_MARKER).is_file():
            return a / FOLDER_MARKER
    return None


def _studies_in(folder: Path) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        d = Path(dirpath)
        if "study.yaml" in filenames or "runs" in dirnames:
            found.append(str(d.relative_to(folder)))
    return sorted(found)


def _where(p: Path, study: Path, *, study_view: bool) -> None:
    """Refuse a destination inside `study` unless it is one of the study's harness-owned places."""
    rel = p.relative_to(study)
    if rel.parts and rel.parts[0] in STUDY_OUTPUTS:
        return
    if study_view and len(rel.parts) == 1:
        return
    raise UserError(f"{p}: inside the study {study}; refused (a verb writes into a study only under "
                    f"{', '.join(s + '/' for s in STUDY_OUTPUTS)}); name a folder outside it")


def _common(dest: Path, *, study_view: bool = False) -> Path:
    """The checks a folder and a file share; returns the destination made absolute."""
    if dest.is_symlink():
        raise UserError(f"{dest}: is a symbolic link (to {os.readlink(dest)}); refused: name the real folder")
    p = _abs(dest)
    why = _protected(p)
    if why:
        raise UserError(f"{dest}: {why}; refused: an output goes into a new folder of its own")
    if p.is_dir() and is_study(p):
        raise UserError(f"{dest}: is a study folder (study.yaml or runs/ in it); refused: name a new folder "
                        "outside the study")
    study = _study_above(p)
    if study is not None:
        _where(p, study, study_view=study_view)
    return p


def check_folder(dest: Path | str, *, verb: str, replace: bool = False, default: bool = False) -> Path:
    """Refuse (UserError) a destination `output_dir` may not write; its absolute path otherwise."""
    dest = Path(dest)
    p = _common(dest)
    if not p.exists():
        return p
    if not p.is_dir():
        raise UserError(f"{dest}: is a file; refused: {verb} writes a folder (name a new one)")
    if not any(p.iterdir()):
        return p
    marker = _marker_above(p)
    if marker is None:
        raise UserError(f"{dest}: an existing folder the harness did not write (no {FOLDER_MARKER} in it); "
                        "refused: name a new or empty folder (to reuse this name, move the folder aside "
                        "yourself first)")
    mine = output_marker.read(marker)   # a corrupt marker is named, not trusted
    if not (replace or default):
        raise UserError(f"{dest}: already holds the output of `harness {mine.verb}` (written "
                        f"{mine.created_at}); refused: pass --replace to replace it")
    listed = set(mine.studies) if marker.parent == p else set()
    foreign = [s for s in _studies_in(p) if s not in listed]
    if foreign:
        raise UserError(f"{dest}: holds a study the harness did not write there ({p / foreign[0]}); refused")
    return p


def check_file(dest: Path | str, *, verb: str, replace: bool = False, default: bool = False,
               study_view: bool = False) -> Path:
    """Refuse (UserError) a destination `output_file` may not write; its absolute path otherwise."""
    dest = Path(dest)
    p = _common(dest, study_view=study_view)
    if p.is_dir():
        raise UserError(f"{dest}: is a folder; refused: {verb} writes a file there (name a file)")
    if not p.exists():
        return p
    side = sidecar(p)
    if side.is_file():
        mine = output_marker.read(side)
        if mine.sha256 != _sha256(p):
            raise UserError(f"{dest}: changed since {mine.verb} wrote it (its content no longer matches "
                            f"{side.name}); refused: move it aside yourself first")
    elif _marker_above(p.parent) is not None:
        mine = output_marker.read(_marker_above(p.parent))  # type: ignore[arg-type]
    else:
        raise UserError(f"{dest}: an existing file the harness did not write (no {side.name} beside it); "
                        "refused: name a new file (to reuse this name, move the file aside yourself first)")
    if not (replace or default):
        raise UserError(f"{dest}: already holds the output of `harness {mine.verb}` (written "
                        f"{mine.created_at}); refused: pass --replace to replace it")
    return p


def adopt_file(path: Path, *, verb: str) -> None:
    """Mark an existing file as the harness's own: for a file an older harness wrote before markers
    existed, which its caller has recognised by content (a crosscheck view that reads as one)."""
    if path.is_file() and not path.is_symlink() and not sidecar(path).exists() and _marker_above(path.parent) is None:
        output_marker.write(sidecar(path), output_marker.new(verb, target="file", file=path.name, sha256=_sha256(path)))


def check_root(dest: Path | str) -> Path:
    """For verbs that add records beside others in a folder (bisect, window): never a symlink, a
    protected folder, a study or inside one. They never replace a file that is not their own record
    (paths.unclobbered), so an existing folder is fine."""
    dest = Path(dest)
    p = _common(dest)
    if p.exists() and not p.is_dir():
        raise UserError(f"{dest}: is a file; refused: the records go into a folder")
    return p


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _make_parents(folder: Path, verb: str) -> Path | None:
    """Create `folder` and any missing folder above it; the top-most one created (marked: the harness
    made it) or None."""
    top = None
    for a in (*reversed(folder.parents), folder):
        if not a.exists():
            top = top or a
    folder.mkdir(parents=True, exist_ok=True)
    if top is not None:
        output_marker.write(top / FOLDER_MARKER, output_marker.new(verb))
    return top


def _undo_parents(top: Path | None) -> None:
    if top is not None:
        shutil.rmtree(top, ignore_errors=True)


@contextlib.contextmanager
def output_dir(dest: Path | str, *, verb: str, replace: bool = False, default: bool = False,
               keep: Iterable[str] = ()) -> Iterator[Path]:
    """Yield a new empty folder beside `dest`; on success it gets the marker and takes `dest`'s place.
    `keep`: entries of the folder being replaced that the verb does not write and another verb did
    (derived/profile-diff/ when `tables` rewrites derived/): carried over into the new folder."""
    dest = Path(dest)
    p = check_folder(dest, verb=verb, replace=replace, default=default)
    top = _make_parents(p.parent, verb)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{p.name}.tmp-", dir=p.parent))
    except BaseException:
        _undo_parents(top)
        raise
    try:
        yield tmp
        output_marker.write(tmp / FOLDER_MARKER, output_marker.new(verb, target="folder", studies=_studies_in(tmp)))
        _swap(tmp, p, keep)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _undo_parents(top)
        raise


def _swap(tmp: Path, p: Path, keep: Iterable[str]) -> None:
    if not p.exists() or (p.is_dir() and not any(p.iterdir())):
        os.replace(tmp, p)   # an empty folder is replaced by the rename itself
        return
    old = Path(tempfile.mkdtemp(prefix=f".{p.name}.old-", dir=p.parent))
    os.replace(p, old)
    try:
        os.replace(tmp, p)
    except BaseException:
        os.replace(old, p)
        raise
    for name in keep:
        if (old / name).exists() and not (p / name).exists():
            os.replace(old / name, p / name)
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def output_file(dest: Path | str, *, verb: str, replace: bool = False, default: bool = False,
                study_view: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside `dest` to write; on success it replaces `dest` (os.replace) and
    its sidecar marker records it (unless a marked folder above already owns it)."""
    dest = Path(dest)
    p = check_file(dest, verb=verb, replace=replace, default=default, study_view=study_view)
    top = _make_parents(p.parent, verb)
    fd, name = tempfile.mkstemp(prefix=f".{p.name}.tmp-", dir=p.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if tmp.exists():
            os.chmod(tmp, 0o644)   # mkstemp's owner-only mode is for the scratch name, not the output
        if _marker_above(p.parent) is None or sidecar(p).exists():
            output_marker.write(sidecar(p), output_marker.new(verb, target="file", file=p.name, sha256=_sha256(tmp)))
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        _undo_parents(top)
        raise
