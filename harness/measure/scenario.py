"""Scenarios: models x workloads x arms x legs x repeats, validated on load.

A scenario file is the whole plan of a sweep. Nothing runs until every name in it resolves: an
unknown key, a wrong type, an unknown leg, model or workload is one line naming the file and the
key path.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, TypeAdapter, ValidationError, ValidationInfo,
                      field_validator, model_validator)

from harness import workloads
from harness.workloads import limits, sources

from harness.core import paths
from harness.core.errors import InvalidFileError, UserError
from harness.measure.leg import known_legs
from harness.core.yamlio import line_at, load_model

Scalar = str | int | float | bool | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _path_name(v: str) -> str:
    why = paths.unsafe_name(v)
    if why:
        raise ValueError(why)
    return v


def _strict_bools(params: type, given: dict[str, Any]) -> None:
    """A plugin's boolean parameter takes true or false, nothing else: pydantic would read a quoted
    "no" (or 0, or "off") as false, and a quoted "yes" as true, without a word."""
    hints = typing.get_type_hints(params)
    for k, v in given.items():
        hint = hints.get(k)
        if hint is bool or (typing.get_origin(hint) in (typing.Union, types.UnionType)
                            and bool in typing.get_args(hint)):
            if not isinstance(v, bool) and not (v is None and type(None) in typing.get_args(hint)):
                raise ValueError(f"{k}: {v!r} is not a boolean; write true or false, unquoted")


# Engine arguments the harness sets itself from another key; given in engine_args they would be
# overridden (or clash) while the record kept them as if they had been used.
HARNESS_SETS = {
    "tensor_parallel_size": "the model's `tp` key",
    "model": "the model's `path` or `architecture` key",
    "tokenizer": "the model's `tokenizer` key",
    "dtype": "the model's `dtype` key",
    "seed": "the workload's `seed` key",
    "served_model_name": "the harness (the model's name)",
    "host": "the harness (the serve client's address)",
    "port": "the harness (a free port per server)",
}
# What pydantic and YAML 1.1 would read as a boolean; quoted, it reaches vLLM as a (true) string.
_BOOLISH = {"yes", "no", "on", "off", "true", "false", "y", "n"}


def _engine_args(args: dict[str, Any], where: str = "engine_args") -> dict[str, Any]:
    for k, v in args.items():
        key = f"{where}.{k}"
        if where == "engine_args" and k.replace("-", "_") in HARNESS_SETS:
            raise ValueError(f"{key}: set by {HARNESS_SETS[k.replace('-', '_')]}; give it there, not in engine_args")
        if isinstance(v, str) and v.strip().lower() in _BOOLISH:
            raise ValueError(f"{key}: {v!r} is a quoted string, not a boolean; write true or false, unquoted")
        if isinstance(v, dict):
            _engine_args(v, key)
    return args


def _engine_args_field(v: dict[str, Any]) -> dict[str, Any]:
    return _engine_args(v)


def check_timed(wls: list["Workload"], timeout_s: float, key: str) -> None:
    """A workload that must time `min_timed_s` seconds cannot finish within a shorter run timeout."""
    for i, w in enumerate(wls):
        if w.min_timed_s is not None and not w.min_timed_s < timeout_s:
            raise ValueError(f"workloads[{i}].min_timed_s: {w.min_timed_s:g} s is not below {key} ({timeout_s:g} s); "
                             "the run would be killed before it had timed that long")


class Model(_Strict):
    name: str
    # A local directory, a hub id (resolved by vLLM; there is no hub here), or the literal
    # "tiny" for the harness's locally built tiny Llama.
    path: str | None = None
    # Real architecture config for dummy weights: the file is the model directory's config.json.
    architecture: str | None = Field(None, description="path to a config.json, relative to the scenario")
    tokenizer: str | None = None
    tp: int = Field(1, ge=1)
    dtype: str = "auto"
    engine_args: dict[str, Scalar | list | dict] = Field(default_factory=dict)
    workloads: list[str] | None = Field(None, description="default: every workload of the scenario")
    modality: Literal["text", "multimodal", "audio"] = "text"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        # A display name ("Llama-3.1-8B (dummy weights)"): the run directory takes its cleaned
        # form (run._safe), which must still be one ordinary folder name.
        cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", v)
        if not v.isprintable() or not cleaned or cleaned.startswith(".") or len(cleaned) > 128:
            raise ValueError(f"{v!r} cannot name a folder: printable, at most 128 characters, "
                             "not starting with '.'")
        return v

    engine_args_checked = field_validator("engine_args")(_engine_args_field)

    @model_validator(mode="after")
    def _one_source(self) -> "Model":
        if (self.path is None) == (self.architecture is None):
            raise ValueError("give exactly one of path or architecture")
        return self


class Workload(_Strict):
    """A workload: fields every kind shares, plus the typed parameters of its kind and modality
    (harness.workloads), given flat in the scenario and kept in `params`."""

    name: str
    kind: str
    modality: str = "text"
    input_len: int = Field(gt=0)
    output_len: int = Field(gt=0)
    warmup_iterations: int = Field(1, ge=0)
    seed: int = 0
    # Stable timed regions: repeat the timed pass (the same prompts, prefix cache reset between
    # passes) until both are reached; each pass is a sample, the metric their median. The work per
    # pass is the scenario's, never calibrated, so it is identical on every leg.
    min_timed_s: float | None = Field(None, gt=0)
    min_passes: int = Field(1, ge=1)
    description: str = ""
    params: dict[str, Any] = Field(default_factory=dict)

    name_is_folder = field_validator("name")(_path_name)

    @model_validator(mode="before")
    @classmethod
    def _plugin_params(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "params" in data:
            return data
        base = {k: v for k, v in data.items() if k in _WORKLOAD_FIELDS}
        rest = {k: v for k, v in data.items() if k not in _WORKLOAD_FIELDS}
        try:
            plugins = [workloads.kind(str(data.get("kind")))]
        except workloads.UnknownPlugin as e:
            raise ValueError(f"kind: {e}") from None
        try:
            plugins.append(workloads.modality(str(data.get("modality", "text"))))
        except workloads.UnknownPlugin as e:
            raise ValueError(f"modality: {e}") from None
        # Records written before kinds were plugins carry every kind's fields at their defaults.
        for k, v in getattr(plugins[0], "LEGACY_WORK", {}).items():
            if rest.get(k, object()) == v:
                del rest[k]
        params: dict[str, Any] = {}
        for plugin in plugins:
            names = {f.name for f in dataclasses.fields(plugin.Params)}
            given = {k: rest.pop(k) for k in list(rest) if k in names}
            _strict_bools(plugin.Params, given)
            try:
                value = TypeAdapter(plugin.Params).validate_python(given)
            except ValidationError as e:
                err = e.errors()[0]
                msg = err["msg"].removeprefix("Value error, ")
                # A field's own error has its key in loc; a check in __post_init__ has none, and its
                # message starts with the key it refuses ("num_prompts: ..."), kept as it is.
                loc = [x for x in err["loc"] if not (isinstance(x, str) and x.startswith("function-"))]
                key = "".join(f"[{x}]" if isinstance(x, int) else (f".{x}" if i else str(x)) for i, x in enumerate(loc))
                raise ValueError(f"{key}: {msg}" if key else msg) from None
            params |= dataclasses.asdict(value)
        # Whatever is left belongs to neither plugin: pydantic reports it as an unknown key.
        return base | rest | {"params": params}

    @model_validator(mode="after")
    def _sizes(self) -> "Workload":
        limits.at_most("input_len", self.input_len, limits.MAX_TOKENS, "tokens")
        limits.at_most("output_len", self.output_len, limits.MAX_TOKENS, "tokens")
        limits.at_most("warmup_iterations", self.warmup_iterations, limits.MAX_ITERATIONS, "iterations")
        limits.at_most("min_passes", self.min_passes, limits.MAX_ITERATIONS, "passes")
        if self.min_timed_s is not None:
            limits.at_most("min_timed_s", self.min_timed_s, limits.MAX_TIMEOUT_S, "s (a week)")
        prompts = prompts_per_pass(self.kind, self.params)
        tokens = prompts * (self.input_len + self.output_len)
        if tokens > limits.MAX_PASS_TOKENS:
            key = next((k for k in ("num_prompts", "batch_size") if k in self.params), "input_len")
            raise ValueError(f"{key}: {prompts:,} prompts x {self.input_len + self.output_len:,} tokens is "
                             f"{tokens:,} tokens per pass, above the harness's limit of "
                             f"{limits.MAX_PASS_TOKENS:,} ({limits.WHERE})")
        return self

    @property
    def plugin(self) -> ModuleType:
        return workloads.kind(self.kind)

    @property
    def work(self) -> dict:
        """The parts of a workload that define the work done; identical across legs by design."""
        legacy = getattr(self.plugin, "LEGACY_WORK", {})
        # Left out at their defaults, so records measured before they existed keep their fingerprints.
        unset = {k for k, v in (("min_timed_s", None), ("min_passes", 1)) if getattr(self, k) == v}
        optional = getattr(self.plugin, "UNSET_WORK", {})
        params = {k: v for k, v in self.params.items() if k not in optional or optional[k] != v}
        return legacy | self.model_dump(exclude={"description", "params", *unset}) | params


_WORKLOAD_FIELDS = set(Workload.model_fields) - {"params"}


def prompts_per_pass(kind: str, params: dict[str, Any]) -> int:
    """Prompts a workload's timed pass builds: its prompt groups' sizes, summed, as the kind itself
    groups them (a counting build: a range has a length and holds no prompts)."""
    try:
        plugin = workloads.kind(kind)
    except workloads.UnknownPlugin as e:
        raise ValueError(f"kind: {e}") from None
    work = dataclasses.asdict(plugin.Params()) | params | {"seed": 0}
    return sum(len(g) for g in plugin.prompt_groups(work, lambda n, seed: range(n)))


class Profile(_Strict):
    """Profile the timed region with vLLM's torch profiler hooks (harness.measure.worker.kernel_trace)."""

    iterations: int = Field(3, ge=1, description="timed generate() calls profiled")
    max_steps: int = Field(256, ge=1, description="engine steps the profiler records at most")
    max_trace_mb: float = Field(32, gt=0, description="compressed trace kept at most")


