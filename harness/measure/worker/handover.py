"""Where a timed pass's time went, seen from the front end: handing the requests to the engine, then
waiting for the rest.

vLLM's offline entry points (`LLM.generate`, `LLM.chat`; 0.24.0-0.32.0) first hand every request to the
engine one by one, in the caller's process, and only then collect outputs; the engine core (a process
of its own) starts on the first requests while the front end is still handing over the rest. Before
each request's handover the front end renders it (for `chat`: the message parsing, the template and
the fetching and decoding of data URLs; for both: the multimodal processor, which these releases run
in the renderer); the handover itself is `llm_engine.add_request`: the engine's input checks and the
send to the engine core. So a pass's region splits into

  handover_s  call start -> the last request handed over (host-side work on every request)
  add_s       of that, the time inside add_request (the rest is the rendering)
  tail_s      the last request handed over -> the call's return (the engine finishing what it holds)

The two tools of a crosscheck differ only in what they do around the engine; this split says on which
side of the last handover their difference lies. It patches the LLM instance's attributes for the span
of one pass and restores them, so the engine is untouched but for two clock reads per request.
"""

from __future__ import annotations

import time
from typing import Any

ENTRY_POINTS = ("generate", "chat")   # the LLM methods a timed region calls


class Clock:
    """`with Clock(llm) as c:` ... `c.summary(...)`: every outermost generate/chat call made inside,
    with the add_request calls it made."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.calls: list[dict[str, Any]] = []
        self._depth = 0
        self._patched: list[tuple[Any, str]] = []

    def _wrap_entry(self, fn: Any) -> Any:
        def entry(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            outer = self._depth == 1
            if outer:
                self.calls.append({"start": time.perf_counter(), "adds": 0, "add_s": 0.0, "last_add": None})
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                if outer:
                    self.calls[-1]["end"] = time.perf_counter()
        return entry

    def _wrap_add(self, fn: Any) -> Any:
        def add_request(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                t1 = time.perf_counter()
                if self._depth and self.calls:
                    call = self.calls[-1]
                    call["adds"] += 1
                    call["add_s"] += t1 - t0
                    call["last_add"] = t1
        return add_request

    def __enter__(self) -> Clock:
        for name in ENTRY_POINTS:
            fn = getattr(self.llm, name, None)
            if fn is not None:
                setattr(self.llm, name, self._wrap_entry(fn))
                self._patched.append((self.llm, name))
        engine = getattr(self.llm, "llm_engine", None)
        if engine is not None and hasattr(engine, "add_request"):
            engine.add_request = self._wrap_add(engine.add_request)
            self._patched.append((engine, "add_request"))
        return self

    def __exit__(self, *exc: object) -> None:
        # The instance attributes set above shadow the class's methods; removing them restores those.
        for obj, name in self._patched:
            obj.__dict__.pop(name, None)
        self._patched.clear()

    def summary(self, *, last_only: bool = False) -> dict[str, float | int] | None:
        """The split of the pass: over every outermost call (the harness's prompt groups), or only the
        last one (vLLM's benchmark: its warm-up calls come first, its timed call last). None when no
        call handed over a request (nothing to split, or a vLLM whose entry points differ)."""
        calls = [c for c in self.calls if "end" in c]
        if last_only:
            calls = calls[-1:]
        calls = [c for c in calls if c["adds"]]
        if not calls:
            return None
        return {"requests": sum(c["adds"] for c in calls),
                "call_s": sum(c["end"] - c["start"] for c in calls),
                "handover_s": sum(c["last_add"] - c["start"] for c in calls),
                "add_s": sum(c["add_s"] for c in calls),
                "tail_s": sum(c["end"] - c["last_add"] for c in calls)}
