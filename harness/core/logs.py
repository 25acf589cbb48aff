"""Reading vLLM's logs: process prefixes, tracebacks, the root-cause line, and facts vLLM states.

One module for every reader of a run's `run.log`: the run (`harness.measure.run`) takes the failure
from it, the diagnosis re-run (`harness.measure.diagnose`) asks whether it names a cause at all,
failure attribution (`harness.analyze.failure`) matches signatures against its lines, and the
diagnostics parse the MoE routing out of it; `scrub` takes machine paths out of a log line before a
committed record keeps it. Pure text in, plain values out; the one reader of a file is `read_log`,
which reads a log as a bounded head and tail (LOG_HEAD_BYTES, LOG_TAIL_BYTES), so a log of any size
is read in bounded time and memory.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness.core import paths

# --- process prefixes -----------------------------------------------------------------------------

# What real logs put before a message, outermost first; `strip_prefix` peels them in a loop:
#   a container or CI column        "vllm-1  | ", "  | "
#   a vLLM subprocess               "(EngineCore_DP0 pid=45) ", "(VllmWorker rank=5 pid=7) ",
#                                   "(RayWorkerWrapper pid=270291, ip=10.1.2.3) "
#   torch's per-rank prefix         "[rank0]: "
#   vLLM's level header             "ERROR 08-19 13:12:57 [core.py:708] ", older "ERROR 10-23 23:20:26 registry.py:272] "
_COLUMN = re.compile(r"^\s*(?:[\w.-]+\s+)?\| ")
_PROC = re.compile(r"^\((?P<proc>[\w.-]+)(?: [\w.-]+=[\w.-]+)*? pid=(?P<pid>\d+)(?:, ip=[\d.:a-f]+)?\) ?")
_RANK = re.compile(r"^\[rank\d+\]: ?")
_LEVEL = re.compile(r"^(?:ERROR|WARNING|INFO|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
                    r"\[?[\w.:<>-]+\] ?")
# A subprocess prefix in mid-line: a progress bar without its newline, then the next process's line.
_GLUED = re.compile(r"(?<=\S)(?=\([\w.-]+(?: [\w.-]+=[\w.-]+)*? pid=\d+(?:, ip=[\d.:a-f]+)?\) )")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_prefix(line: str) -> tuple[str, str]:
    """(who, text): the process a vLLM log line came from ("EngineCore_DP0:12", or "main") and the line
    without its prefixes (column, process, rank, level header) and colour codes. Indentation after the
    prefixes is kept: it tells a traceback's frames from its exception."""
    line = _ANSI.sub("", line).rstrip("\r\n")
    who = "main"
    while True:
        m = _PROC.match(line)
        if m:
            who = f"{m.group('proc')}:{m.group('pid')}"
        m = m or _COLUMN.match(line) or _RANK.match(line) or _LEVEL.match(line)
        if not m or not m.end():
            return who, line
        line = line[m.end():]


def split_lines(log: str) -> list[str]:
    """The log's lines, with lines glued to a progress bar (no newline before the next process's
    prefix) split apart and carriage-return redraws kept as their last state."""
    out: list[str] = []
    for raw in log.splitlines():
        out.extend(_GLUED.split(raw))
    return out


# --- the lines of a log, by kind ------------------------------------------------------------------

LineKind = Literal["banner", "chain", "frame", "source", "caret", "exception", "message", "blank"]

# Python's exception line: a dotted class name ending like an exception, alone or with its message.
_EXC = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Timeout)"
                  r"(?:: .*|:)?$")
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
# vLLM's (and its executors') generic wrappers: they say a process died, not why.
_GENERIC = re.compile(r"Engine core initialization failed|EngineDeadError|EngineCore encountered|"
                      r"EngineCore failed to start|MQEngineDeadError|Engine loop is not running|"
                      r"Worker failed with error|WorkerProc initialization failed|"
                      r"Exception in worker \S+ while processing method|Error executing method \w+\. "
                      r"This might cause deadlock|Worker proc \S+ died unexpectedly|"
                      r"WorkerProc hit an exception|See root cause above")
# Tracebacks that do not end a run: vLLM's usage-stats thread (it dies on a CPU-info parse, most
# visibly with DEBUG logging); they are never the cause.
_HARMLESS = re.compile(r"_report_usage_worker|usage_lib\.py")


