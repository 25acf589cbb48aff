"""Failure signatures: why a run failed, from its record and its log.

A signature is a regular expression over one line of a failed run's text (failure.reason, the log's
lines, the recorded exceptions and traceback, then what a DEBUG re-run surfaced) mapped to a root
cause, its class (the fixed vocabulary `FAILURE_CLASSES` the records, `harness explain` and the report
share), whether it is fixable and how, and for a dependency problem the `harness search window` command that
would test it. Lines are read with `harness.core.logs.classify`: a frame, a caret line, a source line
(`raise ValueError("…")` repeats the message), a traceback banner or a harmless thread's traceback is
never evidence, and vLLM's generic wrappers ("Engine core initialization failed") are read only when
nothing else matches (a wrapper may quote the cause). Within a source the earliest matching line
decides (the process that raised first), within a line the catalogue's order; a weak signature (a
signal, the harness's own timeout) decides only when no strong one matches any source. Where no
signature matches, the second layer reads the tracebacks' structure (harness.analyze.structure: the
exception type with the frames it passed through) and names a class with lower confidence ("class
by structure, no known signature"). Anything neither layer reads is "unknown", with the most
specific line found and what it is (only the wrapper, no traceback at all).

`failure_table(ds)` builds the study's "Failure attribution" table from the records: for each leg,
the models that either have no passing run in the main series, or pass only under a pin, grouped
by root cause.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.core.errors import UserError
from harness.core.logs import LogLine, UnusableLog, bound, classify, last_line, read_log, root_cause
from harness.schema.record import RunRecord, write_json_atomic

# The dataset calls `attribute` while it loads, so this module takes a Dataset without importing it.
Dataset = Any

from harness.analyze import structure
from harness.analyze.signatures import (CATALOGUE, UNKNOWN, Fixable, Signature, _BY_ID,  # noqa: F401
                                        signature)
from harness.analyze.signatures import failure_class as _signature_class

# A class named by a structural rule is recorded under this prefix and the rule's id, so a record
# and the failure table tell it from a catalogue signature.
STRUCTURE_PREFIX = "structure:"


@dataclass(frozen=True, kw_only=True)
class Attribution:
    signature: str             # a catalogue id, or "unknown"
    root_cause: str
    fixable: Fixable
    fix: str
    error: str                 # the evidence: the most specific line
    detail: str = ""           # the pattern's named groups, "key=value; ..."
    source: str = ""           # reason | log | exceptions | traceback | diagnosis | status
    klass: str = UNKNOWN       # one of FAILURE_CLASSES
    window: str = ""           # for a dependency problem: the `harness search window` command that tests it
    found: str = ""            # for "unknown": what was found instead of a cause
    diagnosed: bool = False    # the evidence comes from the DEBUG re-run (diagnosis/)
    layer: str = "none"        # which layer answered: signature | structure | none
    confidence: str = "none"   # high (an exact signature) | lower (structure only) | none

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["class"] = d.pop("klass")
        return d


def failure_class(sig_id: str | None) -> str:
    """The class of a signature id or of a structural rule's id ("unknown" for unknown or missing ids)."""
    if sig_id and sig_id.startswith(STRUCTURE_PREFIX):
        r = _rule(sig_id)
        return r.klass if r else UNKNOWN
    return _signature_class(sig_id)


def _rule(sig_id: str) -> structure.Rule | None:
    rid = sig_id.removeprefix(STRUCTURE_PREFIX)
    return next((r for r in structure.rules() if r.id == rid), None)


def _module_of(dist: str) -> str:
    return {"flashinfer-python": "flashinfer", "flashinfer-cubin": "flashinfer_cubin",
            "nvidia-cutlass-dsl": "cutlass"}.get(dist, dist.replace("-", "_"))


def _so_module(so: str) -> str:
    """'…/site-packages/vllm/_C.abi3.so' -> 'vllm._C'."""
    rel = re.split(r"(?:site|dist)-packages/", so)[-1].lstrip("/")
    return re.sub(r"(?:\.cpython-[\w-]+|\.abi3)?\.so$", "", rel).replace("/", ".")


def _window(sig: Signature, groups: dict[str, str]) -> str:
    if not sig.window:
        return ""
    g = dict(groups)
    if "so" in g:
        g["module"] = _so_module(g["so"])
    for key in ("package", "other"):
        if key in g:
            g[f"{key}_module"] = _module_of(g[key])
    try:
        return sig.window.format(**g)
    except KeyError:
        return ""  # the line did not carry what the command needs


