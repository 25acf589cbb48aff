"""Failure signatures: why a run failed, from its record and its log.

A signature is a regular expression over a failed run's text (failure.reason, the recorded
exceptions and traceback, then run.log) mapped to a root cause, whether it is fixable and how. The
first source that matches any signature decides; within a source the catalogue's order decides, so
a specific cause is listed before anything that tends to follow it. vLLM's generic wrappers
("Engine core initialization failed") are deliberately not signatures: they follow the real error.
Anything unmatched is "unknown", reported with the traceback's last line.

`failure_table(ds)` builds the study's "Failure attribution" table from the records: for each leg,
the models that either have no passing run in the main series, or pass only under a pin, grouped
by root cause.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from harness.schema.record import RunRecord
from harness.core.logs import last_line, strip_prefix

# The dataset calls `attribute` while it loads, so this module takes a Dataset without importing it.
Dataset = Any

Fixable = Literal["yes", "no", "unknown"]


@dataclass(frozen=True, kw_only=True)
class Signature:
    id: str
    pattern: re.Pattern[str]
    root_cause: str
    error: str                 # how the table states the error; {name} takes the pattern's named groups
    fixable: Fixable
    fix: str
    # A run that passes with a pin of this distribution was recovered by this signature's fix.
    fix_distribution: str | None = None


def _sig(id: str, pattern: str, root_cause: str, error: str, fixable: Fixable, fix: str,
         fix_distribution: str | None = None) -> Signature:
    return Signature(id=id, pattern=re.compile(pattern), root_cause=root_cause, error=error,
                     fixable=fixable, fix=fix, fix_distribution=fix_distribution)


CATALOGUE: tuple[Signature, ...] = (
    _sig("config-model-type",
         # transformers' own words, and the shorter form a report quotes them in
         r"model type `?(?P<model_type>[\w.-]+)`? (?:but Transformers does not recognize this architecture"
         r"|not recognized)",
         "config not parseable by this leg's transformers",
         "pydantic `ValidationError` while constructing `ModelConfig`: model type {model_type} not recognized",
         "no", "not by a pin unless the leg's declared transformers range admits a release that knows the "
               "model type"),
    _sig("cutlass-thrmma",
         r"module 'cutlass\.cute\.core' has no attribute 'ThrMma'",
         "cutlass `ThrMma` relocation (nvidia-cutlass-dsl >= 4.6.0 moved it out of `cute.core`)",
         "`AttributeError: module 'cutlass.cute.core' has no attribute 'ThrMma'`",
         "yes", "pin `nvidia-cutlass-dsl==4.5.3`", "nvidia-cutlass-dsl"),
    _sig("transformers-per-layer-attribute",
         r"AmbiguousGlobalPerLayerAttributeError(?::\s*'(?P<attribute>\w+)')?",
         "transformers' per-layer attribute access, which this vLLM does not follow",
         "`AmbiguousGlobalPerLayerAttributeError`: a per-layer config attribute read as a global one",
         "yes", "pin `transformers==5.14.1`", "transformers"),
    _sig("whisper-inconsistent-shapes",
         r"input_features(?:\[[^\]]*\])? contains inconsistent shapes",
         "audio longer than Whisper's 30 s window is not truncated to 3000 mel frames",
         "`input_features contains inconsistent shapes`",
         "yes", "clamp audio to 30 s in the workload"),
    _sig("flashinfer-ipcsocket",
         r"module 'flashinfer\.comm\.mnnvl' has no attribute 'IpcSocket'",
         "flashinfer `IpcSocket` missing from `flashinfer.comm.mnnvl` (tp > 1)",
         "`AttributeError: module 'flashinfer.comm.mnnvl' has no attribute 'IpcSocket'`",
         "yes", "guard the `IpcSocket` access in the bench worker"),
    _sig("moe-quant-scheme-refused",
         r"does not support quantization scheme",
         "the forced MoE backend does not support the model's quantization scheme (a legitimate refusal)",
         "backend refuses the quantization scheme",
         "no", "choose a backend that supports the scheme"),
    _sig("cuda-oom",
         r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError: CUDA",
         "CUDA out of memory",
         "`torch.OutOfMemoryError: CUDA out of memory`",
         "yes", "lower gpu_memory_utilization / max_model_len or raise tp"),
    _sig("cpu-memory-utilization",
         r"Available memory on node \S+ .*?is less than desired CPU memory utilization",
         "CPU backend: free host memory below the requested share (`--gpu-memory-utilization`)",
         "`Available memory on node ... is less than desired CPU memory utilization`",
         "yes", "lower `gpu_memory_utilization` or free host memory"),
    _sig("timeout",
         r"(?m)^timed out after \d+",
         "the run exceeded its timeout",
         "timed out",
         "unknown", "raise the timeout, or find what hangs"),
)

UNKNOWN = "unknown"
_BY_ID = {s.id: s for s in CATALOGUE}


def signature(sig_id: str) -> Signature | None:
    return _BY_ID.get(sig_id)


@dataclass(frozen=True, kw_only=True)
class Attribution:
    signature: str             # a catalogue id, or "unknown"
    root_cause: str
    fixable: Fixable
    fix: str
    error: str                 # the evidence: the matching line, or the traceback's last line
    detail: str = ""           # the pattern's named groups, "key=value; ..."
    source: str = ""           # reason | exceptions | traceback | log | status


def _clean(text: str) -> str:
    """Log text without vLLM's per-process prefixes, so patterns see the messages themselves."""
    return "\n".join(strip_prefix(line)[1] for line in text.splitlines())


