"""A citable bundle of a study, as a dataset repository needs it: `harness publish results/STUDY DIR`.

What goes in, from the study as it shipped (its rendered `report/` and its records):
  README.md (the dataset card), REPORT.md, index.html, figures/, CANONICAL.md, MANIFEST.md, tables/,
  export/, compare/ (where the study has two legs);
  results/  the records: study.yaml, every results.json and run.jsonl (and each run's manifest.json),
            the sweep indexes, the study's notes and, for a transcribed study, its verbatim sources;
  logs.tar.gz  every run.log, one archive (deterministic: sorted, no timestamps);
  patches/  scenarios/ and legs/ (the files the runs used), leg-patches/ (every patch those legs name),
            harness/ (the harness's uncommitted changes at measuring time: each distinct `harness.diff`
            a run recorded, named by its hash);
  REGENERATE.md  the one command that rebuilds tables and report from the bundle.
MANIFEST.md gains a section listing the harness's source state per commit (dirty or not, diff hash).
The bundle is written to a scratch folder first and moved into place whole (schema.outdir: an existing
folder is replaced only with --replace, and only if an earlier `publish` wrote it).
"""

from __future__ import annotations

import gzip
import io
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from harness.core import paths
from harness.core.errors import UserError
from harness.core.locate import rel, resolve
from harness.schema.outdir import output_dir
from harness.schema.output_marker import FOLDER_MARKER

REPORT_FILES = ("README.md", "REPORT.md", "index.html", "CANONICAL.md", "MANIFEST.md")
REPORT_DIRS = ("figures", "tables", "export", "compare")
RECORD_FILES = ("results.json", "run.jsonl", "manifest.json")
STUDY_EXTRAS = ("study.yaml", "printed.yaml", "transcribe.py", "README.md")
STUDY_DIRS = ("sweeps", "notes", "published")


