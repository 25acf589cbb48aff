"""Expected failures. The CLI prints a UserError as one line and exits 2; anything else is a bug."""

from __future__ import annotations

from pathlib import Path


class UserError(Exception):
    """Bad input or a refused action: the message says which file and what is wrong."""


class InvalidFileError(UserError):
    def __init__(self, path: Path | str, what: str):
        self.path = Path(path)
        self.what = what
        super().__init__(f"{path}: {what}")


class LegEnvError(UserError):
    """A leg's venv could not be resolved or built; carries the tool's exit status and log."""

    def __init__(self, leg: str, step: str, exitcode: int, log: str, *, path: Path | str | None = None):
        self.leg, self.step, self.exitcode, self.log = leg, step, exitcode, log
        self.path = Path(path) if path is not None else None  # the leg's file, named first when known
        last = next((line for line in reversed(log.strip().splitlines()) if line.strip()), "")
        where = f"{path}: " if path is not None else ""
        super().__init__(f"{where}leg {leg}: {step} failed (exit {exitcode}): {last}")


class MixedRunsError(UserError):
    """Runs whose checked metadata differ were about to be merged (pyperf's rule)."""


class NodeBusyError(UserError):
    """Another sweep holds the node lock: nothing was measured; waiting for it may succeed."""

    def __init__(self, lock: Path | str, holder: str):
        self.lock, self.holder = Path(lock), holder
        super().__init__(f"{lock}: another sweep is measuring on this node ({holder}); "
                         "two sweeps never measure at once")
