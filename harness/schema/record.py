"""Run records: one `results.json` per run directory, beside `run.jsonl` and `run.log`.

SCHEMA_VERSION history (loading branches on the stored version; `migrate` upgrades in order):
# 1 - the hand-run harness's flat `results.json` (bench_vllm.py): `version`, `model`, `workload`,
#     `num_seqs`, `vllm_output_tokens`, `elapsed`, `tokens_per_second`, `ms_per_token`, `rc`.
#     Never written by this package; read so that older datasets load.
# 2 - nested record: leg/env, model, workload, arm, repeat, fingerprint, status, metrics, work,
#     timing, manifest, failure, provenance, invocation; written by this package.
# 3 - `engine`: the engine instance that measured the run (per-run or per-group, group id, restart
#     count, engine init time, position in the group, the group log's byte range);
#     `metrics.samples_tok_s` and `timing.passes` when a workload repeats its timed pass;
#     `work.inputs` (what a multimodal workload fed the engine). Version-2 records lift unchanged.
# 4 - `failure.failure_class` (the root-cause class of FAILURE_CLASSES) and `failure.signature` (the
#     catalogue id), as attributed when the run was recorded; `failure.diagnosis`: the run re-run once
#     with vLLM's DEBUG logging because its log named no cause. Version-3 records lift unchanged
#     (class and signature absent: attribution computes them from the log when a dataset loads).
# 5 - `work.outputs`: what a workload kind that checks the outputs themselves kept (the equivalence
#     kind: its per-prompt file in the run folder, that file's hash, counts). Version-4 records lift
#     unchanged (no outputs kept).
# 6 - `serve`: a serve run's client, SLO and load points (harness.schema.serve). Version-5 records
#     lift unchanged (no serve run before it).
# 7 - `profile`: a profiled run's settings, trace and operator summary (its throughput is not a
#     canonical number); `phases`: the prefill/decode split from vLLM's request stats (time to first
#     token, time per output token, decode share). Version-6 records lift unchanged (neither kept).
# 8 - `paired`: a run measured in the paired design (harness.measure.paired): its block, the partner
#     legs, the pass order's seed and every timed pass (round, position, start/end, seconds, value,
#     the idle partner engine's CPU time, the wait for it to go idle, wake/sleep times); `engine.mode` may
#     be "paired".
#     Version-7 records lift unchanged (no paired run before it).
# 9 - `serve.capacity`: a serve run's capacity search (declaration, probes with each SLO percentile's
#     order-statistic interval, stopping rule, result); `serve.inputs`: an image serve workload's
#     image hashes (harness.schema.serve). Version-8 records lift unchanged (neither kept before).
# 10 - `paired.passes[].handover`: where a paired pass's region went, seen from the front end (up to
#     the last request handed to the engine, the time inside add_request, after it;
#     harness/measure/worker/handover.py). Version-9 records lift unchanged (not measured before).
# 11 - `serve.points[].metrics.lead_requests`: uncounted requests that held a paced point in steady state
#     (a serve workload's lead_in_s and lead_out). Version-10 records lift unchanged (0: none sent).
# 12 - `serve.points[].engine`: the engine's own stats over the point, read from the server's log
#     (harness.measure.engine_log); `serve.points[].metrics.send_lag_ms`: how late each counted request
#     left against its schedule. Version-11 records lift unchanged (None and empty: not measured before).
# 13 - `serve.points[].engine_latency`: the server's own TTFT, queue and prefill histograms over the point
#     (harness.measure.engine_metrics, from vLLM's /metrics). Version-12 records lift unchanged (None).
A record newer than this package is refused: upgrade the harness rather than guess.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from harness.core.errors import UserError
from harness.schema.base import Frozen, FrozenLenient
from harness.schema.serve import ServeResult

SCHEMA_VERSION = 13

Status = Literal["ok", "failed", "timeout"]
Provenance = Literal["measured", "transcribed"]


# A metric is a number as written: a string or a boolean is refused, not coerced ("12.5" or true
# would otherwise become a throughput). NaN and infinities parse; every reader excludes them by name
# (harness.schema.checks).
_Num = Field(None, strict=True)


class Metrics(Frozen):
    # The table's throughput: total (prompt + output) tokens per second of the timed region,
    # vLLM's own "total tokens/s". Transcribed records hold the published figure here.
    throughput_tok_s: float | None = _Num
    total_tok_s: float | None = _Num
    output_tok_s: float | None = _Num
    requests_per_s: float | None = _Num
    # Latency workloads: ms per generated token of a timed batch (batch latency / tokens in it),
    # median over iterations; the per-iteration values are in `samples_ms_per_token`.
    ms_per_token: float | None = _Num
    samples_ms_per_token: list[float] = Field(default_factory=list, strict=True)
    # Throughput workloads that repeat their timed pass: each pass's total tok/s (the metric is their median).
    samples_tok_s: list[float] = Field(default_factory=list, strict=True)


class Work(Frozen):
    """What was computed, so legs can be checked for identical work."""

    num_seqs: int | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    prompts_sha256: str | None = None
    seed: int | None = None
    passes: int | None = None          # timed passes over the same prompts (min_timed_s / min_passes)
    inputs: dict[str, Any] = Field(default_factory=dict)  # multimodal inputs: counts, hashes, token counts
    outputs: dict[str, Any] = Field(default_factory=dict)  # per-prompt outputs kept by the kind: file, hash, counts


class Timing(Frozen):
    wall_s: float | None = None        # the run's process, start to exit
    engine_init_s: float | None = None
    warmup_s: float | None = None
    timed_s: float | None = None       # the timed region alone (every pass)
    passes_s: list[float] = Field(default_factory=list)  # each timed pass's own clock (older records: only when several)

    @property
    def timed_share(self) -> float | None:
        return self.timed_s / self.wall_s if self.timed_s and self.wall_s else None


# Root-cause classes of a failed run, a fixed vocabulary shared by the records, `harness explain`,
# the dataset's `failure_class` column and the report's failure table.
FailureClass = Literal[
    "unsupported-architecture", "config-unparseable", "transformers-api-drift", "dependency-window",
    "dependency-abi", "jit-build", "out-of-memory", "distributed-init", "input-shape",
    "quantization-refused", "timeout", "killed", "unknown",
]
FAILURE_CLASSES: tuple[str, ...] = FailureClass.__args__  # type: ignore[attr-defined]


class Diagnosis(Frozen):
    """A failed run whose log named no cause, re-run once with vLLM's DEBUG logging into
    `<run_dir>/diagnosis/` (harness.measure.diagnose)."""

    run_dir: str = "diagnosis"         # relative to the run's folder
    env: dict[str, str] = Field(default_factory=dict)   # what the re-run added to the environment
    status: Status
    exit_code: int | None = None
    signal: int | None = None
    surfaced: bool = False             # the DEBUG log holds a specific cause the first log lacked
    reason: str = ""                   # its most specific line (harness.core.logs.root_cause)
    exceptions: list[str] = Field(default_factory=list)  # final line of every traceback, harmless ones left out
    wall_s: float | None = None


class Failure(Frozen):
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""                   # one line: the last traceback's last line, or the timeout
    traceback: str = ""                # the last traceback of any of the run's processes
    exceptions: list[str] = Field(default_factory=list)  # final line of every traceback, in order
    phase: str | None = None           # last phase reached (run.jsonl)
    failure_class: FailureClass | None = None  # set by the attribution (harness.analyze.failure.record_class)
    signature: str | None = None       # the catalogue id beside it
    diagnosis: Diagnosis | None = None


class Engine(Frozen):
    """Which engine instance measured a run: with engine reuse, one engine serves a group's workloads."""

    mode: Literal["per-run", "per-group", "paired"] = "per-run"
    group_id: str | None = None        # series/leg/model/arm/rK of the group
    instance: int = 1                  # >1: a fresh engine after a crash or timeout in the group
    init_s: float | None = None        # that engine's start time
    position: int = 1                  # this workload's place among the instance's workloads
    group_log: str | None = None       # the instance's log, relative to the run directory
    log_range: list[int] = Field(default_factory=list)  # [start, end) byte offsets of this run in it