@dataclass(frozen=True, kw_only=True)
class Bundle:
    out: Path
    files: int
    logs: int
    records: int
    diffs: tuple[str, ...]       # sha256 of each distinct uncommitted change set
    missing: tuple[str, ...]     # report files the study's render did not write


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def _logs_tar(runs: Path, dest: Path) -> int:
    logs = sorted(runs.rglob("run.log")) if runs.is_dir() else []
    with open(dest, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w") as tar:
        for p in logs:
            data = p.read_bytes()
            info = tarfile.TarInfo(str(Path("runs") / p.relative_to(runs)))
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    return len(logs)


def _records(study: Path, out: Path) -> int:
    n = 0
    for name in STUDY_EXTRAS:
        if (study / name).is_file():
            _copy(study / name, out / name)
    for d in STUDY_DIRS:
        if (study / d).is_dir():
            shutil.copytree(study / d, out / d)
    runs = study / "runs"
    for p in sorted(runs.rglob("*")) if runs.is_dir() else []:
        if p.is_file() and p.name in RECORD_FILES:
            _copy(p, out / "runs" / p.relative_to(runs))
            n += p.name == "results.json"
    return n


def _used(study: Path) -> tuple[set[str], set[str], dict[str, dict]]:
    """Scenario names, leg names and harness source states (by diff hash, or commit) the records name,
    as the Dataset read them (sweep indexes and records migrated; unreadable ones left out)."""
    from harness.analyze.dataset import load

    ds = load(study)
    scenarios = {idx.scenario for idx in ds.sweeps if isinstance(idx.scenario, str)}
    legs: set[str] = set()
    states: dict[str, dict] = {}
    for run_dir, rec in sorted(ds.typed.items(), key=lambda kv: Path(kv[0]).parts):
        if rec.leg:
            legs.add(str(rec.leg))
        src = rec.manifest.get("harness_source")
        if isinstance(src, dict):
            key = src.get("diff_sha256") or f"commit:{src.get('commit')}"
            states.setdefault(key, {**src, "runs": 0, "diff_path": None})
            states[key]["runs"] += 1
            if src.get("diff") and (study / run_dir / src["diff"]).is_file():
                states[key]["diff_path"] = str(study / run_dir / src["diff"])
    return scenarios, legs, states


def _patches(study: Path, out: Path) -> tuple[list[str], dict[str, dict]]:
    import yaml

    scenarios, legs, states = _used(study)
    notes = []
    for name in sorted(scenarios):
        for cand in (paths.SCENARIOS / f"{name}.yaml", Path(name)):
            if cand.is_file():
                _copy(cand, out / "scenarios" / cand.name)
                break
        else:
            notes.append(f"scenario `{name}`: not found under scenarios/")
    for name in sorted(legs):
        leg_file = paths.LEGS / f"{name}.yaml"
        if not leg_file.is_file():
            notes.append(f"leg `{name}`: no leg file environment/legs/{name}.yaml")
            continue
        _copy(leg_file, out / "legs" / leg_file.name)
        try:
            spec = yaml.safe_load(leg_file.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError:
            spec = {}
        for patch in spec.get("patches") or []:
            src = paths.ENVIRONMENT / "patches" / str(patch.get("file") if isinstance(patch, dict) else patch)
            if src.is_file():
                _copy(src, out / "leg-patches" / src.name)
            else:
                notes.append(f"leg `{name}`: patch {src.name} not found under environment/patches/")
    for key, s in states.items():
        if s.get("diff_path"):
            _copy(Path(s["diff_path"]), out / "harness" / f"{key[:16]}.diff")
    return notes, states


def _source_section(states: dict[str, dict]) -> str:
    lines = ["", "## Harness source state at measuring time", ""]
    if not states:
        return "\n".join(lines + ["These records do not carry the harness's source state (they predate it, or "
                                  "are transcribed).", ""])
    lines += ["| commit | uncommitted changes | diff sha256 | runs | diff in this bundle |", "|---|---|---|---:|---|"]
    for key, s in sorted(states.items(), key=lambda kv: -kv[1]["runs"]):
        dirty = "yes" if s.get("dirty") else "no" if s.get("dirty") is False else "unknown"
        diff = f"`patches/harness/{key[:16]}.diff`" if s.get("diff_path") else "—"
        lines.append(f"| `{str(s.get('commit'))[:12]}` | {dirty} | `{(s.get('diff_sha256') or '—')[:16]}` | "
                     f"{s['runs']} | {diff} |")
    return "\n".join(lines + [""])


def publish(study_dir: Path | str, dest: Path | str, *, replace: bool = False) -> Bundle:
    """Assemble the bundle of a rendered study under `dest`: a new folder, or (with `replace`) one an
    earlier `publish` wrote; anything else there is refused (schema.outdir), never deleted."""
    study = resolve(study_dir)
    if not (study / "study.yaml").is_file():
        raise UserError(f"{study_dir}: not a study folder (no study.yaml)")
    report = study / "report"
    if not (report / "REPORT.md").is_file():
        raise UserError(f"{rel(report)}/REPORT.md: the study has no rendered report; run "
                        f"`harness report {rel(study)}` first")
    with output_dir(dest, verb="publish", replace=replace) as scratch:
        missing = []
        for name in REPORT_FILES:
            if (report / name).is_file():
                _copy(report / name, scratch / name)
            else:
                missing.append(name)
        for d in REPORT_DIRS:
            if (report / d).is_dir():
                shutil.copytree(report / d, scratch / d)
        n_rec = _records(study, scratch / "results")
        n_logs = _logs_tar(study / "runs", scratch / "logs.tar.gz")
        notes, states = _patches(study, scratch / "patches")
        if (scratch / "MANIFEST.md").is_file():
            with (scratch / "MANIFEST.md").open("a", encoding="utf-8") as f:
                f.write(_source_section(states))
        (scratch / "REGENERATE.md").write_text(regenerate_md(notes), encoding="utf-8")
    out = Path(dest)
    files = sum(1 for p in out.rglob("*") if p.is_file() and p.name != FOLDER_MARKER)
    return Bundle(out=out, files=files, logs=n_logs, records=n_rec,
                  diffs=tuple(k for k, s in states.items() if s.get("diff_sha256")), missing=tuple(missing))


def regenerate_md(notes: list[str]) -> str:
    return "\n".join([
        "# Regenerating the tables and the report", "",
        "From a checkout of vllm-harness, with this bundle's folder as `BUNDLE`:", "",
        "```sh",
        "python -m harness report BUNDLE/results --out BUNDLE/regenerated",
        "```", "",
        "It reads only `results/` (the records, study.yaml, notes) and writes CANONICAL.md, MANIFEST.md, tables/, "
        "compare/, export/, REPORT.md, index.html and the dataset card under `regenerated/`; they match the files "
        "here. The run logs are in `logs.tar.gz` (`tar -xzf logs.tar.gz -C results` puts each `run.log` beside its "
        "record).",
        *(["", "Not included:", *[f"- {n}" for n in notes]] if notes else []),
        "",
    ])


def bundle_summary(b: Bundle) -> str:
    return (f"publish: {b.out} ({b.files} files: {b.records} records, {b.logs} run logs in logs.tar.gz, "
            f"{len(b.diffs)} uncommitted change set(s) in patches/harness/)"
            + (f"; the render wrote no {', '.join(b.missing)}" if b.missing else ""))