class Arm(_Strict):
    name: str
    description: str = ""
    engine_args: dict[str, Scalar | list | dict] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    pins: list[str] = Field(default_factory=list)
    # A profiled arm's runs are never canonical numbers: the profiler costs time.
    profile: Profile | None = None

    name_is_folder = field_validator("name")(_path_name)
    engine_args_checked = field_validator("engine_args")(_engine_args_field)


class History(_Strict):
    """A release history (docs/history.md): the scenario measured on every release of a range, each on a
    leg derived from `template` (or, for a prebuilt template, each release's own leg file), planned by
    `harness.experiments.history`. Give `releases`, or `first` and `last` for every release of the
    template's vLLM distribution on the package index between them (both included)."""

    template: str
    releases: list[str] = Field(default_factory=list)
    first: str | None = None
    last: str | None = None
    # After measuring: bisect into each changed step that has builds between its releases.
    bisect: bool = True

    @model_validator(mode="after")
    def _one_range(self) -> "History":
        if bool(self.releases) == (self.first is not None or self.last is not None):
            raise ValueError("give either releases or first and last")
        if not self.releases and (self.first is None or self.last is None):
            raise ValueError("first and last go together")
        return self


class Scenario(_Strict):
    name: str
    description: str = ""
    series: str | None = Field(None, description="records' series tag; default: the scenario name")
    legs: list[str] = Field(min_length=1)
    models: list[Model] = Field(min_length=1)
    workloads: list[Workload] = Field(min_length=1)
    arms: list[Arm] = Field(default_factory=lambda: [Arm(name="default")])
    repeats: int = Field(1, ge=1)
    timeout_s: float = Field(1800, gt=0)
    # One engine per (repeat, leg, model, arm) measuring that group's workloads in order, or one per run.
    engine: Literal["per-run", "per-group"] = "per-run"
    # Leg order within a repeat: alternate (r1: A,B; r2: B,A; ...), fixed, or shuffled with a seed,
    # so slow drift of the machine cannot line up with the version axis.
    order: Literal["alternate", "fixed", "shuffle"] = "alternate"
    order_seed: int = 0
    # Paired design (harness.measure.paired): per (model, arm), `blocks` engine instances per leg, all
    # legs' engines resident at once, `pairs` rounds of one timed pass per leg and workload in a
    # balanced (or seeded random) leg order. serial: the repeats above, one leg at a time.
    design: Literal["serial", "paired"] = "serial"
    blocks: int = Field(2, ge=2)
    pairs: int = Field(6, ge=1)
    pair_order: Literal["balanced", "random"] = "balanced"
    # Idle engines sleep (vLLM's sleep mode) between their passes: auto = on for CUDA legs, off on CPU.
    sleep: Literal["auto", "on", "off"] = "auto"
    # Stop when decided (paired, two legs): `blocks` becomes the most engine blocks; after each block from
    # `min_blocks` on, every cell is tested at alpha / looks (looks = blocks - min_blocks + 1, written into
    # study.yaml) and the sweep stops once every cell is decided, or once `budget_min` minutes are spent.
    until_decided: StrictBool = False   # true or false, unquoted (a quoted "yes" is refused)
    min_blocks: int = Field(3, ge=2)
    budget_min: float | None = Field(None, gt=0)
    # What the study's verdicts take (harness.analyze.significance), written into study.yaml on the first
    # sweep: the practical margin of "equivalent within ±margin" (None: the device kind's default) and
    # the paired rule's engine-instance bound, with where that bound was measured.
    margin: float | None = Field(None, gt=0, lt=1)
    engine_sd: float | None = Field(None, ge=0, lt=1)
    engine_sd_source: str | None = None
    # Where the scenario's data is documented as reconstructed rather than known (e.g. the
    # published study did not state its prompt lengths), say so here; reports print it.
    notes: str = ""
    history: History | None = None
    # Serve workloads judged by their half-pass rate per server (harness.analyze.halfpass), written into
    # study.yaml on the first sweep: each must probe at least three fixed request rates.
    half_pass: list[str] = Field(default_factory=list)

    @field_validator("name", "series")
    @classmethod
    def _names_are_folders(cls, v: str | None) -> str | None:
        return v if v is None else _path_name(v)

    @field_validator("legs")
    @classmethod
    def _known_legs(cls, legs: list[str], info: ValidationInfo) -> list[str]:
        for i, leg in enumerate(legs):
            why = paths.unsafe_name(leg)
            if why:
                raise ValueError(f"legs[{i}]: {why}")
        known = (info.context or {}).get("known_legs")
        if known is not None:
            for i, leg in enumerate(legs):
                if leg not in known:
                    raise ValueError(f"legs[{i}]: unknown leg {leg!r} (known: {', '.join(known)})")
        return legs

    @model_validator(mode="after")
    def _sizes(self) -> "Scenario":
        limits.at_most("repeats", self.repeats, limits.MAX_REPEATS, "repeats")
        limits.timeout("timeout_s", self.timeout_s)
        check_timed(self.workloads, self.timeout_s, "timeout_s")
        return self

    @model_validator(mode="after")
    def _names(self) -> "Scenario":
        for what, items in (("models", self.models), ("workloads", self.workloads), ("arms", self.arms)):
            seen: set[str] = set()
            for item in items:
                if item.name in seen:
                    raise ValueError(f"{what}: duplicate name {item.name!r}")
                seen.add(item.name)
        wl = {w.name for w in self.workloads}
        for i, m in enumerate(self.models):
            for j, w in enumerate(m.workloads or []):
                if w not in wl:
                    raise ValueError(f"models[{i}].workloads[{j}]: unknown workload {w!r}")
        by_name = {w.name: w for w in self.workloads}
        for i, name in enumerate(self.half_pass):
            w = by_name.get(name)
            rates = ({float(r) for r in (w.params.get("request_rate") or []) if r is not None and math.isfinite(float(r))}
                     if w is not None and workloads.known(w.kind) else set())
            if w is None or not workloads.traits_of(w.kind).server or len(rates) < 3:
                raise ValueError(f"half_pass[{i}]: {name!r} should name a serve workload of this scenario that "
                                 "probes at least three fixed request rates")
        return self

    @model_validator(mode="after")
    def _history_template(self) -> "Scenario":
        # The releases' legs are derived when the history is planned; the scenario names only its template.
        if self.history is not None and self.legs != [self.history.template]:
            raise ValueError(f"legs: a history scenario lists its template leg only ([{self.history.template}])")
        return self

    @property
    def series_tag(self) -> str:
        return self.series or self.name

    def model(self, name: str) -> Model:
        return next(m for m in self.models if m.name == name)

    def workloads_for(self, model: Model) -> list[Workload]:
        names = model.workloads
        return [w for w in self.workloads if names is None or w.name in names]


