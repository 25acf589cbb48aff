"""The serve-crosscheck record: `serve-crosscheck/<leg>--<model>--<workload>.json` of a study, one per
(leg, model, serve workload), rewritten after every repeat (harness.experiments.serve_crosscheck).

Format history (schema_version; `read` lifts an older file in order):
  1 - per repeat, each point's harness ServePoint and vLLM side (metrics, raw JSON, failure
      reason with its output tail); per point, harness ÷ vLLM with the project's rule over repeats.
  2 - `kind: serve-crosscheck`, as the harness's other typed records carry, so that reading a file
      checks what it is. Version-1 files lift unchanged (the folder holds nothing else).
  3 - `band` judges output tok/s's 95% interval, no longer its point estimate: "within" / "below" /
      "above" only when the whole interval lies there, "undecided" when it crosses an edge of the
      band, "no interval" when a side has too few repeats for one. Version-2 files lift with `band`
      recomputed from their stored interval (interval_band).
  4 - each point's summary compares p99 TTFT and p99 TPOT too (`ttft_p99_ms`, `tpot_p99_ms`): the
      tail an SLO judges, which is what matters where the two clients are compared at a capacity.
      Version-3 files lift with both None; their repeats hold every point's p99, and the crosscheck's
      reader (harness.experiments.serve_crosscheck.load_all) summarizes such a record again from them.
  5 - each harness point's metrics carry `lead_requests` (record schema 11: uncounted requests that held
      a paced point in steady state), always 0 here: neither client sends any, so the two are compared
      on equal terms. Version-4 files lift unchanged (0).
  6 - each harness point carries `engine` and `metrics.send_lag_ms` (record schema 12): the engine's own
      stats over the point, read from the server's log (harness.measure.engine_log), and how late each
      request left. Version-5 files lift unchanged (None and empty).
  7 - each harness point carries `engine_latency` (record schema 13): the server's own TTFT, queue and
      prefill histograms over the point. Version-6 files lift unchanged (None).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from harness.schema import record
from harness.schema.base import Frozen
from harness.schema.serve import Dist, ServePoint

SCHEMA_VERSION = 7
KIND = "serve-crosscheck"
# The aim on the CPU: harness ÷ vLLM within 1.00 ± 0.03 at every point. Here, not beside the
# measurement, because lifting a version-2 file re-judges its band against it.
TARGET_BAND = 0.03

Band = Literal["within", "below", "above", "undecided", "no interval"]


def interval_band(ratio: float | None, low: float | None, high: float | None,
                  band: float = TARGET_BAND) -> Band | None:
    """Where a ratio lies against 1 ± band, judged by its interval [low, high]: "within" when the
    whole interval lies inside the band (edges included), "below" / "above" when the whole interval
    lies outside it, "undecided" when it crosses an edge. A ratio with no interval is "no interval":
    its point estimate alone cannot place it. None without a ratio."""
    if ratio is None:
        return None
    if low is None or high is None:
        return "no interval"
    if 1 - band <= low and high <= 1 + band:
        return "within"
    if high < 1 - band:
        return "below"
    if low > 1 + band:
        return "above"
    return "undecided"


class VllmPoint(Frozen):
    """vLLM's side of one point: its numbers as its result JSON gives them, or why there are none."""
    status: Literal["ok", "failed"]
    reason: str = ""
    exit_code: int | None = None
    output_tail: list[str] = Field(default_factory=list)  # a failed run's last lines (stdout and stderr)
    raw: str | None = None            # vLLM's result JSON, relative to the study folder
    log: str | None = None            # its whole output, relative to the study folder
    wall_s: float | None = None       # the whole subprocess: imports, tokenizer, prompts, timed region
    requests: int | None = None
    completed: int | None = None
    failed: int | None = None
    duration_s: float | None = None
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    output_tok_s: float | None = None
    requests_per_s: float | None = None
    ttft_ms: Dist = Dist()
    tpot_ms: Dist = Dist()
    itl_ms: Dist = Dist()
    e2el_ms: Dist = Dist()


class PointPair(Frozen):
    index: int
    concurrency: int
    request_rate: float | None = None
    seed: int                          # the harness's prompt seed and vLLM's --seed
    first: Literal["harness", "vllm"]
    harness: ServePoint
    vllm: VllmPoint