def _line_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start:end if end >= 0 else len(text)].strip()


def attribute(rec: RunRecord | Mapping[str, Any], log_text: str | None = None) -> Attribution:
    """Which catalogue signature explains a failed run. `rec` is a RunRecord or its JSON dict."""
    if not isinstance(rec, RunRecord):
        rec = RunRecord.model_validate(rec)
    f = rec.failure
    sources: list[tuple[str, str]] = []
    if f is not None:
        sources += [("reason", f.reason), ("exceptions", "\n".join(f.exceptions)), ("traceback", f.traceback)]
    if log_text:
        sources.append(("log", _clean(log_text)))
    for name, text in sources:
        if not text:
            continue
        for sig in CATALOGUE:
            m = sig.pattern.search(text)
            if m:
                groups = {k: v for k, v in m.groupdict().items() if v}
                return Attribution(signature=sig.id, root_cause=sig.root_cause, fixable=sig.fixable, fix=sig.fix,
                                   error=_line_at(text, m.start()), source=name,
                                   detail="; ".join(f"{k}={v}" for k, v in sorted(groups.items())))
    if rec.status == "timeout":
        sig = _BY_ID["timeout"]
        return Attribution(signature=sig.id, root_cause=sig.root_cause, fixable=sig.fixable, fix=sig.fix,
                           error=f.reason if f and f.reason else "timed out", source="status")
    last = ""
    if f is not None:
        # reason is the root-cause traceback's last line (run.py skips vLLM's generic wrappers);
        # the last traceback may be such a wrapper.
        last = f.reason or last_line(f.traceback)
        if not last:
            last = (f"killed by signal {f.signal}" if f.signal else
                    f"exit code {f.exit_code}" if f.exit_code is not None else "")
    return Attribution(signature=UNKNOWN, root_cause="unknown", fixable="unknown", fix="",
                       error=last or "no error recorded", source="traceback" if last else "")


# --- the table -----------------------------------------------------------------------------------

def _details(values: pd.Series, key: str) -> list[str]:
    out: list[str] = []
    for d in values.dropna():
        for part in str(d).split("; "):
            k, _, v = part.partition("=")
            if k == key and v and v not in out:
                out.append(v)
    return out


def _pin_dist(pin: str) -> str:
    return re.split(r"[<>=!~ ;\[]", pin, maxsplit=1)[0].strip().lower()


