"""The files a worker writes beside worker.json (harness.schema.wire), as the harness reads them back
while it records the run: run.jsonl (one event per phase), manifest.json (the runtime stack),
profile.json and requests.json (a profiled run's summary; the prefill/decode split), and the
tokenization probe's answer (harness.measure.worker.tokenize_cost).

The worker writes them with the standard library only, so they carry no version of their own: the
wire's WIRE_VERSION is theirs. Format history:
  0 - (every shipped run) manifest.json, profile.json, requests.json: one JSON object each, whose
      fields the run record's models take up (RunRecord.manifest, Profile, Phases); run.jsonl: one
      object per line, `t` (epoch seconds), `phase`, `pid`, then the phase's own fields; the probe's
      answer: `seconds`, `median_s`, `prompts`, `tokens`.
  1, 2 - the same files, unchanged (only worker.json and spec.json changed).
A crash can cut any of them short, so a file that is missing, not JSON or not an object reads as
empty, and a line of run.jsonl that is not an event is skipped: the run's record then says what
failed. The probe's answer is needed whole; there a bad file is the caller's one-line error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.schema.base import FrozenLenient, FrozenOpen


class Event(FrozenOpen):
    """One line of run.jsonl. The fields beside these three are the phase's own (a prompt vocabulary's
    size, an error's text), kept as they are."""

    phase: str
    t: float | None = None
    pid: int | None = None


class TokenizeCost(FrozenLenient):
    """The tokenization probe's answer: the seconds its tokenizer took over the workload's prompts, per
    repeat, their median, and the tokens that made."""

    seconds: list[float]
    median_s: float
    prompts: int
    tokens: int


def read_object(path: Path) -> dict[str, Any]:
    """manifest.json, profile.json or requests.json as the worker left it; {} when it is missing or
    not a JSON object (the worker died before writing it, or while writing it)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return raw if isinstance(raw, dict) else {}


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    """run.jsonl's events in order, as dicts (the phase's own fields included); a line cut short by a
    crash, or one that names no phase, is skipped."""
    try:
        text = (run_dir / "run.jsonl").read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(Event.model_validate_json(line).model_dump())
        except ValidationError:
            continue
    return out


def read_tokenize_cost(path: Path) -> TokenizeCost | None:
    """The probe's answer; None when it is missing or not the probe's answer."""
    try:
        return TokenizeCost.model_validate_json(path.read_bytes())
    except (FileNotFoundError, ValidationError):
        return None