def _match(sig: Signature, lines: list[LogLine], i: int) -> re.Match[str] | None:
    m = sig.pattern.search(lines[i].text)
    if m and sig.context is not None:
        before = " ".join(ln.text for ln in lines[max(0, i - 12):i + 1] if ln.who == lines[i].who)
        if not sig.context.search(before):
            return None
    return m


def _search(text: str, weak: bool) -> tuple[Signature, re.Match[str], LogLine] | None:
    """The earliest line of `text` a signature of this tier matches: specific lines first, then
    vLLM's wrappers (they may quote the cause)."""
    lines = classify(text)
    for want_wrapper in (False, True):
        for i, ln in enumerate(lines):
            if ln.harmless or ln.kind not in ("exception", "message") or ln.wrapper != want_wrapper:
                continue
            for sig in CATALOGUE:
                if sig.weak != weak:
                    continue
                m = _match(sig, lines, i)
                if m:
                    return sig, m, ln
    return None


def _attribution(sig: Signature, m: re.Match[str], line: str, source: str) -> Attribution:
    groups = {k: v for k, v in m.groupdict().items() if v}
    return Attribution(signature=sig.id, root_cause=sig.root_cause, fixable=sig.fixable, fix=sig.fix,
                       error=line, source=source, klass=sig.klass, window=_window(sig, groups),
                       detail="; ".join(f"{k}={v}" for k, v in sorted(groups.items()) if k != "so"),
                       diagnosed=source == "diagnosis", layer="signature", confidence="high")


def attribute(rec: RunRecord | Mapping[str, Any] | None, log_text: str | None = None,
              diagnosis_log: str | None = None) -> Attribution:
    """Which catalogue signature explains a failed run. `rec` is a RunRecord, its JSON dict, or None
    for a log alone; `diagnosis_log` is the DEBUG re-run's log when there is one (the record's
    diagnosis fields stand in for it otherwise)."""
    if rec is not None and not isinstance(rec, RunRecord):
        rec = RunRecord.model_validate(rec)
    f = rec.failure if rec is not None else None
    sources: list[tuple[str, str]] = []
    if f is not None:
        sources.append(("reason", f.reason))
    if log_text:
        sources.append(("log", log_text))
    if f is not None:
        sources += [("exceptions", "\n".join(f.exceptions)), ("traceback", f.traceback)]
    if diagnosis_log:
        sources.append(("diagnosis", diagnosis_log))
    elif f is not None and f.diagnosis is not None:
        sources.append(("diagnosis", "\n".join([f.diagnosis.reason, *f.diagnosis.exceptions])))
    for weak in (False, True):
        for name, text in sources:
            hit = _search(text, weak) if text else None
            if hit:
                return _attribution(hit[0], hit[1], hit[2].text, name)
    if rec is not None and rec.status == "timeout":
        sig = _BY_ID["timeout"]
        return Attribution(signature=sig.id, root_cause=sig.root_cause, fixable=sig.fixable, fix=sig.fix,
                           error=f.reason if f and f.reason else "timed out", source="status", klass=sig.klass,
                           layer="signature", confidence="high")
    for name, text in sources:
        hit = structure.match(text) if text and name != "reason" else None
        if hit:
            return _by_structure(hit, name)
    return _unknown(f, log_text, diagnosis_log)


def _by_structure(hit: structure.StructureMatch, source: str) -> Attribution:
    """The structural layer's answer: the rule's class, the traceback's exception line (or, cut, its
    innermost source line) as evidence, and the frame that decided as detail."""
    tb, r = hit.traceback, hit.rule
    frame = next((f for f in reversed(tb.frames) if r.frames is not None and r.frames.search(str(f))),
                 tb.frames[-1] if tb.frames else None)
    # The frame that decided, as its package folder and file ("pynccl.py" alone hides whose it is).
    detail = f"frame={'/'.join(frame.path.split('/')[-2:])}:{frame.func}" if frame else ""
    if tb.exc_type:
        detail = f"exception={tb.exc_type}; {detail}" if detail else f"exception={tb.exc_type}"
    return Attribution(signature=STRUCTURE_PREFIX + r.id, root_cause=r.root_cause, fixable="unknown", fix=r.fix,
                       error=tb.line or (f"{frame.path}, in {frame.func}" if frame else ""), detail=detail,
                       source=source, klass=r.klass, diagnosed=source == "diagnosis",
                       found="class by structure, no known signature", layer="structure", confidence="lower")