@dataclass(frozen=True, kw_only=True)
class LogLine:
    n: int                  # position among split_lines(log)
    who: str                # the process ("main" when unprefixed)
    text: str               # without prefixes, stripped
    kind: LineKind
    harmless: bool = False  # part of a traceback that does not end the run

    @property
    def wrapper(self) -> bool:
        return bool(_GENERIC.search(self.text))

    @property
    def specific(self) -> bool:
        """A line that may name a cause: an exception or a message, not a wrapper, frame, caret,
        source line or banner, and not in a harmless traceback."""
        return self.kind in ("exception", "message") and not self.harmless and not self.wrapper


def _indent(s: str) -> int:
    return len(s) - len(s.lstrip(" \t"))


def classify(log: str) -> list[LogLine]:
    """Every line of a log with its process and its kind. Frames and their source lines are told
    from exception lines by indentation, per process, so interleaved processes and excerpts that
    start inside a traceback are read right."""
    # Per process: the indentation of the open traceback's banner (frames sit deeper), or None.
    frames_at: dict[str, int] = {}
    staged: list[tuple[int, str, str, LineKind]] = []
    for n, raw in enumerate(split_lines(log)):
        who, body = strip_prefix(raw)
        body = body.replace("\t", "    ")
        text = body.strip().strip("`").strip()
        ind = _indent(body)
        base = frames_at.get(who)
        kind: LineKind
        if not text:
            kind = "blank"
        elif text.startswith("Traceback (most recent call last)"):
            kind, frames_at[who] = "banner", ind
        elif text.startswith(_CHAIN):
            kind = "chain"
            frames_at.pop(who, None)
        elif text.startswith('File "') or re.match(r'^File "[^"]*", line \d+', text):
            kind = "frame"
            if base is None or ind <= base:
                frames_at[who] = max(ind - 2, 0)
        elif set(text) <= set("^~ "):
            kind = "caret"
        elif base is not None and ind > base:
            kind = "source"
        elif text.startswith("raise ") and base is not None:
            kind = "source"
        else:
            kind = "exception" if _EXC.match(text) else "message"
            if base is not None:
                kind = "exception" if kind == "exception" or ":" in text else kind
                frames_at.pop(who, None)
        staged.append((n, who, text, kind))
    return _mark_harmless(staged)


def _mark_harmless(staged: list[tuple[int, str, str, LineKind]]) -> list[LogLine]:
    """Lines of a harmless traceback: from the line that announces it (or its banner) to its
    exception line, in the same process."""
    harmless: set[int] = set()
    open_block: dict[str, list[int]] = {}
    for i, (n, who, text, kind) in enumerate(staged):
        if kind == "banner":
            prev = next((j for j in range(i - 1, -1, -1) if staged[j][1] == who and staged[j][3] != "blank"), None)
            block = [i]
            if prev is not None and staged[prev][2].startswith("Exception in thread"):
                block.insert(0, prev)
            open_block[who] = block
        elif who in open_block:
            open_block[who].append(i)
            if kind == "exception":
                block = open_block.pop(who)
                if any(_HARMLESS.search(staged[j][2]) for j in block):
                    harmless.update(block)
    return [LogLine(n=n, who=who, text=text, kind=kind, harmless=i in harmless)
            for i, (n, who, text, kind) in enumerate(staged)]


Found = Literal["exception", "message", "wrapper-only", "no-traceback", "empty"]


@dataclass(frozen=True, kw_only=True)
class RootCause:
    """The most specific line of a log and what kind of thing it is."""

    line: str               # the evidence: a root exception, else the best that was found
    who: str = "main"
    found: Found            # exception: a root exception; wrapper-only: only vLLM's generic wrapper;
                            # message / no-traceback: no exception at all (the last message line)
    summary: str = ""       # one line for "unknown": what was found instead of a cause

    @property
    def specific(self) -> bool:
        return self.found == "exception"


def root_cause(log: str) -> RootCause:
    """The root exception in whichever process raised first (never a wrapper, caret, frame, source
    line or banner); else the wrapper alone; else the log's last message."""
    lines = classify(log)
    excs = [ln for ln in lines if ln.kind == "exception" and not ln.harmless]
    first = next((ln for ln in excs if not ln.wrapper), None)
    if first is not None:
        return RootCause(line=first.text, who=first.who, found="exception")
    wrappers = [ln for ln in lines if ln.wrapper and ln.kind in ("exception", "message") and not ln.harmless]
    if wrappers:
        w = next((ln for ln in wrappers if ln.kind == "exception"), wrappers[0])
        return RootCause(line=w.text, who=w.who, found="wrapper-only",
                         summary="only vLLM's generic wrapper; no process printed the cause before it")
    msgs = [ln for ln in lines if ln.kind == "message" and not ln.harmless]
    if msgs:
        had_tb = any(ln.kind in ("banner", "frame") for ln in lines)
        return RootCause(line=msgs[-1].text, who=msgs[-1].who, found="message" if had_tb else "no-traceback",
                         summary=("a traceback without its exception line (cut)" if had_tb
                                  else "no traceback at all; the last line printed"))
    return RootCause(line="", found="empty", summary="nothing was printed")


