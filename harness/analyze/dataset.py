"""A study folder as one tidy table: every `results.json` under it, one row per record.

`load(study_dir)` never stops at a bad file. A truncated or corrupt record, a too-new
schema_version, a record that does not validate: reported in `Dataset.problems` by path and left
out; the rest loads. Older schema versions are migrated by `record.migrate`. A failed run's
`run.log` is read for failure attribution; a log that is not UTF-8 is reported and left out of it
(the record itself still loads, attributed from what the record holds).

Records are read and their numbers checked by `harness.schema.checks` (the one validation every
reader of a record goes through); nothing else is parsed, so ten thousand records load in a few
seconds. A `main_series` in study.yaml that names no series of the records is a problem of study.yaml
(a warning; `--strict` makes it an error), not silently empty tables.

The Dataset is the one reader of a study's run folders: it keeps each row's typed record
(`Dataset.record`) and reads a run's logs, profile and kept outputs when asked, so analysis never
opens a run's files itself (tests/test_file_reads.py).
"""

from __future__ import annotations

import json
import re
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pandas as pd
from pydantic import ValidationError

from harness import workloads
from harness.schema import checks
from harness.core.errors import InvalidFileError, UserError
from harness.schema import study as study_file
from harness.schema import sweep_index
from harness.schema.record import RunRecord
from harness.core.yamlio import describe, validate_at


def machine_of(manifest: Mapping[str, Any]) -> str | None:
    """The machine a run measured on: a GPU machine by its GPUs' uuids (every lent machine calls itself
    the same host name, and one card model spans machines whose speed differs), a CPU host by its name and
    CPU model; None where the manifest holds neither."""
    gpus = (manifest.get("nvidia_smi") or {}).get("gpus") or []
    uuids = [g.get("uuid") for g in gpus if isinstance(g, dict) and g.get("uuid")]
    if uuids:
        return ",".join(uuids)
    host = manifest.get("host")
    return f"{host}/{manifest.get('cpu_model')}" if host else None


# The columns of `Dataset.records`, in order. `harness.analyze.export` describes the canonical subset.
_BEFORE_METRICS: tuple[str, ...] = (
    "study", "provenance", "series", "leg", "leg_label", "model", "tp", "workload", "kind", "arm",
    "repeat", "attempt", "status")
# Then every registered kind's metric fields (workloads.metric_fields: registry order), then these.
_AFTER_METRICS: tuple[str, ...] = (
    "num_seqs", "prompt_tokens", "output_tokens", "invocation_id",
    "reused", "reused_by", "allow_dirty", "dirty", "failure_reason", "failure_signature", "failure_class",
    "failure_error", "failure_detail", "failure_phase", "vllm", "torch", "torch_cuda",
    "transformers", "cutlass", "device", "host", "machine", "compat_id", "pins", "fingerprint", "run_id",
    "source_document", "source_table", "source_note", "started_at", "run_dir",
    # The workload as the run declared it, so analysis never re-reads a run's files.
    "modality", "input_len", "output_len", "workload_spec", "prompts_sha256",
    # Where the run's time went, and which engine instance measured it.
    "wall_s", "timed_s", "engine_init_s", "engine_mode", "engine_group", "engine_instance", "engine_position",
    # A profiled run (never canonical) and the prefill/decode split of vLLM's request stats.
    "profiled", "ttft_s", "tpot_s", "decode_share",
    # The paired design: the run's engine block and every timed pass as (round, value), in the
    # kind's unit; None for a run measured in the serial design.
    "paired_block", "paired_passes", "paired_incomplete",
)


def columns() -> tuple[str, ...]:
    """The dataset's columns: a new kind's metric field comes with its registry line."""
    return (*_BEFORE_METRICS, *workloads.metric_fields(), *_AFTER_METRICS)


def _metric_cells(rec: RunRecord) -> dict[str, Any]:
    # A list (a kind's per-batch samples) is kept as a tuple, as every list-valued column is.
    vals = {f: getattr(rec.metrics, f, None) for f in workloads.metric_fields()}
    return {f: tuple(v) if isinstance(v, list) else v for f, v in vals.items()}


@dataclass(frozen=True, kw_only=True)
class LegMeta:
    name: str
    label: str


@dataclass(frozen=True, kw_only=True)
class StudyMeta:
    """`study.yaml`: the study's name, leg order and labels, and optional row orders."""

    name: str
    title: str = ""
    provenance: str = "measured"
    main_series: str = "main"
    legs: tuple[LegMeta, ...] = ()
    model_order: tuple[str, ...] = ()
    workload_order: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def label(self, leg: str) -> str:
        return next((x.label for x in self.legs if x.name == leg), leg)

    @property
    def leg_names(self) -> tuple[str, ...]:
        return tuple(x.name for x in self.legs)