class Profile(FrozenLenient):
    """A profiled run: the torch profiler ran over `calls` generate() calls of the timed region
    (harness.measure.worker.kernel_trace). The profiler costs time, so the run's throughput is never canonical."""

    settings: dict[str, Any] = Field(default_factory=dict)
    calls: int = 0                     # profiled generate() calls
    seconds: float | None = None       # their wall time, profiler on
    output_tokens: int | None = None   # the tokens they generated
    device: str | None = None          # cpu: CPU operators; cuda: GPU kernels
    profiled_s: float | None = None    # what the summary's shares are of
    steps: int | None = None           # engine steps seen in the trace
    steps_capped: bool = False         # the profiler's step cap was reached: per-token figures undercount
    traces: list[str] = Field(default_factory=list)   # relative to the run directory
    trace_bytes: int = 0
    trace_dropped: bool = False        # over max_trace_mb: summarised, then deleted
    summary: str = "profile.json"      # the operator table, relative to the run directory
    error: str | None = None


class Handover(Frozen):
    """One pass's region split at the last request handed to the engine (worker/handover.py)."""

    requests: int                      # requests handed over by the timed call(s)
    call_s: float                      # the entry point's own span (generate / chat)
    handover_s: float                  # call start -> the last request handed over
    add_s: float                       # of that, inside add_request (input processing, the send)
    tail_s: float                      # the last request handed over -> the call's return