def has_specific_cause(log: str) -> bool:
    """Whether a failed run's log names a cause at all: some process printed an exception that is
    not vLLM's generic wrapper nor a harmless thread's. A run without one is worth re-running with
    DEBUG logging (harness.measure.diagnose)."""
    return root_cause(log).specific


def exception_lines(log: str) -> list[str]:
    """Every exception line of the log in order, harmless threads' left out."""
    return [ln.text for ln in classify(log) if ln.kind == "exception" and not ln.harmless]


# --- tracebacks, as the run record keeps them ----------------------------------------------------

def tracebacks(log: str) -> list[str]:
    """Every Python traceback in a run's combined log, per process, in order of appearance."""
    blocks: list[tuple[str, list[str]]] = []
    open_by: dict[str, list[str]] = {}
    # After the exception line, indented lines still belong to its message (pydantic's
    # ValidationError puts the actual error there); the first unindented line ends the block.
    message_by: dict[str, list[str]] = {}
    for raw in split_lines(log):
        who, line = strip_prefix(raw)
        if line.lstrip().startswith("Traceback (most recent call last)"):
            message_by.pop(who, None)
            open_by[who] = [line]
            blocks.append((who, open_by[who]))
            continue
        msg = message_by.get(who)
        if msg is not None:
            if line[:1].isspace() and line.strip():
                msg.append(line)
                continue
            del message_by[who]
        cur = open_by.get(who)
        if cur is None:
            continue
        cur.append(line)
        if line and not line[0].isspace() and not line.startswith(("Traceback", "During handling",
                                                                    "The above exception")):
            if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt|Warning)?\b.*", line) and ":" in line or \
                    re.match(r"^[\w.]+(Error|Exception)$", line):
                message_by[who] = open_by.pop(who)
    return ["\n".join(lines) for _, lines in blocks]


# pydantic ends a ValidationError with a link; the error itself is the line above it.
_TRAILER = re.compile(r"^\s*For further information visit https?://")


def last_line(tb: str) -> str:
    lines = [ln for ln in tb.strip().splitlines() if ln.strip() and not _TRAILER.match(ln)]
    return lines[-1].strip() if lines else ""


def failure_reason(tbs: list[str]) -> str:
    """The root cause: the first exception that is neither vLLM's generic 'engine died' wrapper nor
    a harmless thread's (the usage-stats thread)."""
    kept = [t for t in tbs if not _HARMLESS.search(t)]
    finals = [last_line(t) for t in kept]
    specific = [f for f in finals if f and not _GENERIC.search(f)]
    return (specific or finals or [""])[0]


# --- facts vLLM logs ------------------------------------------------------------------------------

# What vLLM logs about the MoE path a run took. Prepare/finalize: `logger.info_once("Using %s",
# prepare_finalize.__class__.__name__)` in each quantization oracle; SM split: flashinfer's TRT-LLM
# fused MoE launch; backend: the FP8/FP4 oracles' selection line.
LOG_FACTS: dict[str, re.Pattern[str]] = {
    "prepare_finalize": re.compile(r"Using (?P<value>MoEPrepareAndFinalize\w*?(?:Modular|Monolithic))\b"),
    "sm_split": re.compile(r"(?P<used>\d+) SMs used for MoE,\s*(?P<reserved>\d+) SMs reserved"),
    "moe_backend": re.compile(r"Using (?P<value>[A-Z][A-Z0-9_]+(?: \w+)?) MoE backend"),
    "enforce_eager": re.compile(r"enforce_eager=(?P<value>True|False)"),
}


def log_facts(text: str) -> dict[str, str]:
    """The MoE routing (and whether the engine ran eager) as a run's log states it; absent keys: not logged."""
    out: dict[str, str] = {}
    for key, pat in LOG_FACTS.items():
        m = pat.search(text)
        if not m:
            continue
        if key == "sm_split":
            out[key] = f"{m['used']} SMs used for MoE, {m['reserved']} reserved"
        else:
            out[key] = m["value"]
    return out


