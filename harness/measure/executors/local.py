"""The default executor: this node, one run at a time."""

from __future__ import annotations

from harness.measure import guard
from harness.measure.diagnose import diagnose
from harness.measure.run import execute


class LocalExecutor:
    """Runs on this node, one at a time; the GPU-busy guard is checked before every run. A failed run
    whose log names no cause is re-run once with DEBUG logging (`diagnose=False`: never)."""

    OPTIONS = ("diagnose",)

    def __init__(self, diagnose: bool = True) -> None:
        self.diagnose = diagnose

    def run_all(self, planned, *, invocation_id, allow_dirty, on_done):
        for p in planned:
            if p.reuse is not None:
                on_done(p, p.reuse, True)
                continue
            dirty = p.dirty + guard.check(guard.gpu_processes(), allow_dirty, "GPU already has processes")
            rec = execute(p.spec, p.run_dir, invocation_id=invocation_id, dirty=dirty, allow_dirty=allow_dirty)
            if self.diagnose:
                rec = diagnose(p.spec, p.run_dir, rec, invocation_id=invocation_id, dirty=dirty,
                               allow_dirty=allow_dirty)
            on_done(p, rec, False)
