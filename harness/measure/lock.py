"""Waiting for the node lock: the one wait every caller that may meet another sweep goes through.

`harness.measure.guard.node_lock` refuses at once with `NodeBusyError` while another sweep holds the
lock. A sweep started by hand should fail then; a diagnostic notebook, a bisect or a dependency window
that runs unattended should wait for that sweep to finish instead, and never measure beside it. The
wait retries only on `NodeBusyError`: any other refusal is raised at once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from harness.core.errors import NodeBusyError
from harness.measure import guard

T = TypeVar("T")


def _say(text: str) -> None:
    print(text, flush=True)


def while_busy(fn: Callable[[], T], *, wait_s: float, poll_s: float = 30.0,
               say: Callable[[str], None] = _say) -> T:
    """`fn()`, called again every `poll_s` while it raises `NodeBusyError`, for up to `wait_s`; then
    the last `NodeBusyError` is raised. `say` gets one line when the wait begins."""
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            return fn()
        except NodeBusyError as e:
            if time.monotonic() >= deadline:
                raise
            if not said:
                say(f"waiting for the node lock (up to {wait_s:.0f} s): {e}")
                said = True
            time.sleep(poll_s)


@contextlib.contextmanager
def waiting_node_lock(wait_s: float, *, poll_s: float = 30.0, path: Path | None = None,
                      say: Callable[[str], None] = _say) -> Iterator[Path]:
    """The node lock, held for the block; while another sweep holds it, wait (see `while_busy`)."""
    with contextlib.ExitStack() as stack:
        got = while_busy(lambda: stack.enter_context(guard.node_lock(path)), wait_s=wait_s, poll_s=poll_s, say=say)
        yield got