def scenario_path(name_or_path: str | Path) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    return paths.SCENARIOS / f"{name_or_path}.yaml"


def load_scenario(name_or_path: str | Path) -> Scenario:
    path = scenario_path(name_or_path)
    sc = load_model(Scenario, path, known_legs=known_legs())
    for i, m in enumerate(sc.models):
        if m.architecture and not (path.parent / m.architecture).exists():
            raise InvalidFileError(path, f"models[{i}].architecture: no such file {m.architecture}")
    return sc


def architecture_path(scenario_file: Path, model: Model) -> Path | None:
    return (scenario_file.parent / model.architecture).resolve() if model.architecture else None


def project_tree(scenario_file: Path) -> Path:
    """The tree a scenario's `source:` folders may not leave through a symlink: the project's, for a
    scenario inside it, else the scenario's own folder."""
    here = Path(scenario_file).resolve().parent
    return paths.PROJ_ROOT if paths.PROJ_ROOT.resolve() in (here, *here.parents) else here


def check_plan(path: Path, sc: Scenario, workload_names: list[str], *, repeats: int | None = None,
               timeout_s: float | None = None, check_sources: bool = True) -> None:
    """What only the plan can check, before any engine: the command line's overrides of the
    scenario's sizes, and each planned workload's `source:` folder (on this machine: with
    `check_sources=False`, as for a cluster whose nodes hold the data, it is left to the worker)."""
    try:
        if repeats is not None:
            limits.at_most("--repeats", repeats, limits.MAX_REPEATS, "repeats")
        if timeout_s is not None:
            limits.timeout("--timeout", timeout_s)
            check_timed(sc.workloads, timeout_s, "--timeout")
    except ValueError as e:
        raise UserError(f"{path}: {e}") from None
    if not check_sources:
        return
    tree = project_tree(path)
    for i, w in enumerate(sc.workloads):
        src = w.params.get("source")
        if w.name not in workload_names or not src:
            continue
        why = sources.problem(w.modality, str(src), tree)
        if why:
            line = line_at(path, ("workloads", i, "source"))
            raise InvalidFileError(path, f"{f'line {line}: ' if line else ''}workloads[{i}].source: {why}")
