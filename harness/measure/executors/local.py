"""The default executor: this node, one run at a time (one engine per run, or per group)."""

from __future__ import annotations

from harness import workloads
from harness.measure import guard
from harness.measure.diagnose import diagnose
from harness.measure.group import execute_group, group_key
from harness.measure.run import execute
from harness.measure import serve


class LocalExecutor:
    """Runs on this node, one at a time; the GPU-busy guard is checked before every run. A failed run
    whose log names no cause is re-run once with DEBUG logging (`diagnose=False`: never)."""

    OPTIONS = ("diagnose",)

    def __init__(self, diagnose: bool = True) -> None:
        self.diagnose = diagnose

    def run_all(self, planned, *, invocation_id, allow_dirty, on_done):
        i = 0
        while i < len(planned):
            p = planned[i]
            if p.reuse is not None:
                on_done(p, p.reuse, True)
                i += 1
                continue
            dirty = p.dirty + guard.check(guard.gpu_processes(), allow_dirty, "GPU already has processes")
            # A server kind: the harness drives the leg's server, never in an engine group.
            if workloads.traits_of(p.spec.workload.kind).server:
                on_done(p, serve.execute(p.spec, p.run_dir, invocation_id=invocation_id, dirty=dirty,
                                         allow_dirty=allow_dirty), False)
                i += 1
                continue
            if p.spec.engine != "per-group":
                rec = execute(p.spec, p.run_dir, invocation_id=invocation_id, dirty=dirty, allow_dirty=allow_dirty)
                if self.diagnose:
                    rec = diagnose(p.spec, p.run_dir, rec, invocation_id=invocation_id, dirty=dirty,
                                   allow_dirty=allow_dirty)
                on_done(p, rec, False)
                i += 1
                continue
            # The group: this run and the next ones of the same (repeat, leg, model, arm) still to measure.
            j = i + 1
            while (j < len(planned) and planned[j].reuse is None
                   and not workloads.traits_of(planned[j].spec.workload.kind).server
                   and group_key(planned[j].spec) == group_key(p.spec)):
                j += 1
            batch = {q.spec.run_id: q for q in planned[i:j]}

            def landed(rec, batch=batch, dirty=dirty):
                q = batch[rec.run_id]
                if self.diagnose:  # a silent crash inside a group is diagnosed as a run of its own
                    rec = diagnose(q.spec, q.run_dir, rec, invocation_id=invocation_id, dirty=dirty,
                                   allow_dirty=allow_dirty)
                on_done(q, rec, False)

            execute_group([(q.spec, q.run_dir) for q in batch.values()], invocation_id=invocation_id, dirty=dirty,
                          allow_dirty=allow_dirty, on_record=landed)
            i = j