def _unknown(f: Any, log_text: str | None, diagnosis_log: str | None) -> Attribution:
    """No signature: the most specific line there is, and what it is."""
    diag = f.diagnosis if f is not None else None
    rc = root_cause(log_text) if log_text else None
    drc = root_cause(diagnosis_log) if diagnosis_log else None
    if drc is not None and drc.specific and not (rc and rc.specific):
        return Attribution(signature=UNKNOWN, root_cause="unknown", fixable="unknown", fix="", error=drc.line,
                           source="diagnosis", diagnosed=True,
                           found="a cause outside the catalogue, surfaced by the DEBUG re-run")
    if rc is not None and (rc.specific or not f or not f.reason):
        found = "a cause outside the catalogue" if rc.specific else rc.summary
        if diag is not None and not rc.specific:
            found += "; the DEBUG re-run surfaced nothing more" if not diag.surfaced else ""
        return Attribution(signature=UNKNOWN, root_cause="unknown", fixable="unknown", fix="",
                           error=rc.line or "no error recorded", source="log" if rc.line else "", found=found)
    last = ""
    if f is not None:
        # reason is the root-cause traceback's last line (run.py skips vLLM's generic wrappers);
        # the last traceback may be such a wrapper.
        last = f.reason or last_line(f.traceback)
        if not last:
            last = (f"killed by signal {f.signal}" if f.signal else
                    f"exit code {f.exit_code}" if f.exit_code is not None else "")
    found = ("only vLLM's generic wrapper" if last and root_cause(last).found == "wrapper-only"
             else "a cause outside the catalogue" if last and root_cause(last).specific
             else "no traceback recorded" if last else "nothing recorded")
    return Attribution(signature=UNKNOWN, root_cause="unknown", fixable="unknown", fix="",
                       error=last or "no error recorded", source="traceback" if last else "", found=found)


# --- explaining a log, and recording the class ------------------------------------------------

def _read(path: Path) -> str:
    """A log file's text, bounded (core.logs.read_log): an empty or binary file is one line saying so."""
    try:
        return read_log(path)
    except UnusableLog as e:
        raise UserError(f"{path}: {e}") from None
    except OSError as e:
        raise UserError(f"{path}: unreadable ({e.strerror or e})") from None


def _read_if_usable(path: Path) -> str | None:
    """A run folder's log beside its record: an empty or binary one is as good as none."""
    if not path.is_file():
        return None
    try:
        return read_log(path)
    except (UnusableLog, OSError):
        return None


def explain(source: Path | str) -> Attribution:
    """Attribute any vLLM log: a harness run folder (its results.json, run.log and diagnosis/), a
    results.json, a log file (a Path), or a pasted excerpt (a str). A log is read as its first
    LOG_HEAD_BYTES and last LOG_TAIL_BYTES at most (core.logs), whatever its size."""
    if isinstance(source, str):
        try:
            return attribute(None, bound(source))
        except UnusableLog as e:
            raise UserError(f"(stdin): {e}") from None
    path = Path(source)
    if not path.exists():
        raise UserError(f"{path}: no such file or folder")
    if path.is_file() and path.name != "results.json":
        return attribute(None, _read(path))
    run_dir = path if path.is_dir() else path.parent
    rec = None
    if (run_dir / "results.json").is_file():
        from harness.schema.record import read

        try:
            rec = read(run_dir / "results.json")
        except (ValueError, UserError) as e:
            raise UserError(f"{run_dir / 'results.json'}: not a run record ({e})") from None
    if rec is None:
        if not (run_dir / "run.log").is_file():
            raise UserError(f"{run_dir}: neither results.json nor run.log (not a run folder)")
        log = _read(run_dir / "run.log")
    else:
        log = _read_if_usable(run_dir / "run.log")
    diag_log = _read_if_usable(run_dir / "diagnosis" / "run.log")
    if rec is not None and rec.status == "ok":
        return Attribution(signature="", root_cause="the run passed", fixable="unknown", fix="", error="",
                           source="status", klass="", found="nothing to explain: status ok")
    return attribute(rec, log, diag_log)


def record_class(run_dir: Path) -> Attribution | None:
    """Attribute a failed run and keep the class and signature in its results.json (the record says
    what the attribution was when it was measured); None for a passing run."""
    from harness.schema.record import read

    path = run_dir / "results.json"
    rec = read(path)
    if rec.status == "ok" or rec.failure is None:
        return None
    att = explain(run_dir)
    failure = rec.failure.model_copy(update={"failure_class": att.klass, "signature": att.signature})
    write_json_atomic(path, rec.model_copy(update={"failure": failure}).model_dump(mode="json"))
    return att


