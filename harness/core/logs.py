"""Reading vLLM's logs: process prefixes, tracebacks, the root-cause line, and facts vLLM states.

One module for every reader of a run's `run.log`: the run (`harness.measure.run`) takes the failure
from it, failure attribution (`harness.analyze.failure`) matches signatures against it, and the
diagnostics parse the MoE routing out of it; `scrub` takes machine paths out of a log line before a
committed record keeps it. Pure text in, plain values out; nothing here reads a file, so every layer
may use it.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.core import paths

# --- process prefixes and tracebacks --------------------------------------------------------------

# vLLM prefixes lines from its subprocesses: "(EngineCore_DP0 pid=12) ERROR 11-29 23:58:00 [core.py:1] "
_PREFIX = re.compile(r"^(?:\((?P<proc>[\w.-]+) pid=(?P<pid>\d+)\)\s*)?"
                     r"(?:(?:ERROR|WARNING|INFO|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ?)?")


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_prefix(line: str) -> tuple[str, str]:
    """(who, text): the process a vLLM log line came from ("EngineCore_DP0:12", or "main") and the line
    without that prefix, its level/timestamp header and colour codes."""
    line = _ANSI.sub("", line)
    m = _PREFIX.match(line)
    who = f"{m.group('proc')}:{m.group('pid')}" if m and m.group("pid") else "main"
    return who, line[m.end():] if m else line


def tracebacks(log: str) -> list[str]:
    """Every Python traceback in a run's combined log, per process, in order of appearance."""
    blocks: list[tuple[str, list[str]]] = []
    open_by: dict[str, list[str]] = {}
    for raw in log.splitlines():
        who, line = strip_prefix(raw)
        if line.startswith("Traceback (most recent call last)"):
            open_by[who] = [line]
            blocks.append((who, open_by[who]))
            continue
        cur = open_by.get(who)
        if cur is None:
            continue
        cur.append(line)
        if line and not line[0].isspace() and not line.startswith(("Traceback", "During handling",
                                                                    "The above exception")):
            if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt|Warning)?\b.*", line) and ":" in line or \
                    re.match(r"^[\w.]+(Error|Exception)$", line):
                del open_by[who]
    return ["\n".join(lines) for _, lines in blocks]


_GENERIC = re.compile(r"Engine core initialization failed|EngineDeadError|EngineCore encountered|"
                      r"Worker failed with error|WorkerProc initialization failed")


def last_line(tb: str) -> str:
    lines = [ln for ln in tb.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def failure_reason(tbs: list[str]) -> str:
    """The root cause: the first exception that is not vLLM's generic 'engine died' wrapper."""
    finals = [last_line(t) for t in tbs]
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
