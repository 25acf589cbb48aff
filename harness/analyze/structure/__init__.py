"""The second layer of failure attribution: a class read from a traceback's *structure*.

The catalogue (harness.analyze.signatures) knows exact messages. A failure it has never seen still
has a shape: the exception's type and message together with the frames it passed through. An
AttributeError raised inside `transformers/` on a tokenizer is API drift whatever the attribute; a
traceback through `GroupCoordinator` and `pynccl` is distributed start-up even when the exception
line itself was cut. A structural rule says which shapes mean which class; it answers only where no
signature does, and its answer is stated with lower confidence ("class by structure, no known
signature").

Rules are plugins: one module each (it defines `RULE`, a `Rule`) plus one line in `RULES` below.
Order matters: the first rule that matches the first traceback it can read decides.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass

from harness.core.logs import LogLine, classify
from harness.schema.record import FailureClass

RULES: dict[str, str] = {
    "distributed-startup": "harness.analyze.structure.distributed",
    "transformers-object-drift": "harness.analyze.structure.transformers_drift",
    "multimodal-input-shape": "harness.analyze.structure.input_shape",
    "quantization-kernel": "harness.analyze.structure.quantization",
    "compiled-ops-missing": "harness.analyze.structure.compiled_ops",
}

# A frame as Python prints it, searched anywhere in the line: prefixes the log reader does not know
# (`[vllm]: [rank0]:`) must not hide a frame.
_FRAME = re.compile(r'File "(?P<path>[^"]+)", line \d+, in (?P<func>\S+)')
_EXC_TYPE = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(?::|$)")


@dataclass(frozen=True)
class Frame:
    path: str
    func: str
    code: str = ""     # the source line Python prints under the frame, when the excerpt kept it

    def __str__(self) -> str:
        return f"{self.path}:{self.func} {self.code}".rstrip()


@dataclass(frozen=True, kw_only=True)
class Traceback:
    """One traceback of one process, innermost frame last; `exception` is "" when the log cut it."""

    who: str
    frames: tuple[Frame, ...]
    exception: str = ""
    line: str = ""     # the evidence: the exception line, else the innermost frame's source line
    wrapper: bool = False  # the exception is vLLM's generic wrapper ("Engine core initialization failed")

    @property
    def exc_type(self) -> str:
        m = _EXC_TYPE.match(self.exception)
        return m["type"].rsplit(".", 1)[-1] if m else ""


@dataclass(frozen=True, kw_only=True)
class Rule:
    id: str
    klass: FailureClass
    root_cause: str
    fix: str
    # Matched against "Type: message" of the exception line; None matches any exception.
    exception: re.Pattern[str] | None = None
    # Matched against each frame ("path:function source"); some frame among the innermost `depth`
    # (0: all of them) must match. None: frames are not looked at.
    frames: re.Pattern[str] | None = None
    depth: int = 0
    # Also read a traceback whose exception line is missing (cut by the poster or the log's end).
    cut: bool = False
    needs_frames: bool = True

    def matches(self, tb: Traceback) -> bool:
        if not tb.exception and not self.cut:
            return False
        if tb.exception and self.exception is not None and not self.exception.search(tb.exception):
            return False
        if not tb.exception and self.frames is None:
            return False
        if self.needs_frames and not tb.frames:
            return False
        if self.frames is not None:
            pool = tb.frames[-self.depth:] if self.depth else tb.frames
            if not any(self.frames.search(str(f)) for f in pool):
                return False
        return True


def rule(id: str, klass: FailureClass, root_cause: str, fix: str, *, exception: str | None = None,
         frames: str | None = None, depth: int = 0, cut: bool = False, needs_frames: bool = True) -> Rule:
    return Rule(id=id, klass=klass, root_cause=root_cause, fix=fix,
                exception=re.compile(exception) if exception else None,
                frames=re.compile(frames) if frames else None, depth=depth, cut=cut, needs_frames=needs_frames)


def rules() -> list[Rule]:
    """Every registered rule, in registry order."""
    out = []
    for name, module in RULES.items():
        r = importlib.import_module(module).RULE
        if r.id != name:
            raise ValueError(f"{module}: RULE.id {r.id!r} is registered as {name!r}")
        out.append(r)
    return out


def _tracebacks(lines: list[LogLine]) -> list[Traceback]:
    """The log's tracebacks per process, in order of their end. A traceback is opened by its banner or,
    in an excerpt that starts inside one, by its first frame; it ends at its exception line or, cut,
    where the excerpt ends."""
    open_by: dict[str, list[Frame]] = {}
    after_frame: dict[str, bool] = {}   # the process's previous line was a frame
    done: list[tuple[int, Traceback]] = []
    for i, ln in enumerate(lines):
        m = _FRAME.search(ln.text)
        prev_frame, after_frame[ln.who] = after_frame.get(ln.who, False), bool(m)
        if ln.kind == "banner":
            open_by[ln.who] = []
        elif m:
            open_by.setdefault(ln.who, []).append(Frame(m["path"].replace("\\", "/"), m["func"]))
        elif ln.who in open_by and ln.kind == "exception" and not ln.harmless:
            frames = open_by.pop(ln.who)
            done.append((i, Traceback(who=ln.who, frames=tuple(frames), exception=ln.text, line=ln.text,
                                      wrapper=ln.wrapper)))
        elif ln.who in open_by and ln.kind == "chain":
            open_by.pop(ln.who)
        elif prev_frame and ln.kind in ("source", "message") and open_by.get(ln.who):
            # The source line under a frame (a "message" where the reader did not see the frame).
            f = open_by[ln.who][-1]
            open_by[ln.who][-1] = Frame(f.path, f.func, ln.text)
    for who, frames in open_by.items():
        if frames:
            code = next((f.code for f in reversed(frames) if f.code and not f.code.startswith("raise ")), "")
            done.append((len(lines), Traceback(who=who, frames=tuple(frames), line=code)))
    return [tb for _, tb in sorted(done, key=lambda t: t[0])]


def tracebacks(log: str) -> list[Traceback]:
    """Every traceback of a log, as structure (exception line and frames), harmless threads' left out."""
    return _tracebacks([ln for ln in classify(log) if not ln.harmless])


@dataclass(frozen=True, kw_only=True)
class StructureMatch:
    rule: Rule
    traceback: Traceback


def match(log: str) -> StructureMatch | None:
    """The first rule that reads a traceback of the log, tracebacks in order (the process that raised
    first), then rules in registry order; wrappers' tracebacks only when no other one matches."""
    tbs = tracebacks(log)
    if not tbs:
        return None
    active = rules()
    for pool in ([tb for tb in tbs if not tb.wrapper], [tb for tb in tbs if tb.wrapper]):
        for tb in pool:
            for r in active:
                if r.matches(tb):
                    return StructureMatch(rule=r, traceback=tb)
    return None
