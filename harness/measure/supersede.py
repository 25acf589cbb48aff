"""Runs that would measure over a finished record: refused unless asked for, and never deleted.

A run is measured into its own folder (`runs/<run id>/`). That folder may already hold a record: the
study was swept before without `--resume`, or with `--resume` after something that decides what is
measured changed (a leg's lock re-resolved to a new compat id, a harness release, an edited workload),
so the fingerprints no longer match. Measuring there used to delete the earlier record; hours of
measurements could go that way without a word. Now a finished (`ok`) record is replaced only under
`--supersede`, and every replaced record - failed and timed-out ones too, which `--resume` retries
as documented - is first moved to `superseded/<invocation>/<run id>/`, outside the dataset the
tables read, and listed in the sweep's index.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from harness import __version__
from harness.core import paths
from harness.core.errors import UserError
from harness.measure.executors import PlannedRun
from harness.measure.run import RunSpec
from harness.schema import record
from harness.schema.record import RunRecord

FOLDER = "superseded"


@dataclass(frozen=True)
class Replacement:
    planned: PlannedRun
    old: RunRecord | None       # None: a results.json that no longer reads as a record
    changed: tuple[str, ...]    # what differs from the earlier record; empty: the same fingerprint

    @property
    def needs_consent(self) -> bool:
        """Only a finished measurement is worth refusing for; a failure is retried and kept aside."""
        return self.old is not None and self.old.status == "ok"


def _same(a: object, b: object) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def what_changed(old: RunRecord, spec: RunSpec) -> tuple[str, ...]:
    """The inputs of the fingerprint the record keeps in the clear, each that differs as `what: old → new`."""
    if old.fingerprint == spec.fingerprint:
        return ()
    pairs = [("leg lock (compat id)", old.compat_id, spec.leg_env.compat_id),
             ("harness version", old.harness_version, __version__),
             ("pins", old.pins, list(spec.leg_env.pins)),
             ("workload", old.workload_spec, spec.workload.work),
             ("engine arguments", old.engine_args, spec.engine_args)]
    out = [f"{what}: {o} → {n}" if isinstance(o, str) else what for what, o, n in pairs if not _same(o, n)]
    return tuple(out) or ("the fingerprint (model path, arm or engine mode)",)


def replacements(planned: list[PlannedRun]) -> list[Replacement]:
    """Every planned run that is measured (not reused) into a folder that already holds a results.json."""
    out = []
    for p in planned:
        path = p.run_dir / "results.json"
        if p.reuse is not None or not path.exists():
            continue
        try:
            old = record.read(path)
        except Exception:  # noqa: BLE001 - an unreadable record is kept aside, never refused for
            out.append(Replacement(p, None, ()))
            continue
        out.append(Replacement(p, old, what_changed(old, p.spec)))
    return out


def check(found: list[Replacement], *, resume: bool, supersede: bool) -> None:
    """One line naming the first finished record the sweep would replace, and why, unless --supersede."""
    refused = [r for r in found if r.needs_consent]
    if supersede or not refused:
        return
    first = refused[0]
    why = ("; ".join(first.changed) if resume and first.changed
           else f"measured by invocation {first.old.invocation_id}, and this sweep has no --resume")
    more = f" (and {len(refused) - 1} more finished runs)" if len(refused) > 1 else ""
    keep = "" if resume else "--resume keeps finished runs; "
    raise UserError(f"{first.planned.run_dir / 'results.json'}: holds a finished record this sweep would "
                    f"replace ({why}){more}; {keep}--supersede re-measures and moves the earlier records "
                    f"to {FOLDER}/ first")


def move_aside(found: list[Replacement], study_dir: Path, invocation_id: str) -> list[dict]:
    """Each replaced run folder moved whole under superseded/<invocation>/, for the sweep's index."""
    moved = []
    for r in found:
        dest = paths.inside(study_dir, FOLDER, invocation_id, *r.planned.spec.run_id.split("/"))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(r.planned.run_dir), str(dest))
        moved.append({"run_id": r.planned.spec.run_id, "moved_to": str(dest.relative_to(study_dir)),
                      "status": r.old.status if r.old else "unreadable",
                      "measured_by": r.old.invocation_id if r.old else None, "changed": list(r.changed)})
    return moved
