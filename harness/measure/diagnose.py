"""Surface the silent crash: a failed run whose log names no cause is re-run once with vLLM's DEBUG
logging, into `<run_dir>/diagnosis/`, and the run's record says what that surfaced.

"Names no cause" is `harness.core.logs.has_specific_cause`: no process printed an exception other
than vLLM's generic wrapper or a harmless thread's (the usage-stats thread, whose traceback DEBUG
mode tends to show). A timeout or a kill by a signal is already explained and not re-run. The re-run
is the same spec with `VLLM_LOGGING_LEVEL=DEBUG` added; its own record is kept as
`diagnosis/diagnosis.json` (not `results.json`: it is not a measurement of the study and must not be
loaded as one). Attribution (`harness.analyze.failure`) reads `failure.diagnosis` from the record, or
`diagnosis/run.log` when it has the run folder.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from harness.core.logs import exception_lines, has_specific_cause, root_cause
from harness.measure.run import RunSpec, execute
from harness.schema.record import Diagnosis, RunRecord, write

DIAGNOSIS_DIR = "diagnosis"
DEBUG_ENV = {"VLLM_LOGGING_LEVEL": "DEBUG"}


def _log(run_dir: Path) -> str | None:
    try:
        return (run_dir / "run.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def needs_diagnosis(rec: RunRecord, run_dir: Path) -> bool:
    """A failed run (not a timeout, not a signal) whose log names no specific cause."""
    if rec.status != "failed" or rec.failure is None or rec.failure.signal:
        return False
    log = _log(run_dir)
    return log is not None and not has_specific_cause(log)


def diagnose(spec: RunSpec, run_dir: Path, rec: RunRecord, *, invocation_id: str, dirty: list[str],
             allow_dirty: bool) -> RunRecord:
    """Re-run `rec` once with DEBUG logging if its log names no cause; return the record, with
    `failure.diagnosis` when it was re-run (and written to `run_dir/results.json`)."""
    if not needs_diagnosis(rec, run_dir):
        return rec
    out = run_dir / DIAGNOSIS_DIR
    dspec = dataclasses.replace(spec, extra_env={**spec.extra_env, **DEBUG_ENV})
    drec = execute(dspec, out, invocation_id=invocation_id, dirty=dirty, allow_dirty=allow_dirty)
    os.replace(out / "results.json", out / "diagnosis.json")
    log = _log(out) or ""
    rc = root_cause(log)
    f = drec.failure
    diagnosis = Diagnosis(run_dir=DIAGNOSIS_DIR, env=dict(DEBUG_ENV), status=drec.status,
                          exit_code=f.exit_code if f else 0, signal=f.signal if f else None,
                          surfaced=rc.specific, reason=rc.line if rc.specific else (f.reason if f else ""),
                          exceptions=exception_lines(log), wall_s=drec.timing.wall_s)
    assert rec.failure is not None
    new = rec.model_copy(update={"failure": rec.failure.model_copy(update={"diagnosis": diagnosis})})
    write(new, run_dir)
    return new