def attributions_by_model(ds: Dataset, *, series: str | None = None) -> pd.DataFrame:
    """One row per (leg, model) that needs explaining, with the root cause the records support.

    A (leg, model) needs explaining when, in `series` (default: the study's main series) and arm
    `default`, some workload of the model has no passing run on that leg, or its passing runs were
    measured under a pin. Evidence, strongest first: failed runs of that leg and model in any series
    whose signature's fix is the pin the passing runs carry; otherwise the pin alone, matched to the
    signature whose fix pins that distribution (evidence "pin"); otherwise the failed runs' most
    frequent known signature; otherwise "unknown".
    """
    df = ds.records
    series = series or ds.study.main_series
    cols = ["leg", "leg_label", "model", "status", "signature", "evidence", "pins", "failed_runs",
            "failed_series", "errors", "details"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    main = df[(df["series"] == series) & (df["arm"] == "default")]
    expected = main.groupby("model")["workload"].agg(lambda s: set(s))
    rows = []
    for (leg, model), g in main.groupby(["leg", "model"], sort=False):
        ok = g[g["status"] == "ok"]
        missing = expected[model] - set(ok["workload"])
        pins = sorted({p for ps in ok["pins"] for p in ps})
        if not missing and not pins:
            continue
        failed = df[(df["leg"] == leg) & (df["model"] == model) & (df["status"] != "ok")]
        known = failed[failed["failure_signature"] != UNKNOWN]
        pin_dists = {_pin_dist(p) for p in pins}
        sig_id, evidence = UNKNOWN, "no failed run recorded"
        fixed_by_pin = [s for s in CATALOGUE if s.fix_distribution and s.fix_distribution in pin_dists]
        with_runs = [s for s in fixed_by_pin if (known["failure_signature"] == s.id).any()]
        if not missing and with_runs:
            sig_id, evidence = with_runs[0].id, "failed runs; passes under the fix's pin"
        elif not missing and len(fixed_by_pin) == 1:
            sig_id, evidence = fixed_by_pin[0].id, "pin only (passes under this signature's fix; no failed run recorded)"
        elif len(known):
            # Prefer the runs of the series itself: other series' arms may fail for their own reasons.
            pool = known[known["series"] == series] if (known["series"] == series).any() else known
            sig_id = pool["failure_signature"].value_counts().index[0]
            evidence = "failed runs"
        elif len(failed):
            evidence = "failed runs"
        matched = failed[failed["failure_signature"] == sig_id]
        rows.append({
            "leg": leg, "leg_label": g["leg_label"].iloc[0], "model": model,
            "status": "missing" if missing else "passes only pinned", "signature": sig_id,
            "evidence": evidence, "pins": tuple(pins), "failed_runs": len(matched),
            "failed_series": tuple(sorted(set(matched["series"]))),
            "errors": tuple(dict.fromkeys(matched["failure_error"].dropna())),
            "details": "; ".join(matched["failure_detail"].dropna().unique()),
        })
    return pd.DataFrame(rows, columns=cols)


def failure_table(ds: Dataset, *, leg: str | None = None, series: str | None = None) -> pd.DataFrame:
    """The study's "Failure attribution" table: one row per (leg, root cause), letters A, B, ...
    per leg in catalogue order, with the models, the error and whether it is fixable.

    Built from the records only; see `attributions_by_model` for which models are counted and on
    what evidence.
    """
    by_model = attributions_by_model(ds, series=series)
    cols = ["leg", "group", "root cause", "models", "model names", "error", "fixable?", "evidence"]
    if leg is not None:
        by_model = by_model[(by_model["leg"] == leg) | (by_model["leg_label"] == leg)]
    order = {s.id: i for i, s in enumerate(CATALOGUE)} | {UNKNOWN: len(CATALOGUE)}
    leg_order = {name: i for i, name in enumerate(ds.study.leg_names)}
    rows = []
    for lg, g in sorted(by_model.groupby("leg"), key=lambda kv: leg_order.get(kv[0], len(leg_order))):
        for i, (sig_id, h) in enumerate(sorted(g.groupby("signature"), key=lambda kv: order[kv[0]])):
            sig = _BY_ID.get(sig_id)
            model_order = _model_order(ds)
            models = sorted(h["model"], key=lambda m: (model_order.get(m, len(model_order)), m))
            if sig is None:
                errors = [e for es in h["errors"] for e in es]
                error = " / ".join(dict.fromkeys(f"`{e}`" for e in errors)) or "no error recorded"
                root, fixable = "unknown", "unknown"
            else:
                error = sig.error
                for name in re.findall(r"\{(\w+)\}", sig.error):
                    vals = _details(h["details"], name)
                    error = error.replace("{" + name + "}", " / ".join(f"`{v}`" for v in vals) or "(not recorded)")
                if not h["failed_runs"].sum():
                    # Nothing in the records shows this error: say it is the signature's, not observed.
                    error += " (the signature's error; no failed run of these models is recorded)"
                root = sig.root_cause
                pins = sorted({p for ps in h["pins"] for p in ps if _pin_dist(p) == sig.fix_distribution})
                if sig.fixable == "yes" and pins:
                    fixable = "Yes — pin " + ", ".join(f"`{p}`" for p in pins) + " (passes in the records)"
                elif sig.fixable == "yes":
                    fixable = f"Yes (not shown by these records) — {sig.fix}"
                elif sig.fixable == "no":
                    fixable = f"No, {sig.fix}"
                else:
                    fixable = f"unknown — {sig.fix}"
            ev = h["evidence"].value_counts()
            rows.append({
                "leg": g["leg_label"].iloc[0], "group": f"{chr(ord('A') + i)}",
                "root cause": f"{chr(ord('A') + i)} · {root}", "models": len(models),
                "model names": ", ".join(f"`{m}`" for m in models), "error": error, "fixable?": fixable,
                "evidence": "; ".join(f"{n} model{'s' if n != 1 else ''}: {e}" for e, n in ev.items()),
            })
    return pd.DataFrame(rows, columns=cols)


def _model_order(ds: Dataset) -> dict[str, int]:
    return {m: i for i, m in enumerate(ds.model_order())}