class RepeatRun(Frozen):
    repeat: int
    status: Literal["ok", "failed"]
    reason: str = ""
    server_starts: int = 0
    server_init_s: float | None = None
    run_dir: str                       # the server's log and events, vLLM's files; relative to the study
    points: list[PointPair] = Field(default_factory=list)


class Comparison(Frozen):
    """One metric at one point over the repeats: harness ÷ vLLM (ratio of medians), the rule's
    interval and verdict ("harness higher" / "harness lower" where the interval excludes 1)."""
    harness: list[float] = Field(default_factory=list)
    vllm: list[float] = Field(default_factory=list)
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str = "missing"
    spread_harness: float | None = None
    spread_vllm: float | None = None


class PointSummary(Frozen):
    concurrency: int
    request_rate: float | None = None
    output_tok_s: Comparison
    requests_per_s: Comparison
    ttft_p50_ms: Comparison
    tpot_p50_ms: Comparison
    itl_p50_ms: Comparison
    ttft_p99_ms: Comparison | None = None     # None only in a record lifted from version 3
    tpot_p99_ms: Comparison | None = None
    band: Band | None = None                                  # output tok/s's interval against 1 ± TARGET_BAND
    excluded: list[str] = Field(default_factory=list)         # samples left out, and why


class ServeCrosscheckRecord(Frozen):
    schema_version: int = SCHEMA_VERSION
    kind: Literal["serve-crosscheck"] = KIND
    leg: str
    model: str
    workload: str
    scenario: str
    invocation_id: str
    started_at: str
    finished_at: str | None = None
    settings: dict[str, Any]           # what decides the measurement (and the file: paths.unclobbered)
    vllm: str | None = None            # the leg's vLLM, from the server's manifest
    harness_client: dict[str, str] = Field(default_factory=dict)
    vllm_command: list[str] = Field(default_factory=list)   # the first point's, machine paths scrubbed
    notes: list[str] = Field(default_factory=list)
    repeats: list[RepeatRun] = Field(default_factory=list)
    summary: list[PointSummary] = Field(default_factory=list)


def _update_to_2(old: dict, path: Path) -> dict:
    """Version 1 -> 2: the kind is named."""
    return {**old, "schema_version": 2, "kind": KIND}


def _is_num(v: Any) -> bool:
    return v is None or isinstance(v, (int, float)) and not isinstance(v, bool)


def _rebanded(point: Any) -> Any:
    o = point.get("output_tok_s") if isinstance(point, dict) else None
    if not isinstance(o, dict):
        return point                   # validation names what is wrong
    nums = [o.get(k) for k in ("ratio", "ci_low", "ci_high")]
    return {**point, "band": interval_band(*nums)} if all(map(_is_num, nums)) else point


def _update_to_3(old: dict, path: Path) -> dict:
    """Version 2 -> 3: each point's band re-judged from its stored output tok/s interval (a version-2
    band judged the point estimate: "within" at 0.99 [0.75, 1.31])."""
    out = {**old, "schema_version": 3}
    if isinstance(old.get("summary"), list):
        out["summary"] = [_rebanded(x) for x in old["summary"]]
    return out


def _update_to_4(old: dict, path: Path) -> dict:
    """Version 3 -> 4: no p99 comparisons (None); everything else as it was."""
    return {**old, "schema_version": 4}


def _update_to_5(old: dict, path: Path) -> dict:
    """Version 4 -> 5: a harness point's `lead_requests` is new and defaults to 0."""
    return {**old, "schema_version": 5}


def _update_to_7(old: dict, path: Path) -> dict:
    """Version 6 -> 7: a harness point's `engine_latency` is new and optional."""
    return {**old, "schema_version": 7}


def _update_to_6(old: dict, path: Path) -> dict:
    """Version 5 -> 6: a harness point's `engine` (optional) and `metrics.send_lag_ms` (empty) are new."""
    return {**old, "schema_version": 6}


MIGRATIONS: dict[int, record.Migration] = {1: _update_to_2, 2: _update_to_3, 3: _update_to_4, 4: _update_to_5,
                                           5: _update_to_6, 6: _update_to_7}


def read(path: Path) -> ServeCrosscheckRecord:
    """One record, lifted to this version; a UserError naming the file if it is unreadable, of another
    kind, newer than this harness or not a valid record."""
    return record.read_typed(path, KIND, ServeCrosscheckRecord, SCHEMA_VERSION,  # type: ignore[return-value]
                             migrations=MIGRATIONS, kind_since=2)
