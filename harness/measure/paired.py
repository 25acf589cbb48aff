"""The paired design: every leg's engine up at once, timed passes alternating between the legs.

Serial sweeps measure the legs minutes apart (an engine start is 1-3 minutes on two cores), so the
host's drift lands between the two sides of every ratio. Here, for each (model, arm) and each engine
block b = 1..blocks, one engine per leg is started (each a command-mode worker, worker/commands.py, in
its own leg venv and process group) and all stay resident; then `pairs` rounds, and in each round, for
each workload in scenario order, every leg runs ONE timed pass in a balanced order (two legs: A B in
odd rounds, B A in even ones; more: the rows of a Williams design in turn; or shuffled with the
recorded seed). A workload's warm-up runs once per engine, right before its first timed pass. Then the
block's engines stop, and the next block starts fresh ones: engine instances are a level of their own,
and the analysis nests pairs within blocks.

Each (leg, model, workload, arm, block) is one run as in the serial design (repeat = block; its
metrics the median over its passes) plus `paired`: every pass's round, position, wall-clock start and
end, seconds and value, and the CPU time the idle partner engines' process groups used meanwhile
(/proc/<pid>/stat utime + stime, summed over each group, before and after the pass). With sleep mode
(CUDA legs; `sleep: auto | on | off`) the idle engine sleeps (vLLM's `LLM.sleep(level=1)`) and is
woken before its pass, outside the clock; both times are recorded.

An engine that crashes, or whose command runs past the scenario's `timeout_s` (its group is killed),
ends that leg's part of the block: its runs are recorded failed (or timed out) through the same
failure path as any run (log tracebacks, root cause), with the passes it did; the other legs go on,
and every run of the block says the pairs are incomplete. A silent crash is not re-run with DEBUG
logging here (that re-run would be serial).

With `sides` (the crosscheck's same-engine design, experiments/crosscheck_paired.py) there is one
engine per leg and block and each of its workloads comes twice, once per side of the comparison; the
two sides' passes alternate on that engine, their order swapped every round.

`--resume`: a block is reused only whole. A block with some runs finished and some not is refused
with one line unless `--supersede`, which re-measures the whole block (earlier records moved aside).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core import paths
from harness.core.errors import UserError
from harness.measure import guard
from harness.measure.executors import PlannedRun
from harness.measure.run import (RunSpec, _die_with_parent, emit, finish, kill_group, prepare_run_dir, run_environ,
                                 worker_spec)
from harness.schema import record
from harness.schema.record import Engine, Paired, PairedPass, RunRecord, now

COMMAND_WORKER = Path(__file__).resolve().parent / "worker" / "commands.py"
# vLLM's sleep mode (LLM.sleep / wake_up, enable_sleep_mode) first shipped in this release.
SLEEP_SINCE = (0, 7, 3)
# Before a pass, the idle engines must be idle: on the CPU an engine's OpenMP threads keep spinning
# for a while after its own pass, and a pass started right then shares the cores with them (measured:
# the tiny Llama's 0.1 s pass took 0.7 s while its partner burned 0.45 s of CPU). So a pass starts
# once the partners' process groups used at most SETTLE_CPU_S in a SETTLE_WINDOW_S window (the
# kernel counts in 10 ms ticks), or after SETTLE_MAX_S; the wait is recorded (`settle_s`).
SETTLE_WINDOW_S = 0.2
SETTLE_CPU_S = 0.01
SETTLE_MAX_S = 10.0


@dataclass(frozen=True, kw_only=True)
class Design:
    blocks: int = 2
    pairs: int = 6
    pair_order: str = "balanced"       # balanced | random
    order_seed: int = 0
    sleep: bool = False
    until_decided: bool = False      # blocks is then the most; see `looks`
    min_blocks: int = 3              # the first look
    budget_s: float | None = None    # no block starts once this much time has passed
    # Each engine's workloads come in twos, the two sides of one comparison on one engine (the
    # crosscheck's same-engine design: the harness's pass, then vLLM's benchmark's); the two swap
    # places every round and every block, so neither side always runs first.
    sides: bool = False

    @property
    def looks(self) -> int:
        """The tests planned before the first block: one after each block from min_blocks on."""
        return self.blocks - self.min_blocks + 1 if self.until_decided else 1


# After block `done` (every (model, arm) of it measured): None to go on, or why the sweep stops there.
# Built above measure/ (harness.analyze.until_decided), which may use the analysis; `design` and the
# scenario's margin and engine bound come with it.
StopRule = Callable[[list[RunRecord], int, Design, Any], str | None]


# --- the order ------------------------------------------------------------------------------------

def williams(n: int) -> list[list[int]]:
    """Rows of a Williams design for n legs: every leg first (and in every position) equally often
    over the rows, and every ordered pair of neighbours once (n even) or twice over 2n rows (n odd)."""
    first = [0]
    lo, hi = 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(x + i) % n for x in first] for i in range(n)]
    if n % 2:
        rows += [list(reversed(r)) for r in rows]
    return rows


def round_order(legs: list[str], round_: int, *, block: int = 1, mode: str = "balanced", seed: int = 0) -> list[str]:
    """The legs of one round, in measuring order. Balanced: two legs A B in odd rounds, B A in even
    ones (adjacent passes saw the same host), the rows of a Williams design in turn for more; each
    block starts one row further on. Random: shuffled with a seed derived from the recorded one."""
    if len(legs) < 2:  # one engine per block (the crosscheck's sides): nothing to order
        return list(legs)
    if mode == "random":
        out = list(legs)
        random.Random(f"{seed}:{block}:{round_}").shuffle(out)
        return out
    rows = williams(len(legs)) if len(legs) > 2 else [[0, 1], [1, 0]][:len(legs)]
    row = rows[(round_ - 1 + block - 1) % len(rows)]
    return [legs[i] for i in row]


@dataclass(frozen=True)
class Step:
    what: str                           # start | sleep | wake | warmup | pass | finish
    leg: str
    round: int = 0
    workload: str = ""
    position: int = 0


def block_plan(legs: list[str], workloads: list[str], design: Design, block: int) -> list[Step]:
    """Every step of one block, in order: the same plan the controller runs and --dry-run prints."""
    steps: list[Step] = []
    for ln in legs:
        steps.append(Step("start", ln))
        if design.sleep:
            steps.append(Step("sleep", ln))
    warmed: set[tuple[str, str]] = set()
    for r in range(1, design.pairs + 1):
        order = round_order(legs, r, block=block, mode=design.pair_order, seed=design.order_seed)
        for wi, wl in enumerate(_round_workloads(workloads, design, r, block)):
            for place, ln in enumerate(order):
                pos = wi % 2 if design.sides else place  # with sides: the side's place in its workload's two
                if design.sleep:
                    steps.append(Step("wake", ln, r, wl, pos))
                if (ln, wl) not in warmed:
                    warmed.add((ln, wl))
                    steps.append(Step("warmup", ln, r, wl, pos))
                steps.append(Step("pass", ln, r, wl, pos))
                if design.sleep:
                    steps.append(Step("sleep", ln, r, wl, pos))
    steps += [Step("finish", ln) for ln in legs]
    return steps


def _round_workloads(workloads: list[str], design: Design, round_: int, block: int) -> list[str]:
    if not design.sides or (round_ + block) % 2 == 0:
        return workloads
    # Odd (round + block): each two sides swapped (block 1: first side first in odd rounds; block 2: the other).
    return [w for i in range(0, len(workloads), 2) for w in reversed(workloads[i:i + 2])]


def describe_block(legs: list[str], workloads: list[str], design: Design, block: int) -> list[str]:
    """The block's plan in a few lines: engines, then each round's passes (warm-ups starred)."""
    steps = block_plan(legs, workloads, design, block)
    lines = [f"  start engines: {', '.join(legs)} (all resident{'; idle ones sleep' if design.sleep else ''})"]
    for r in range(1, design.pairs + 1):
        passes = [f"{s.workload}:{s.leg}" + ("*" if any(w.what == "warmup" and (w.leg, w.workload, w.round) ==
                                                        (s.leg, s.workload, r) for w in steps) else "")
                  for s in steps if s.what == "pass" and s.round == r]
        lines.append(f"  round {r}: {' '.join(passes)}")
    lines.append("  stop engines (* = warm-up first, outside the clock)")
    return lines


# --- sleep mode -----------------------------------------------------------------------------------

def _version(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def resolve_sleep(setting: str, legs: list[Any]) -> tuple[bool, str | None]:
    """(sleep, why the paired design cannot be used here) for these LegSpecs under `sleep: setting`.

    auto: on where every leg is a CUDA leg, off on CPU (vLLM on the CPU has no sleep mode). A CUDA
    leg whose vLLM predates sleep mode cannot give the device to its partner: the reason says so and
    the sweep falls back to the serial design."""
    cuda = [leg for leg in legs if leg.device == "cuda"]
    if setting == "on" and len(cuda) < len(legs):
        cpu = next(leg for leg in legs if leg.device != "cuda")
        raise UserError(f"sleep: on, but leg {cpu.name} is a CPU leg and vLLM's sleep mode needs CUDA "
                        "(sleep: auto or off)")
    sleep = setting == "on" or (setting == "auto" and bool(cuda))
    if sleep:
        old = [leg for leg in cuda if _version(leg.vllm_version) < SLEEP_SINCE]
        if old:
            return False, (f"leg {old[0].name} (vLLM {old[0].vllm_version}) has no sleep mode, so its idle engine "
                           "would hold the GPU: measuring in the serial design instead")
    return sleep, None


# --- one engine -----------------------------------------------------------------------------------

def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) used so far by every live process in process group `pgid`."""
    ticks = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path("/proc", d, "stat").read_text()
            rest = stat[stat.rindex(")") + 2:].split()  # fields from the 3rd (state) on
            if int(rest[2]) == pgid:
                ticks += int(rest[11]) + int(rest[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def settle(pgids: list[int]) -> float:
    """Wait until the process groups `pgids` are quiet (see SETTLE_WINDOW_S); returns the seconds waited."""
    window_s, quiet_cpu_s, max_s = SETTLE_WINDOW_S, SETTLE_CPU_S, SETTLE_MAX_S
    t0 = time.monotonic()
    if not pgids:
        return 0.0
    before = sum(group_cpu_s(g) for g in pgids)
    while time.monotonic() - t0 < max_s:
        time.sleep(window_s)
        now_cpu = sum(group_cpu_s(g) for g in pgids)
        if now_cpu - before <= quiet_cpu_s:
            break
        before = now_cpu
    return time.monotonic() - t0


@dataclass(kw_only=True)
class EngineProc:
    """One leg's command-mode worker for one block, and what became of it."""

    leg: str
    runs: list[PlannedRun]
    edir: Path
    timeout_s: float
    proc: subprocess.Popen | None = None
    status: str = "ok"                 # ok | failed | timeout
    exit_code: int | None = None
    signal: int | None = None
    init_s: float | None = None
    t_start: float = 0.0
    t_end: float | None = None
    lost: str = ""                     # where it ended early: "round 3 (mixed)"
    finished: bool = False             # the finish command was answered: every result is written
    passes: dict[int, list[PairedPass]] = field(default_factory=dict)
    _reply: int = -1
    _buf: bytes = b""

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.status == "ok" and self.t_end is None

    def spawn(self, worker: Path, extra_args: dict[str, Any]) -> None:
        """Start the worker; `ready()` waits for its engine."""
        lead = self.runs[0].spec
        self.edir.mkdir(parents=True, exist_ok=True)
        for stale in ("run.jsonl", "run.log", "spec.json", "replies.jsonl"):
            paths.inside(self.edir, stale).unlink(missing_ok=True)
        ws = worker_spec(lead, self.edir, [(p.spec, p.run_dir) for p in self.runs])
        ws = type(ws)(**{**ws.__dict__, "engine_args": {**ws.engine_args, **extra_args}})
        ws.write(self.edir / "spec.json")
        emit(self.edir, "spawn", leg=self.leg, compat_id=lead.leg_env.compat_id, design="paired",
             workloads=[p.spec.workload.name for p in self.runs])
        r, w = os.pipe()
        self.t_start = time.monotonic()
        with (self.edir / "run.log").open("ab") as out:
            self.proc = subprocess.Popen(
                [str(lead.leg_env.python), str(worker), str(self.edir / "spec.json"), str(w)],
                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=run_environ(lead), cwd=self.edir,
                start_new_session=True, preexec_fn=_die_with_parent, pass_fds=(w,))
        os.close(w)
        self._reply = r

    def ready(self) -> dict | None:
        """Wait for the engine's first reply (it is up); None when it died or ran past the timeout."""
        ready = self._await("engine start")
        if ready is not None:
            self.init_s = ready.get("init_s")
        return ready

    def command(self, cmd: str, what: str, **fields: Any) -> dict | None:
        """Send one command and wait for its reply; None when the engine died or ran past the timeout."""
        if not self.alive:
            return None
        try:
            assert self.proc is not None and self.proc.stdin is not None
            self.proc.stdin.write((json.dumps({"cmd": cmd, **fields}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died: the wait below sees it
        return self._await(what)

    def _await(self, what: str) -> dict | None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            if b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                with (self.edir / "replies.jsonl").open("ab") as f:
                    f.write(line + b"\n")
                reply = json.loads(line)
                if not reply.get("ok"):
                    self._end("failed", what)
                    return None
                return reply
            left = deadline - time.monotonic()
            if left <= 0:
                emit(self.edir, "timeout", after_s=self.timeout_s, at=what)
                self._end("timeout", what)
                return None
            ready, _, _ = select.select([self._reply], [], [], min(left, 0.5))
            if ready:
                data = os.read(self._reply, 65536)
                self._buf += data
                if data:
                    continue
            assert self.proc is not None
            if self.proc.poll() is not None and b"\n" not in self._buf:
                self._end("failed", what)
                return None

    def _end(self, status: str, what: str) -> None:
        self.status, self.lost = status, what
        self.stop()

    def stop(self) -> None:
        """Kill the engine's whole process group (after a finish: what is left of it)."""
        if self.proc is None or self.t_end is not None:
            return
        kill_group(self.proc.pid, grace_s=2.0 if self.proc.poll() is not None else 10.0, leader=self.proc)
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)
        rc = self.proc.returncode
        if rc is not None and self.status != "timeout" and not self.finished:
            self.exit_code = rc if rc >= 0 else None
            self.signal = -rc if rc < 0 else None
            if rc != 0:
                self.status = "failed"
        self.t_end = time.monotonic()
        with contextlib.suppress(OSError):
            os.close(self._reply)
        emit(self.edir, "exit", status=self.status, exit_code=self.exit_code, signal=self.signal,
             wall_s=self.t_end - self.t_start)


# --- the controller -------------------------------------------------------------------------------

def engine_dir(spec: RunSpec, run_dir: Path, name: str | None = None) -> Path:
    # Beside the leg's workloads: <...>/<leg>/<model>/engine-<arm>-b<block> (or engine-<name>-b<block>)
    return paths.inside(run_dir.parents[2], f"engine-{name or spec.arm.name}-b{spec.repeat}")


def block_key(spec: RunSpec) -> tuple:
    return (spec.repeat, spec.model.name, spec.arm.name)


def run_paired(planned: list[PlannedRun], design: Design, *, invocation_id: str, allow_dirty: bool,
               on_done: Callable[[PlannedRun, RunRecord, bool], None], worker: Path | None = None,
               say: Callable[[str], None] = print, stop: Callable[[int], str | None] | None = None,
               key: Callable[[RunSpec], tuple] = block_key) -> None:
    """Measure `planned` (blocks of (block, model, arm), every leg's runs of each) in the paired design.
    `stop(done_block)`, asked before each block after the first, ends the sweep when it gives a reason
    (stop when decided, or the time budget); the blocks not measured are said, never recorded."""
    blocks: dict[tuple, list[PlannedRun]] = {}
    for p in planned:
        blocks.setdefault(key(p.spec), []).append(p)
    t0 = time.monotonic()
    current = None  # the block of the group measured last
    for runs in blocks.values():
        block = runs[0].spec.repeat
        if current is not None and block != current:  # every group of block `current` is measured
            why = None
            if design.budget_s is not None and time.monotonic() - t0 >= design.budget_s:
                why = f"the time budget ({design.budget_s / 60:g} min) is spent"
            elif stop is not None:
                why = stop(current)
            if why:
                say(f"stopped after engine block {current} of {design.blocks}: {why}")
                return
        current = block
        if all(p.reuse is not None for p in runs):
            for p in runs:
                on_done(p, p.reuse, True)
            continue
        dirty = guard.check(guard.gpu_processes(), allow_dirty, "GPU already has processes")
        for p, rec in measure_block(runs, design, invocation_id=invocation_id, dirty=dirty, allow_dirty=allow_dirty,
                                    worker=worker or COMMAND_WORKER, say=say):
            on_done(p, rec, False)


def measure_block(runs: list[PlannedRun], design: Design, *, invocation_id: str, dirty: list[str],
                  allow_dirty: bool, worker: Path = COMMAND_WORKER,
                  say: Callable[[str], None] = print) -> list[tuple[PlannedRun, RunRecord]]:
    by_leg: dict[str, list[PlannedRun]] = {}
    for p in runs:
        by_leg.setdefault(p.spec.leg_env.leg.name, []).append(p)
    legs = list(by_leg)
    # The names the plan goes by: with two sides per workload, the side's arm tells them apart.
    workloads = [p.spec.workload.name + (f" ({p.spec.arm.name})" if design.sides else "") for p in by_leg[legs[0]]]
    block = runs[0].spec.repeat
    started = now()
    engines: dict[str, EngineProc] = {}
    woke: dict[str, float | None] = {}  # each leg's wake-up before the pass it is about to run
    extra = {"enable_sleep_mode": True} if design.sleep else {}
    try:
        for ln in legs:
            for p in by_leg[ln]:
                prepare_run_dir(p.spec, p.run_dir)
                emit(p.run_dir, "spawn", leg=ln, design="paired", block=block)
            lead = by_leg[ln][0]
            e = engines[ln] = EngineProc(leg=ln, runs=by_leg[ln], timeout_s=lead.spec.timeout_s,
                                         edir=engine_dir(lead.spec, lead.run_dir, "sides" if design.sides else None))
            e.spawn(worker, extra)
            # With sleep mode one at a time: each engine sizes its KV cache from the device memory free at
            # its start, so the next one starts only once this one sleeps.
            if design.sleep and e.ready() is not None:
                e.command("sleep", "sleep after start")
        if not design.sleep:
            # Without sleep mode the engines start side by side (nothing is timed yet): a block's start
            # costs the slowest engine's start, not the sum (on two cores, about 1.3 starts for two).
            for e in engines.values():
                e.ready()
        for step in block_plan(legs, workloads, design, block):
            e = engines[step.leg]
            if not e.alive or step.what in ("start", "finish") or (step.what == "sleep" and not step.round):
                continue
            wi = workloads.index(step.workload)
            where = f"round {step.round} ({step.workload})"
            if step.what == "wake":
                rep = e.command("wake", f"wake before {where}")
                woke[step.leg] = rep["seconds"] if rep else None
            elif step.what == "warmup":
                e.command("warmup", f"warm-up before {where}", workload=wi)
            elif step.what == "pass":
                partners = [x for x in engines.values() if x is not e and x.alive]
                settled = settle([x.proc.pid for x in partners if x.proc])
                before = sum(group_cpu_s(x.proc.pid) for x in partners if x.proc)
                rep = e.command("pass", where, workload=wi, round=step.round)
                after = sum(group_cpu_s(x.proc.pid) for x in partners if x.proc)
                if rep is None:
                    continue
                e.passes.setdefault(wi, []).append(PairedPass(
                    round=step.round, position=step.position, started_at=rep["started_at"], ended_at=rep["ended_at"],
                    seconds=rep["seconds"], value=rep.get("value"), output_tokens=rep.get("output_tokens"),
                    handover=rep.get("handover"),
                    partner_cpu_s=max(after - before, 0.0) if partners else None,
                    wake_s=woke.pop(step.leg, None), settle_s=settled))
            elif step.what == "sleep":
                rep = e.command("sleep", f"sleep after {where}")
                done = e.passes.get(wi)
                if rep is not None and done and done[-1].round == step.round:
                    done[-1] = done[-1].model_copy(update={"sleep_s": rep["seconds"]})
        for ln in legs:
            e = engines[ln]
            if e.alive and e.command("finish", "finish") is not None:
                e.finished = True
                with contextlib.suppress(subprocess.TimeoutExpired):
                    assert e.proc is not None
                    e.proc.wait(timeout=e.timeout_s)
    finally:
        for e in engines.values():
            e.stop()
    lost = [f"{e.leg} engine {'timed out' if e.status == 'timeout' else 'failed'} at {e.lost}"
            for e in engines.values() if e.status != "ok"]
    incomplete = "; ".join(lost) + ("; later rounds have no pass of it" if lost else "")
    out = []
    for ln in legs:
        e = engines[ln]
        log = (e.edir / "run.log").read_bytes() if (e.edir / "run.log").exists() else b""
        for wi, p in enumerate(by_leg[ln]):
            # Every run of an engine shares its log: its passes are interleaved with the other workloads'.
            (p.run_dir / "run.log").write_bytes(log)
            wall = (e.t_end or time.monotonic()) - e.t_start
            emit(p.run_dir, "exit", status=e.status, exit_code=e.exit_code, signal=e.signal, wall_s=wall)
            engine = Engine(mode="paired", group_id=_group_id(p.spec), instance=block, init_s=e.init_s,
                            position=wi + 1, group_log=str(Path("..", "..", "..", e.edir.name, "run.log")),
                            log_range=[0, len(log)])
            rec = finish(p.spec, p.run_dir, status=e.status, exit_code=e.exit_code, sig=e.signal, wall=wall,
                         started=started, invocation_id=invocation_id, dirty=p.dirty + dirty, allow_dirty=allow_dirty,
                         engine=engine)
            paired = Paired(block=block, blocks=design.blocks, pairs=design.pairs, pair_order=design.pair_order,
                            order_seed=design.order_seed, legs=legs, sleep=design.sleep,
                            passes=e.passes.get(wi, []), incomplete=incomplete)
            rec = RunRecord.model_validate(rec.model_dump() | {"paired": paired.model_dump()})
            record.write(rec, p.run_dir)
            out.append((p, rec))
    if lost:
        say(f"paired block {block} ({runs[0].spec.model.name}, {runs[0].spec.arm.name}): {incomplete}")
    order = {id(p): i for i, p in enumerate(runs)}
    return sorted(out, key=lambda x: order[id(x[0])])


def _group_id(spec: RunSpec) -> str:
    return "/".join([spec.series, spec.leg_env.leg.name, spec.run_id.split("/")[2], spec.arm.name, f"b{spec.repeat}"])
