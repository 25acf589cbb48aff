"""The `source:` folder of an image, video or audio workload, checked when the plan is made.

The worker reads a source folder only once its engine is up, minutes into a run; a folder that is
missing, is a file, holds nothing the modality can read, holds an empty wav, or reaches out of the
project through a symlink would fail there, or worse, be measured. These checks run on the planning
machine, before any engine, with the same file discovery the worker uses (harness.workloads.mm),
reading only each file's first bytes (a wav's header), so a dataset of thousands of clips takes a
moment. Standard library only, like every workload module.
"""

from __future__ import annotations

import os
import wave
from pathlib import Path

from harness.workloads import mm

# What each readable format starts with. A file's content decides, not its name: PIL reads a PNG
# named .jpg as well as any.
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"BM", b"GIF87a", b"GIF89a", b"II*\x00", b"MM\x00*")
_FLAC_MAGIC = b"fLaC"
_MKV_MAGIC = b"\x1aE\xdf\xa3"


def _head(path: Path, n: int = 16) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def _image_problem(path: Path) -> str | None:
    head = _head(path)
    if not head:
        return "an empty file"
    if head.startswith(_IMAGE_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP"):
        return None
    return "not an image (neither PNG, JPEG, BMP, GIF, TIFF nor WebP inside)"


def _video_file_problem(path: Path) -> str | None:
    head = _head(path)
    if not head:
        return "an empty file"
    if head[4:8] == b"ftyp" or head.startswith(_MKV_MAGIC) or (head[:4] == b"RIFF" and head[8:11] == b"AVI"):
        return None
    return "not a video (neither MP4/MOV, Matroska/WebM nor AVI inside)"


def _audio_problem(path: Path) -> str | None:
    if path.suffix.lower() == ".flac":
        head = _head(path)
        if not head:
            return "an empty file"
        return None if head.startswith(_FLAC_MAGIC) else "not a FLAC file"
    if not _head(path):
        return "an empty file"
    try:
        with wave.open(str(path), "rb") as w:
            frames, rate = w.getnframes(), w.getframerate()
    except (wave.Error, EOFError) as e:
        return f"not a PCM wav the worker can read ({e or 'its header is cut short'})"
    if frames == 0:
        return "an empty wav (no samples)"
    if rate <= 0:
        return "a wav without a sample rate"
    return None


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _escapes(folder: Path, tree: Path) -> str | None:
    """A symlink at or under `folder` whose target lies outside `tree`, as 'LINK -> TARGET'."""
    real_tree = tree.resolve()
    if folder.is_symlink() or not _inside(folder.resolve(), real_tree):
        target = folder.resolve()
        if not _inside(target, real_tree):
            return f"{folder} -> {target}"
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                target = p.resolve()
                if not _inside(target, real_tree):
                    return f"{p} -> {target}"
    return None


def problem(modality: str, source: str, tree: Path) -> str | None:
    """Why a `source:` folder cannot feed `modality` here (one line), or None. `tree` is the project
    tree the scenario belongs to: a source inside it must not leave it through a symlink."""
    expanded = mm._VAR.sub(lambda m: os.environ.get(m.group(1)) or (m.group(2) or ""), source)
    unset = [m.group(1) for m in mm._VAR.finditer(source) if not os.environ.get(m.group(1)) and not m.group(2)]
    shown = f"{source!r}" + (f" ({', '.join('$' + v for v in unset)} not set here)" if unset else "")
    path = Path(os.path.expanduser(expanded))
    if not path.is_absolute():
        return (f"{shown} is a relative path, which each run would read from its own run folder; "
                "give an absolute path (or ~/..., ${VAR}/...)")
    if not path.exists() and not path.is_symlink():
        return f"{shown}: no such folder"
    if path.is_symlink() and not path.exists():
        return f"{shown}: a symlink to {os.readlink(path)}, which does not exist"
    if not path.is_dir():
        return f"{shown} is a file, not a folder"
    if _inside(Path(os.path.abspath(path)), Path(os.path.abspath(tree))):
        out = _escapes(path, tree)
        if out:
            return f"{shown}: symlink {out} points out of the project tree {tree}"
    if modality == "image":
        files = mm._files(path, mm.IMAGE_EXT)
        if not files:
            return f"{shown} holds no image files ({', '.join(mm.IMAGE_EXT)})"
        bad = ((f, _image_problem(f)) for f in files)
    elif modality == "video":
        entries = mm._video_entries(path)
        if not entries:
            return f"{shown} holds no videos (folders of frame images, or {', '.join(mm.VIDEO_EXT)} files)"
        bad = ((f, _image_problem(f)) for e in entries if e.is_dir() for f in mm._files(e, mm.IMAGE_EXT))
        bad = (*bad, *((e, _video_file_problem(e)) for e in entries if not e.is_dir()))
    elif modality == "audio":
        files = mm._files(path, mm.AUDIO_EXT)
        if not files:
            return f"{shown} holds no audio files ({', '.join(mm.AUDIO_EXT)})"
        bad = ((f, _audio_problem(f)) for f in files)
    else:
        return None
    try:
        for f, why in bad:
            if why:
                return f"{shown}: {f.relative_to(path)} is {why}"
    except OSError as e:
        return f"{shown}: {e.filename or path}: unreadable ({e.strerror or e})"
    return None