def explain_text(att: Attribution, name: str) -> str:
    """What `harness explain` prints for one log."""
    if not att.klass:
        return f"{name}: {att.found}\n"
    if att.layer == "structure":
        rule_id = att.signature.removeprefix(STRUCTURE_PREFIX)
        head = f"{name}: {att.klass} (class by structure, no known signature; rule {rule_id}; lower confidence)"
    else:
        head = f"{name}: {att.klass} (signature {att.signature})"
    out = [head, f"  evidence:   {att.error}"]
    if att.signature == UNKNOWN:
        out.append(f"  found:      {att.found}")
    elif att.layer == "structure":
        out.append(f"  root cause: {att.root_cause}")
        out.append(f"  check:      {att.fix}")
    else:
        out.append(f"  root cause: {att.root_cause}")
        out.append(f"  fixable:    {att.fixable}" + (f" — {att.fix}" if att.fix else ""))
    if att.detail:
        out.append(f"  detail:     {att.detail}")
    if att.window:
        out.append(f"  test it:    {att.window}")
    if att.diagnosed:
        out.append("  (surfaced by the re-run with VLLM_LOGGING_LEVEL=DEBUG, diagnosis/)")
    return "\n".join(out) + "\n"


def explain_logs(sources: list[str], *, as_json: bool, stdin: Any = None) -> tuple[str, list[str]]:
    """`harness explain` on its arguments ("-" reads an excerpt from stdin): what it prints, and one
    line for each argument that is not a log to explain (missing, empty, binary, unreadable)."""
    results, unusable = [], []
    for s in sources:
        try:
            att = explain((stdin or sys.stdin).read()) if s == "-" else explain(Path(s))
        except UserError as e:
            unusable.append(str(e))
            continue
        results.append((s, att))
    if not results:
        return "", unusable
    if as_json:
        return "\n".join(json.dumps({"log": s} | a.to_json()) for s, a in results) + "\n", unusable
    return "".join(explain_text(a, s) for s, a in results), unusable


def explain_main(sources: list[str], *, as_json: bool, stdin: Any = None) -> str:
    """`explain_logs`' text; the first unusable argument is the error."""
    text, unusable = explain_logs(sources, as_json=as_json, stdin=stdin)
    if unusable:
        raise UserError(unusable[0])
    return text


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
    signature whose fix pins that distribution, or, where several do, the one whose fix names that
    very pin (evidence "pin"); otherwise the failed runs' most
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
        # Several signatures can be fixed by pinning one distribution (transformers has three); the one
        # whose fix names the very pin the passing runs carry is the one they support.
        exact = [s for s in fixed_by_pin if any(f"`{p}`" in s.fix for p in pins)]
        if len(fixed_by_pin) > 1 and len(exact) == 1:
            fixed_by_pin = exact
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
    per leg in catalogue order, with the root cause's class (FAILURE_CLASSES), the models, the error
    and whether it is fixable.

    Built from the records only; see `attributions_by_model` for which models are counted and on
    what evidence.
    """
    by_model = attributions_by_model(ds, series=series)
    cols = ["leg", "group", "root cause", "class", "models", "model names", "error", "fixable?", "evidence"]
    if leg is not None:
        by_model = by_model[(by_model["leg"] == leg) | (by_model["leg_label"] == leg)]
    order = {s.id: i for i, s in enumerate(CATALOGUE)} | {UNKNOWN: len(CATALOGUE)}
    leg_order = {name: i for i, name in enumerate(ds.study.leg_names)}
    rows = []
    for lg, g in sorted(by_model.groupby("leg"), key=lambda kv: leg_order.get(kv[0], len(leg_order))):
        # Structural answers sort after the catalogue's, before "unknown".
        for i, (sig_id, h) in enumerate(sorted(g.groupby("signature"),
                                               key=lambda kv: (order.get(kv[0], len(CATALOGUE) - 0.5), kv[0]))):
            sig = _BY_ID.get(sig_id)
            model_order = _model_order(ds)
            models = sorted(h["model"], key=lambda m: (model_order.get(m, len(model_order)), m))
            rule = _rule(sig_id) if sig_id.startswith(STRUCTURE_PREFIX) else None
            if rule is not None:
                errors = [e for es in h["errors"] for e in es]
                error = " / ".join(dict.fromkeys(f"`{e}`" for e in errors)) or "no error recorded"
                root, fixable = f"{rule.root_cause} (by structure, no known signature)", f"unknown — {rule.fix}"
            elif sig is None:
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
                "root cause": f"{chr(ord('A') + i)} · {root}", "class": failure_class(sig_id), "models": len(models),
                "model names": ", ".join(f"`{m}`" for m in models), "error": error, "fixable?": fixable,
                "evidence": "; ".join(f"{n} model{'s' if n != 1 else ''}: {e}" for e, n in ev.items()),
            })
    return pd.DataFrame(rows, columns=cols)


def _model_order(ds: Dataset) -> dict[str, int]:
    return {m: i for i, m in enumerate(ds.model_order())}