class PairedPass(Frozen):
    """One timed pass of a paired run; the analysis pairs it with the partner legs' pass of the same
    (model, arm, workload, block, round)."""

    round: int                         # 1..pairs
    position: int                      # 0: first of its round's legs for this workload
    started_at: float                  # unix seconds, the pass's wall-clock start and end
    ended_at: float
    seconds: float                     # the pass's own perf_counter clock (what the metric uses)
    value: float | None = None         # the kind's metric for this pass alone, in its unit
    output_tokens: int | None = None
    partner_cpu_s: float | None = None  # CPU time the idle partner engines' process groups used meanwhile
    settle_s: float | None = None      # the wait, before the pass, for the partners to go idle (paired.settle)
    wake_s: float | None = None        # this engine's wake-up before the pass (sleep mode), outside the clock
    sleep_s: float | None = None       # and its return to sleep after it
    handover: Handover | None = None   # the region's split at the last request handed over (v10)


class Paired(Frozen):
    """The paired design's facts of one run: which block (engine instances) and which partners."""

    design: Literal["paired"] = "paired"
    block: int                         # engine block, 1..blocks (the run's repeat)
    blocks: int
    pairs: int                         # rounds planned per block
    pair_order: Literal["balanced", "random"] = "balanced"
    order_seed: int = 0
    legs: list[str] = Field(default_factory=list)   # the legs measured in this block, this one included
    sleep: bool = False                # idle engines slept between their passes
    passes: list[PairedPass] = Field(default_factory=list)
    incomplete: str = ""               # why some rounds lack this run's pass or a partner's ("": none do)


class Phases(FrozenLenient):
    """The prefill/decode split of the first timed pass, medians over its requests, from vLLM's
    request stats (RequestOutput.metrics)."""

    requests: int
    ttft_s: float | None = None        # time to first token (queueing and prefill)
    tpot_s: float | None = None        # time per output token after the first
    decode_s: float | None = None      # first to last token
    decode_share: float | None = None  # decode_s / (ttft_s + decode_s), per request, median
    source: str = ""


class Source(Frozen):
    """Where a transcribed record's figure was read."""

    document: str
    table: str
    note: str = ""