@dataclass(frozen=True, kw_only=True)
class Problem:
    """A file `load` could not use, or used only in part. `kind`: `unreadable` (left out: cannot be
    read or validated), `excluded` (read, but its numbers cannot be a measurement or its run id
    is another record's: left out of every table), `note` (the record loaded; e.g. its log could
    not be decoded)."""

    path: Path
    what: str
    kind: str = "unreadable"

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


@dataclass(frozen=True, kw_only=True)
class Dataset:
    """What `load` found. `records` has the columns of columns(), one row per loaded record."""

    root: Path
    study: StudyMeta
    records: pd.DataFrame
    problems: tuple[Problem, ...]
    # Row order of the sweeps that measured the study (scenario order), used when study.yaml
    # gives no model/workload order.
    sweep_order: tuple[tuple[str, str], ...] = ()
    # Earlier records later sweeps measured over, as their indexes list them (moved to superseded/).
    superseded: tuple[dict[str, Any], ...] = ()
    # Run folders (relative to the study) a run was started in but that hold no record: the
    # measurement was cut off (a lease ended, the process was killed) or is still going.
    unfinished: tuple[str, ...] = ()
    # Every readable sweep index, in time order (harness.analyze.sweeptime reads their start and end).
    sweeps: tuple[sweep_index.SweepIndex, ...] = ()
    # The typed record of every row, by its run_dir: what analysis needs beyond the frame's columns
    # (serve points, manifests, engine groups) comes from here, never from the run folder again.
    typed: Mapping[str, RunRecord] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.records)

    def record(self, run_dir: str | Path) -> RunRecord:
        """The record of the row whose run_dir (relative to the study) is `run_dir`."""
        try:
            return self.typed[str(run_dir)]
        except KeyError:
            raise UserError(f"{self.root / str(run_dir)}: no loaded record of this study") from None

    def run_log(self, run_dir: str | Path) -> str:
        """The run's own log as text ("" when it has none); undecodable bytes replaced."""
        return read_text_or_empty(self.root / str(run_dir) / "run.log")

    def engine_logs(self, run_dir: str | Path) -> tuple[str, str]:
        """The run's own log and, for a run of an engine group, its instance's log, where the engine
        started ("" for either that is missing)."""
        return engine_logs(self.root / str(run_dir), self.record(run_dir))

    def profile(self, run_dir: str | Path) -> dict | None:
        """A profiled run's profile.json (harness.analyze.profile), None when it has none."""
        return read_profile(self.root / str(run_dir))

    def outputs(self, run_dir: str | Path) -> list[dict[str, Any]]:
        """The outputs an equivalence run kept, as its record names them (OSError/ValueError/EOFError
        when the file is missing or corrupt)."""
        from harness.workloads import equivalence as kind

        return kind.read_outputs(self.root / str(run_dir), self.record(run_dir).work.outputs)

    def model_order(self) -> list[str]:
        return model_order(self)