def pf_mode(prepare_finalize: str | None) -> str | None:
    """"Modular" or "Monolithic" from a prepare/finalize class name (or the short form a record holds)."""
    if not isinstance(prepare_finalize, str) or not prepare_finalize:
        return None
    m = re.search(r"(Modular|Monolithic)$", prepare_finalize)
    return m.group(1) if m else prepare_finalize


def sm_short(split: str | None) -> str | None:
    """"120 SMs" from "120 SMs used for MoE, 12 reserved", as a table column shows it."""
    if not isinstance(split, str) or not split:
        return None
    m = re.match(r"(\d+) SMs", split)
    return f"{m.group(1)} SMs" if m else split


# --- text for committed records ------------------------------------------------------------------

def scrub(text: str) -> str:
    """Machine paths out of text that goes into a committed record: the cache, the checkout, home."""
    for path, name in ((paths.cache_dir(), "$HARNESS_CACHE"), (paths.PROJ_ROOT, "."), (Path.home(), "~")):
        text = text.replace(str(path), name)
    return text


# --- reading a log file, bounded ------------------------------------------------------------------

# A failed run's cause is printed last (each process's traceback as it dies) or, for an engine that
# never started, among its first lines; the middle of a long log is progress bars and request lines.
# So a log is read as its first LOG_HEAD_BYTES and its last LOG_TAIL_BYTES, whatever its size:
# attribution reads every line of that against the failure catalogue, about half a second per MiB.
LOG_HEAD_BYTES = 256 << 10
LOG_TAIL_BYTES = 1 << 20
READ_BOUND = (f"a log longer than {(LOG_HEAD_BYTES + LOG_TAIL_BYTES) >> 10:,} KiB is read as its first "
              f"{LOG_HEAD_BYTES >> 10} KiB and its last {LOG_TAIL_BYTES >> 20} MiB")
# A line longer than this keeps its first MAX_LINE_CHARS characters: no cause is printed on a longer
# one (the longest in tests/data/vllm_logs is 1,187), and some catalogue patterns take time quadratic
# in the length of a line without spaces (a hex or base64 dump).
MAX_LINE_CHARS = 2048
_LONG_LINE = re.compile(r"[^\n]{%d}[^\n]+" % MAX_LINE_CHARS)
# A text log has no NUL bytes and decodes as UTF-8 but for a stray byte or two.
_BINARY_SHARE = 0.05


class UnusableLog(ValueError):
    """A file that is not a log to read: empty, or binary. The message says which, in two words."""


def _decode(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace")
    if b"\x00" in data[:65536] or text.count("\ufffd") > _BINARY_SHARE * max(1, len(text)):
        raise UnusableLog("not a text log (binary content)")
    return _LONG_LINE.sub(lambda m: f"{m.group(0)[:MAX_LINE_CHARS]} [harness: {len(m.group(0)) - MAX_LINE_CHARS:,} "
                                    "characters of this line not read]", text)


def bounded_text(head: bytes, tail: bytes, skipped: int) -> str:
    """A log's head and tail joined at whole lines, with one line saying how much was left out."""
    if not (head + tail).strip():
        raise UnusableLog("empty file" if not skipped else "only blank lines")
    if not skipped:
        return _decode(head + tail)
    # Cut at whole lines: a half line at either seam would be read as a line of its own.
    head = head[:head.rfind(b"\n") + 1] if b"\n" in head else head
    tail = tail[tail.find(b"\n") + 1:] if b"\n" in tail else tail
    return _decode(head) + f"[harness: {skipped:,} bytes of this log not read]\n" + _decode(tail)


def read_log(path: Path, *, head: int = LOG_HEAD_BYTES, tail: int = LOG_TAIL_BYTES) -> str:
    """The text of a log file: all of it up to head + tail bytes, else its first `head` and last
    `tail` bytes. UnusableLog for an empty or binary file; OSError as the file system says."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size <= head + tail:
            return bounded_text(f.read(head + tail + 1), b"", 0)
        first = f.read(head)
        f.seek(size - tail)
        return bounded_text(first, f.read(tail), size - head - tail)


def bound(text: str, *, head: int = LOG_HEAD_BYTES, tail: int = LOG_TAIL_BYTES) -> str:
    """`read_log`'s bound on text already in memory (a pasted excerpt)."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= head + tail:
        return bounded_text(data, b"", 0)
    return bounded_text(data[:head], data[-tail:], len(data) - head - tail)