class RunRecord(Frozen):
    schema_version: int = SCHEMA_VERSION
    provenance: Provenance = "measured"
    source: Source | None = None
    study: str
    series: str
    run_id: str
    fingerprint: str
    harness_version: str
    invocation_id: str | None = None   # the sweep invocation that measured it
    runner: str = "local"
    node: str | None = None
    attempt: int = 1                   # >1: retried after a lost node
    leg: str
    leg_label: str
    compat_id: str | None = None
    pins: list[str] = Field(default_factory=list)
    model: str
    tp: int
    workload: str
    workload_spec: dict[str, Any] = Field(default_factory=dict)
    arm: str = "default"
    arm_spec: dict[str, Any] = Field(default_factory=dict)
    engine_args: dict[str, Any] = Field(default_factory=dict)
    repeat: int = 1
    status: Status
    metrics: Metrics = Metrics()
    work: Work = Work()
    timing: Timing = Timing()
    manifest: dict[str, Any] = Field(default_factory=dict)
    failure: Failure | None = None
    engine: Engine | None = None
    serve: ServeResult | None = None   # a serve run's load points (the serve workload kind)
    profile: Profile | None = None     # set on a profiled run: never a canonical number
    phases: Phases | None = None
    paired: Paired | None = None       # measured in the paired design (harness.measure.paired)
    allow_dirty: bool = False
    dirty: list[str] = Field(default_factory=list)   # what the guards found and were told to allow
    started_at: str | None = None
    finished_at: str | None = None


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# Failures of the disk, not of the harness: a one-line error, the previous file left as it was.
_DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}


def write_json_atomic(path: Path, data: Any) -> None:
    """Write via a temporary file and rename: a reader never sees half a file, and a write that
    fails (a full disk) leaves the previous file intact."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    except OSError as e:
        if e.errno in _DISK_ERRORS or isinstance(e, (FileExistsError, NotADirectoryError)):
            raise UserError(f"{path}: cannot write ({e.strerror}); nothing was written") from None
        raise
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        if e.errno in _DISK_ERRORS:
            kept = "the previous file is unchanged" if path.exists() else "nothing was written"
            raise UserError(f"{path}: cannot write ({e.strerror}); {kept}") from None
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write(record: RunRecord, run_dir: Path) -> Path:
    path = run_dir / "results.json"
    write_json_atomic(path, record.model_dump(mode="json"))
    return path


# --- migrations -------------------------------------------------------------------------------

def _update_to_2(old: dict, path: Path) -> dict:
    """The hand-run harness's flat record -> version 2."""
    leg = str(old.get("leg") or old.get("version") or "unknown")
    ok = old.get("rc", 0) == 0 and old.get("status", "ok") == "ok"
    elapsed = old.get("elapsed")
    tps = old.get("tokens_per_second")
    return {
        "schema_version": 2,
        "provenance": old.get("provenance", "measured"),
        "study": old.get("study", path.parents[2].name if len(path.parents) > 2 else "unknown"),
        "series": old.get("series", "main"),
        "run_id": old.get("run_id", path.parent.name),
        "fingerprint": old.get("fingerprint", ""),
        "harness_version": old.get("harness_version", "hand-run"),
        "leg": leg, "leg_label": old.get("leg_label", leg),
        "model": old["model"], "tp": int(old.get("tp", 1)),
        "workload": old["workload"], "repeat": int(old.get("repeat", 1)),
        "status": "ok" if ok else "failed",
        "metrics": {"throughput_tok_s": tps, "total_tok_s": tps,
                    "ms_per_token": old.get("ms_per_token")},
        "work": {"num_seqs": old.get("num_seqs"), "output_tokens": old.get("vllm_output_tokens")},
        "timing": {"timed_s": elapsed},
        "failure": None if ok else {"exit_code": old.get("rc"), "reason": old.get("error", "")},
    }


def _update_to_3(old: dict, path: Path) -> dict:
    """Version 2 -> 3: every new field is optional; a version-2 run had its own engine."""
    return old | {"schema_version": 3}


def _update_to_4(old: dict, path: Path) -> dict:
    """Version 3 -> 4: the failure's class, signature and diagnosis are new and optional."""
    return {**old, "schema_version": 4}


def _update_to_5(old: dict, path: Path) -> dict:
    """Version 4 -> 5: `work.outputs` is new and optional."""
    return {**old, "schema_version": 5}


def _update_to_6(old: dict, path: Path) -> dict:
    """Version 5 -> 6: `serve` is new and optional."""
    return {**old, "schema_version": 6}


def _update_to_7(old: dict, path: Path) -> dict:
    """Version 6 -> 7: `profile` and `phases` are new and optional."""
    return {**old, "schema_version": 7}