def read_text_or_empty(path: Path) -> str:
    """A log as text, "" when it cannot be read: a log only ever adds facts, its absence none."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def engine_logs(run_dir: Path, rec: RunRecord) -> tuple[str, str]:
    """The logs of the engine that timed the run in `run_dir`: its own, and its group's instance log
    (the record's `engine.group_log`, relative to the run) or "" for a run with its own engine. For a
    caller holding records rather than a Dataset (a crosscheck summarising the runs it measured)."""
    group = rec.engine.group_log if rec.engine else None
    own = read_text_or_empty(run_dir / "run.log")
    return own, read_text_or_empty((run_dir / group).resolve()) if group else ""


# profile.json by (path, mtime): a trace summary is recomputed once per file, not per table that asks.
_PROFILES: dict[tuple[str, float], dict | None] = {}


def read_profile(run_dir: Path | str) -> dict | None:
    """A run's profile.json, or None when the run has none (or it is unreadable). Where the trace is
    kept, its summary is computed again from it, so every run is grouped by the current family rules
    whatever rules the worker that measured it had; a dropped trace leaves the worker's summary."""
    path = Path(run_dir) / "profile.json"
    try:
        key = (str(path), path.stat().st_mtime)
    except OSError:
        return None
    if key in _PROFILES:
        return _PROFILES[key]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not data.get("summary"):
        return None
    traces = [Path(run_dir) / t for t in data.get("traces") or [] if ".pt.trace.json" in t]
    if traces and all(t.is_file() for t in traces):
        from harness.measure.worker.kernel_trace import read_trace, summarize

        events = [e for t in traces for e in read_trace(t)]
        data = data | {"summary": asdict(summarize(events))}
    _PROFILES[key] = data
    return data


def _study_meta(root: Path) -> dict[str, Any]:
    path = root / "study.yaml"
    if not path.exists():
        return {}
    # Bounded like every YAML input (size, aliases); errors carry the line of the failing key.
    data, _ = validate_at(study_file.StudyFile, path)
    return data  # type: ignore[return-value]


def _legs_from(meta: dict[str, Any], path: Path) -> tuple[LegMeta, ...]:
    legs = meta.get("legs") or []
    if not isinstance(legs, list):
        raise InvalidFileError(path, "legs: expected a list of {name, label}")
    out = []
    for i, x in enumerate(legs):
        if isinstance(x, str):
            out.append(LegMeta(name=x, label=x))
        elif isinstance(x, dict) and "name" in x:
            out.append(LegMeta(name=str(x["name"]), label=str(x.get("label", x["name"]))))
        else:
            raise InvalidFileError(path, f"legs[{i}]: expected {{name, label}}")
    return tuple(out)


def _str_list(meta: dict[str, Any], key: str, path: Path) -> tuple[str, ...]:
    v = meta.get(key) or []
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise InvalidFileError(path, f"{key}: expected a list of names")
    return tuple(v)


def _sweep_index(root: Path, problems: list[Problem]
                 ) -> tuple[dict[str, tuple[str, bool]], list[tuple[str, str]], set[tuple[str, str]], list[dict],
                            list[sweep_index.SweepIndex]]:
    """run_id -> (invocation, reused) from the latest sweep index that lists the run; and every
    record an invocation superseded.

    Sweep index names start with a sortable timestamp, so name order is time order.
    """
    latest: dict[str, tuple[str, bool]] = {}
    # (run_id, invocation) pairs that an index lists as measured by that invocation.
    measured_here: set[tuple[str, str]] = set()
    order: list[str] = []
    superseded: list[dict] = []
    parsed: list[sweep_index.SweepIndex] = []
    sweeps = root / "sweeps"
    if not sweeps.is_dir():
        return latest, [], measured_here, superseded, parsed
    for path in sorted(sweeps.glob("*.json")):
        try:
            idx = sweep_index.parse(json.loads(path.read_text(encoding="utf-8")), path)
            for r in idx.runs:
                latest[r.run_id] = (idx.invocation_id, r.reused)
                if not r.reused:
                    measured_here.add((r.run_id, idx.invocation_id))
                order.append(r.run_id)
            superseded += [e | {"by": idx.invocation_id} for e in idx.superseded]
            parsed.append(idx)
        except (OSError, UnicodeDecodeError, ValueError) as e:
            what = str(e).splitlines()[0] if not isinstance(e, ValidationError) else describe(e)
            problems.append(Problem(path=path, what=f"sweep index unreadable ({type(e).__name__}: {what}); ignored"))
    # run_id = series/leg/model/workload/arm/rK: keep (model, workload) in first-seen order.
    pairs: list[tuple[str, str]] = []
    for rid in order:
        parts = rid.split("/")
        if len(parts) >= 4 and (parts[2], parts[3]) not in pairs:
            pairs.append((parts[2], parts[3]))
    return latest, pairs, measured_here, superseded, parsed


def _result_files(root: Path) -> tuple[list[Path], list[str]]:
    """Every record under runs/, and every run folder (rK, holding the spec a run starts from) that
    has none."""
    base = root / "runs" if (root / "runs").is_dir() else root
    found: list[Path] = []
    unfinished: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        if "results.json" in filenames:
            found.append(Path(dirpath) / "results.json")
        elif "spec.json" in filenames and re.fullmatch(r"r\d+", Path(dirpath).name):
            unfinished.append(str(Path(dirpath).relative_to(root)))
    return found, unfinished


def _read_log(run_dir: Path, problems: list[Problem]) -> str | None:
    path = run_dir / "run.log"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        problems.append(Problem(path=path, kind="note",
                                what=f"unreadable ({e.strerror}); left out of failure attribution, record loaded"))
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        problems.append(Problem(path=path, kind="note", what=f"not UTF-8 (byte {e.start}); log left out of "
                                                             f"failure attribution, record loaded"))
        return None


def _kind(rec: RunRecord) -> str | None:
    return checks.kind_of(rec)


def _row(rec: RunRecord, run_dir: Path, reuse: tuple[str, bool] | None, log: str | None) -> dict[str, Any]:
    from harness.analyze.failure import attribute

    m = rec.manifest
    att = attribute(rec, log) if rec.status != "ok" else None
    return {
        "study": rec.study, "provenance": rec.provenance, "series": rec.series, "leg": rec.leg,
        "leg_label": rec.leg_label, "model": rec.model, "tp": rec.tp, "workload": rec.workload,
        "kind": _kind(rec), "arm": rec.arm, "repeat": rec.repeat, "attempt": rec.attempt,
        "status": rec.status, **_metric_cells(rec),
        "num_seqs": rec.work.num_seqs, "prompt_tokens": rec.work.prompt_tokens,
        "output_tokens": rec.work.output_tokens, "invocation_id": rec.invocation_id,
        "reused": None if reuse is None else reuse[1], "reused_by": None if reuse is None else reuse[0],
        "allow_dirty": rec.allow_dirty, "dirty": tuple(rec.dirty),
        "failure_reason": rec.failure.reason if rec.failure else None,
        "failure_signature": att.signature if att else None,
        "failure_class": att.klass if att else None,
        "failure_error": att.error if att else None,
        "failure_detail": att.detail if att else None,
        "failure_phase": rec.failure.phase if rec.failure else None,
        "vllm": m.get("vllm"), "torch": m.get("torch"), "torch_cuda": m.get("torch_cuda"),
        "transformers": m.get("transformers"), "cutlass": m.get("nvidia_cutlass_dsl"),
        "device": m.get("device"), "host": m.get("host") or rec.node, "machine": machine_of(m),
        "compat_id": rec.compat_id,
        "pins": tuple(rec.pins), "fingerprint": rec.fingerprint, "run_id": rec.run_id,
        # Declared changes on top of the leg's lock (worker/stack.py reads them from the venv's marker).
        "leg_patches": tuple(m.get("leg_patches") or ()), "leg_extras": tuple(m.get("leg_extras") or ()),
        "source_document": rec.source.document if rec.source else None,
        "source_table": rec.source.table if rec.source else None,
        "source_note": rec.source.note if rec.source else None,
        "started_at": rec.started_at, "run_dir": str(run_dir),
        "modality": rec.workload_spec.get("modality", "text") if rec.workload_spec else None,
        "input_len": rec.workload_spec.get("input_len"), "output_len": rec.workload_spec.get("output_len"),
        "workload_spec": dict(rec.workload_spec), "prompts_sha256": rec.work.prompts_sha256,
        "wall_s": rec.timing.wall_s, "timed_s": rec.timing.timed_s, "engine_init_s": rec.timing.engine_init_s,
        "engine_mode": rec.engine.mode if rec.engine else "per-run",
        "engine_group": rec.engine.group_id if rec.engine else None,
        "engine_instance": rec.engine.instance if rec.engine else None,
        "engine_position": rec.engine.position if rec.engine else None,
        "profiled": rec.profile is not None,
        "ttft_s": rec.phases.ttft_s if rec.phases else None, "tpot_s": rec.phases.tpot_s if rec.phases else None,
        "decode_share": rec.phases.decode_share if rec.phases else None,
        "paired_block": rec.paired.block if rec.paired else None,
        "paired_passes": (tuple((x.round, x.value) for x in rec.paired.passes if x.value is not None and x.value > 0)
                          if rec.paired else None),
        "paired_incomplete": rec.paired.incomplete if rec.paired else None,
    }


# One results.json, migrated and validated; a one-line UserError naming the file when it cannot be
# used. The schema's reader, which every other reader of a record goes through too.
read_record = checks.read


def load(study_dir: Path | str) -> Dataset:
    """Every results.json under `study_dir` (a folder holding study.yaml and runs/)."""
    root = Path(study_dir)
    if root.exists() and not root.is_dir():
        raise UserError(f"{root}: is a file, not a study folder")
    if not root.is_dir():
        raise UserError(f"{root}: no such study folder")
    if not (root / "study.yaml").exists() and not (root / "runs").is_dir():
        raise UserError(f"{root}: not a study folder (neither study.yaml nor runs/ in it)")
    problems: list[Problem] = []
    meta = _study_meta(root)
    reuse, sweep_pairs, measured_here, superseded, sweeps = _sweep_index(root, problems)
    rows: list[dict[str, Any]] = []
    typed: dict[str, RunRecord] = {}
    files, unfinished = _result_files(root)
    for path in files:
        try:
            rec = read_record(path)
        except UserError as e:
            problems.append(Problem(path=path, what=str(e).removeprefix(f"{path}: ")))
            continue
        why = checks.metric_problem(rec)
        if why:
            problems.append(Problem(path=path, what=checks.excluded_why(why), kind="excluded"))
            continue
        log = _read_log(path.parent, problems) if rec.status != "ok" else None
        info = reuse.get(rec.run_id)
        if info and info[1] and (rec.run_id, rec.invocation_id) in measured_here:
            # A later invocation resumed over it, but this study's own index shows the invocation
            # that measured this very record: a traceable measurement, not a carried-over number.
            info = (info[0], False)
        rows.append(_row(rec, path.parent.relative_to(root), info, log))
        typed[str(path.parent.relative_to(root))] = rec
    rows = _drop_duplicates(root, rows, problems)
    typed = {r["run_dir"]: typed[r["run_dir"]] for r in rows}
    df = pd.DataFrame(rows, columns=list(columns()))
    df = _fill_kind(df)
    yaml_path = root / "study.yaml"
    legs = _legs_from(meta, yaml_path)
    if not legs and len(df):
        # No study.yaml leg order: the order legs first appear in, labelled as their records say.
        first = df.drop_duplicates("leg")
        legs = tuple(LegMeta(name=r.leg, label=r.leg_label) for r in first.itertuples())
    study = StudyMeta(
        name=str(meta.get("name", root.name)), title=str(meta.get("title", "")),
        provenance=str(meta.get("provenance", "measured")),
        main_series=str(meta.get("main_series", "main")), legs=legs,
        model_order=_str_list(meta, "model_order", yaml_path),
        workload_order=_str_list(meta, "workload_order", yaml_path),
        extra={k: v for k, v in meta.items() if k not in {"name", "title", "provenance", "main_series", "legs",
                                                           "model_order", "workload_order", "schema_version"}},
    )
    if len(df) and study.main_series not in set(df["series"]):
        problems.append(_no_main_series(yaml_path, study.main_series, df))
    return Dataset(root=root, study=study, records=df, problems=tuple(problems), sweep_order=tuple(sweep_pairs),
                   superseded=tuple(superseded), unfinished=tuple(unfinished), sweeps=tuple(sweeps),
                   typed=typed)


def _no_main_series(path: Path, name: str, df: pd.DataFrame) -> Problem:
    """study.yaml's main_series names no series the records hold (a typo, or the default "main" in a
    study whose series are named otherwise): every table of the main series would be silently empty."""
    line = None
    if path.is_file():
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
        line = next((i + 1 for i, ln in enumerate(text) if re.match(r"main_series\s*:", ln)), None)
    where = f"main_series (line {line})" if line else "main_series (not set: the default)"
    have = ", ".join(sorted(set(df["series"])))
    return Problem(path=path, kind="note",
                   what=f"{where}: {name!r} names no series of the study's records (series: {have}); "
                        f"the main series' tables are empty")


def _drop_duplicates(root: Path, rows: list[dict[str, Any]], problems: list[Problem]) -> list[dict[str, Any]]:
    """A run id recorded twice is one measurement counted twice (a copied folder): the record in the
    folder its run id names is kept, every other copy excluded; with none there, all are."""
    by_id: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_id.setdefault(r["run_id"], []).append(r)
    drop: set[int] = set()
    for rid, group in by_id.items():
        if len(group) < 2:
            continue
        home = [r for r in group if Path(r["run_dir"]) in (Path("runs") / rid, Path(rid))]
        keep = home[0] if len(home) == 1 else None
        dirs = ", ".join(r["run_dir"] for r in group)
        for r in group:
            if r is keep:
                continue
            drop.add(id(r))
            where = f"kept {keep['run_dir']}" if keep else "none is in the folder its run id names"
            problems.append(Problem(path=root / r["run_dir"] / "results.json", kind="excluded",
                                    what=f"duplicate run id {rid!r} (recorded in {dirs}; {where}); record excluded"))
    return [r for r in rows if id(r) not in drop]


def _fill_kind(df: pd.DataFrame) -> pd.DataFrame:
    """A failed run records no metric; its workload's kind is the one other records of it show."""
    if df.empty or not df["kind"].isna().any():
        return df
    known = df.dropna(subset=["kind"]).drop_duplicates("workload").set_index("workload")["kind"]
    df["kind"] = df["kind"].fillna(df["workload"].map(known))
    return df


# --- order of the models, which tables, failure attribution and reports share ---

def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def model_order(ds: Dataset) -> list[str]:
    """Every model of the dataset in table order."""
    models = list(dict.fromkeys(ds.records["model"])) if len(ds.records) else []
    by_safe = {safe_name(m): m for m in models}
    order = [m for m in ds.study.model_order if m in models]
    order += [by_safe[m] for m, _ in ds.sweep_order if m in by_safe and by_safe[m] not in order]
    order += sorted(m for m in models if m not in order)
    return list(dict.fromkeys(order))
