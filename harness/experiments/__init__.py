"""Side-experiments that measure: one module each, in one shape, plus one line in EXPERIMENTS.

A side-experiment answers a question about the harness or a leg beside a study's own runs (does the
harness agree with vLLM's benchmark, which release changed a number, which releases of a dependency
work). Each module has:

- `NAME` (its CLI subcommand), `GROUP` (`"check"`: is a number right; `"search"`: where did it change),
  `HELP` (one line) and `EXAMPLE` (one command line, shown at the end of its `--help`);
- `Args`, a frozen dataclass with `add_cli_args(parser)` (every option declared there, once) and
  `from_cli_args(namespace)` (validation, one-line errors naming the option);
- `run(args) -> Ran`: measure, write the record (a model of `harness.schema`, read back through the
  schema's typed reader), and say what it wrote;
- `summary(record)`: data about the record (no text), and `summary_md(summary) -> str`, its text;
- `study_records(study_dir, legs, models)`: its records that belong to a study (its legs and models),
  for the report; `SIDE_SECTION`: whether the report's side-records section shows their summaries;
- `quote(records, args) -> str` or None: the number a study note's `{{ NAME: ... expect=... }}`
  placeholder computes from those records.

The CLI's `check` and `search` verbs and the report's notes are built from EXPERIMENTS; nothing else
names an experiment. Helper modules of an experiment (bisect_legs, bisect_measure) and `launch` (a
notebook's sweep) live here too but are not experiments.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

# name (CLI subcommand) -> module; the order is the order of `harness check` / `harness search --help`.
EXPERIMENTS: dict[str, str] = {
    "crosscheck": "harness.experiments.crosscheck",
    "serve": "harness.experiments.serve_crosscheck",
    "client-overhead": "harness.experiments.client_overhead",
    "bisect": "harness.experiments.bisect",
    "window": "harness.experiments.window",
}

Group = Literal["check", "search"]
GROUPS: dict[Group, str] = {
    "check": "is a number right: the harness against a reference, or a question about the study's runs",
    "search": "where did it change: releases of vLLM or of a dependency, measured one by one",
}


@dataclass(frozen=True, kw_only=True)
class Ran:
    """What `run` hands back: the record it wrote (for serve: the records of this invocation, one per
    (leg, model, workload)) and the files it wrote or rewrote, in the order they were written."""
    record: Any
    files: tuple[Path, ...] = ()


def experiment(name: str) -> ModuleType:
    if name not in EXPERIMENTS:
        raise LookupError(f"unknown experiment {name!r} (known: {', '.join(EXPERIMENTS)})")
    return importlib.import_module(EXPERIMENTS[name])


def all_experiments(group: Group | None = None) -> list[ModuleType]:
    mods = [experiment(n) for n in EXPERIMENTS]
    return [m for m in mods if group is None or m.GROUP == group]


def quoting() -> dict[str, ModuleType]:
    """The experiments a study note may quote a number from, by placeholder kind (their NAME)."""
    return {m.NAME: m for m in all_experiments() if m.quote is not None}


def side_sections(study_dir: Path, legs: Sequence[str], models: Sequence[str], *,
                  study: str | None = None) -> list[str]:
    """Each record of the study's legs and models that the report shows beside its tables, as text,
    experiment by experiment in registry order. With `study` (the study's name), only the records that
    belong to it: an experiment's optional `belongs(record, study)` says which (a bisect run for another
    study's scenario on the same legs is that study's, not this one's)."""
    out = []
    for m in all_experiments():
        if m.SIDE_SECTION:
            belongs = getattr(m, "belongs", None)
            out += [m.summary_md(m.summary(rec)) for rec in m.study_records(study_dir, set(legs), set(models))
                    if study is None or belongs is None or belongs(rec, study)]
    return out