def _update_to_8(old: dict, path: Path) -> dict:
    """Version 7 -> 8: `paired` is new and optional."""
    return {**old, "schema_version": 8}


def _update_to_9(old: dict, path: Path) -> dict:
    """Version 8 -> 9: `serve.capacity` and `serve.inputs` are new and optional."""
    return {**old, "schema_version": 9}


def _update_to_10(old: dict, path: Path) -> dict:
    """Version 9 -> 10: a paired pass's `handover` is new and optional."""
    return {**old, "schema_version": 10}


def _update_to_11(old: dict, path: Path) -> dict:
    """Version 10 -> 11: a serve point's `lead_requests` is new and defaults to 0."""
    return {**old, "schema_version": 11}


def _update_to_12(old: dict, path: Path) -> dict:
    """Version 11 -> 12: a serve point's `engine` (optional) and `metrics.send_lag_ms` (empty) are new."""
    return {**old, "schema_version": 12}


def _update_to_13(old: dict, path: Path) -> dict:
    """Version 12 -> 13: a serve point's `engine_latency` is new and optional."""
    return {**old, "schema_version": 13}


Migration = Callable[[dict, Path], dict]

MIGRATIONS: dict[int, Migration] = {1: _update_to_2, 2: _update_to_3, 3: _update_to_4, 4: _update_to_5,
                                    5: _update_to_6, 6: _update_to_7, 7: _update_to_8,
                                    8: _update_to_9, 9: _update_to_10, 10: _update_to_11,
                                    11: _update_to_12, 12: _update_to_13}


def migrate(data: dict, path: Path) -> dict:
    version = data.get("schema_version", 1)
    if not isinstance(version, int):
        raise UserError(f"{path}: schema_version {version!r} is not an integer")
    if version > SCHEMA_VERSION:
        raise UserError(f"{path}: schema_version {version} is newer than this harness reads "
                        f"({SCHEMA_VERSION}); upgrade the harness to read it")
    while version < SCHEMA_VERSION:
        data = MIGRATIONS[version](data, path)
        version = data["schema_version"]
    return data


def read(path: Path) -> RunRecord:
    """One record, migrated. Raises ValueError/UserError on a corrupt or too-new file."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return RunRecord.model_validate(migrate(data, Path(path)))


def read_typed(path: Path, kind: str, model: type[BaseModel], schema_version: int, *,
               migrations: dict[int, Migration] | None = None, kind_since: int = 1) -> BaseModel:
    """A JSON record of another kind (a bisect, window, client-overhead or serve-crosscheck record)
    that carries `kind` and `schema_version`; one-line errors name the file.
    `migrations` lift an older version to the next ({version: function(data, path)}, applied in
    order, as `migrate` does for run records); without them an older version is validated as it is.
    A kind whose first versions carried no `kind` key names the first version that does (`kind_since`)."""
    from harness.core.errors import InvalidFileError
    from harness.core.yamlio import describe

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidFileError(path, "no such file") from None
    except (OSError, ValueError) as e:
        raise InvalidFileError(path, f"not a JSON record: {e}") from None
    if not isinstance(data, dict) or data.get("kind", kind) != kind:
        raise InvalidFileError(path, f"not a {kind} record")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= schema_version:
        raise InvalidFileError(path, f"schema_version {version!r} is not one this harness reads "
                                     f"(<= {schema_version}); upgrade the harness")
    if "kind" not in data and version >= kind_since:
        raise InvalidFileError(path, f"not a {kind} record (no kind)")
    while migrations and version < schema_version:
        data = migrations[version](data, Path(path))
        version = data["schema_version"]
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise InvalidFileError(path, describe(e)) from None


def read_typed_dir(root: Path, kind: str, model: type[BaseModel], schema_version: int, *,
                   migrations: dict[int, Migration] | None = None, kind_since: int = 1) -> list[BaseModel]:
    """Every `kind` record directly under `root` (read as `read_typed` reads one), oldest first by
    `created_at` (bisect, window)."""
    recs = [read_typed(p, kind, model, schema_version, migrations=migrations, kind_since=kind_since)
            for p in sorted(Path(root).glob("*.json"))]
    return sorted(recs, key=lambda rec: getattr(rec, "created_at", ""))
