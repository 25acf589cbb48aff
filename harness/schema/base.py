"""The pydantic bases of every model the harness writes to a file and reads back.

Frozen: a record, once read or built, is a value (copies change it, never assignment), and a key
this harness does not know is an error rather than silently dropped, so a misspelt or newer field
is named instead of lost. FrozenLenient is for the parts of a record whose producer may add keys
this harness has no use for (a profiler's settings, vLLM's request stats): those are ignored.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FrozenLenient(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class FrozenOpen(BaseModel):
    """A record whose fields beyond the declared ones are another program's and kept as they are."""
    model_config = ConfigDict(frozen=True, extra="allow")
