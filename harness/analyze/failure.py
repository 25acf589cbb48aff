"""Failure signatures: why a run failed, from its record and its log.

A signature is a regular expression over one line of a failed run's text (failure.reason, the log's
lines, the recorded exceptions and traceback, then what a DEBUG re-run surfaced) mapped to a root
cause, its class (the fixed vocabulary `FAILURE_CLASSES` the records, `harness explain` and the report
share), whether it is fixable and how, and for a dependency problem the `harness window` command that
would test it. Lines are read with `harness.core.logs.classify`: a frame, a caret line, a source line
(`raise ValueError("…")` repeats the message), a traceback banner or a harmless thread's traceback is
never evidence, and vLLM's generic wrappers ("Engine core initialization failed") are read only when
nothing else matches (a wrapper may quote the cause). Within a source the earliest matching line
decides (the process that raised first), within a line the catalogue's order; a weak signature (a
signal, the harness's own timeout) decides only when no strong one matches any source. Anything
unmatched is "unknown", with the most specific line found and what it is (only the wrapper, no
traceback at all).

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
from typing import Any, Literal

import pandas as pd

from harness.core.errors import UserError
from harness.core.logs import LogLine, classify, last_line, root_cause
from harness.schema.record import FAILURE_CLASSES, FailureClass, RunRecord, write_json_atomic

# The dataset calls `attribute` while it loads, so this module takes a Dataset without importing it.
Dataset = Any

Fixable = Literal["yes", "no", "unknown"]


@dataclass(frozen=True, kw_only=True)
class Signature:
    id: str
    klass: FailureClass
    pattern: re.Pattern[str]
    root_cause: str
    error: str                 # how the table states the error; {name} takes the pattern's named groups
    fixable: Fixable
    fix: str
    # A run that passes with a pin of this distribution was recovered by this signature's fix.
    fix_distribution: str | None = None
    # `harness window …` that would test the fix; {name} takes the pattern's named groups.
    window: str | None = None
    # Must match within the few lines before the matching one (the same traceback), e.g. the frame
    # that makes a bare KeyError a config lookup.
    context: re.Pattern[str] | None = None
    weak: bool = False         # decides only when no strong signature matches anywhere


def _sig(id: str, klass: FailureClass, pattern: str, root_cause: str, error: str, fixable: Fixable, fix: str,
         fix_distribution: str | None = None, *, window: str | None = None, context: str | None = None,
         weak: bool = False) -> Signature:
    return Signature(id=id, klass=klass, pattern=re.compile(pattern), root_cause=root_cause, error=error,
                     fixable=fixable, fix=fix, fix_distribution=fix_distribution, window=window,
                     context=re.compile(context) if context else None, weak=weak)


# Order matters only within one line: a line that names two causes is the earlier entry's. The
# study's ids (config-model-type … timeout) keep their meaning: records, tables and reports use them.
CATALOGUE: tuple[Signature, ...] = (
    # --- the model's architecture or config ---
    _sig("config-model-type", "config-unparseable",
         # transformers' own words, and the shorter form a report quotes them in
         r"model type `?(?P<model_type>[\w.-]+)`? (?:but Transformers does not recognize this architecture"
         r"|not recognized)",
         "config not parseable by this leg's transformers",
         "pydantic `ValidationError` while constructing `ModelConfig`: model type {model_type} not recognized",
         "no", "not by a pin unless the leg's declared transformers range admits a release that knows the "
               "model type"),
    _sig("config-class-unrecognized", "config-unparseable",
         r"Unrecognized configuration class <class '(?P<config_class>[\w.]+)'>",
         "the config class is unknown to this leg's transformers auto classes",
         "`Unrecognized configuration class` {config_class}",
         "no", "a transformers release that maps the config class, within the leg's declared range"),
    _sig("config-mapping-keyerror", "config-unparseable",
         r"^KeyError: '(?P<model_type>[\w.-]+)'$",
         "the checkpoint's model_type is missing from transformers' CONFIG_MAPPING",
         "`KeyError` {model_type} in transformers' `CONFIG_MAPPING`",
         "no", "a transformers release that knows the model type", context=r"CONFIG_MAPPING|configuration_auto\.py"),
    _sig("arch-not-supported", "unsupported-architecture",
         r"Model architectures? \[(?P<architecture>[^\]]{0,200}?)\] (?:are|is) not supported",
         "the model's architecture is not in this vLLM's model registry",
         "`Model architectures [{architecture}] are not supported`",
         "no", "a vLLM release that registers the architecture (or a model-registry plugin)"),
    _sig("registry-inspect-failed", "unsupported-architecture",
         r"Error in inspecting model architecture '(?P<architecture>[\w.]+)'",
         "vLLM's model registry could not inspect the architecture (its model module failed to import)",
         "`Error in inspecting model architecture` {architecture}",
         "unknown", "read the registry subprocess's own error; often a broken compiled extension"),
    # --- transformers API drift ---
    _sig("transformers-per-layer-attribute", "transformers-api-drift",
         r"AmbiguousGlobalPerLayerAttributeError(?::\s*'(?P<attribute>\w+)')?",
         "transformers' per-layer attribute access, which this vLLM does not follow",
         "`AmbiguousGlobalPerLayerAttributeError`: a per-layer config attribute read as a global one",
         "yes", "pin `transformers==5.14.1`", "transformers"),
    _sig("transformers-config-attribute", "transformers-api-drift",
         r"'(?P<config_class>\w*Config)' object has no attribute '(?P<attribute>\w+)'",
         "a config attribute vLLM or the model code reads is absent (removed or renamed in transformers)",
         "`AttributeError`: `{config_class}` has no attribute {attribute}",
         "yes", "a transformers release that still has the attribute, or a vLLM that reads the new name",
         "transformers"),
    _sig("transformers-import-name", "transformers-api-drift",
         r"cannot import name '(?P<name>\w+)' from '(?P<module>transformers[\w.]*)'",
         "a name imported from transformers was removed or moved",
         "`ImportError: cannot import name` {name} from {module}",
         "yes", "a transformers release that still exports the name", "transformers",
         window='harness window transformers --probe "from {module} import {name}"'),
    # --- compiled extensions ---
    _sig("undefined-symbol", "dependency-abi",
         r"(?P<so>[^\s'\"(]+\.so)[^\n]{0,40}?(?:undefined symbol|Symbol not found)|undefined symbol:|Symbol not found:",
         "a compiled extension does not match the library it is loaded against (ABI)",
         "`undefined symbol` in a compiled extension",
         "yes", "rebuild the extension against the installed torch, or pin the torch it was built for", "torch",
         window='harness window torch --probe "import {module}"'),
    _sig("missing-compiled-op", "dependency-abi",
         r"'_OpNamespace' '(?P<namespace>\w+)' object has no attribute '(?P<op>\w+)'",
         "a compiled op namespace lacks an op the Python side calls (binary from another build)",
         "`_OpNamespace` {namespace} has no op {op}",
         "yes", "install the matching binary build (same vLLM commit for its Python and compiled parts)"),
    _sig("extension-import-error", "dependency-abi",
         r"ImportError: (?:\S*/)?(?P<so>[\w.-]+\.so)\b",
         "a compiled extension failed to load",
         "`ImportError` of a compiled extension",
         "yes", "rebuild or reinstall the extension for the installed stack"),
    # --- dependency version windows ---
    _sig("cutlass-thrmma", "dependency-window",
         r"module 'cutlass\.cute\.core' has no attribute 'ThrMma'",
         "cutlass `ThrMma` relocation (nvidia-cutlass-dsl >= 4.6.0 moved it out of `cute.core`)",
         "`AttributeError: module 'cutlass.cute.core' has no attribute 'ThrMma'`",
         "yes", "pin `nvidia-cutlass-dsl==4.5.3`", "nvidia-cutlass-dsl",
         window='harness window nvidia-cutlass-dsl --probe "import cutlass.cute.core as c; c.ThrMma"'),
    _sig("flashinfer-ipcsocket", "distributed-init",
         r"module 'flashinfer\.comm\.mnnvl' has no attribute 'IpcSocket'",
         "flashinfer `IpcSocket` missing from `flashinfer.comm.mnnvl` (tp > 1)",
         "`AttributeError: module 'flashinfer.comm.mnnvl' has no attribute 'IpcSocket'`",
         "yes", "guard the `IpcSocket` access in the bench worker",
         window='harness window flashinfer-python --probe "import flashinfer.comm.mnnvl as m; m.IpcSocket"'),
    _sig("flashinfer-missing-attribute", "dependency-window",
         r"module '(?P<module>flashinfer[\w.]*)' has no attribute '(?P<attribute>\w+)'",
         "flashinfer lacks a name this vLLM calls: its version is outside the window this vLLM works with",
         "`AttributeError`: {module} has no attribute {attribute}",
         "yes", "pin the flashinfer release this vLLM was built against", "flashinfer-python",
         window='harness window flashinfer-python --probe "import {module} as m; m.{attribute}"'),
    _sig("package-version-mismatch", "dependency-window",
         r"(?P<package>[\w.-]+) version \((?P<have>[^)]+)\) does not match (?P<other>[\w.-]+) version \((?P<want>[^)]+)\)",
         "two packages that must be released together are installed at different versions",
         "{package} version does not match {other}",
         "yes", "install both at the same version", window='harness window {package} --release {want} '
                                                           '--probe "import {other_module}"'),
    _sig("requires-but-you-have", "dependency-window",
         r"(?P<dependent>[\w.-]+) [\w.+-]+ requires (?P<package>[\w.-]+)[^,]*(?:,[^,]*)*?, but you have "
         r"(?P=package) (?P<have>[\w.+-]+) which is incompatible",
         "an installed version is outside the range a package declares",
         "{dependent} requires {package} in another range than the installed {have}",
         "yes", "install a release inside the declared range",
         window='harness window {package} --probe "import {package_module}"'),
    # --- build steps ---
    _sig("ninja-build-failed", "jit-build",
         r"ninja: build stopped|Command '\['ninja'[^\]]*\]' returned non-zero|Error building extension",
         "a ninja build (JIT kernel or source build) failed",
         "`ninja: build stopped: subcommand failed`",
         "unknown", "read the compiler error above it; check CUDA_HOME, the compiler and TORCH_CUDA_ARCH_LIST"),
    _sig("nvcc-failed", "jit-build",
         r"\S*nvcc(?: --| -)[\w-]|nvcc fatal|nvcc error",
         "an nvcc compile step (JIT kernel build) failed",
         "`nvcc` compile step failed",
         "unknown", "check CUDA_HOME and the nvcc on PATH; clear the kernel cache"),
    # --- memory ---
    _sig("cuda-oom", "out-of-memory",
         r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError: CUDA|CUBLAS_STATUS_ALLOC_FAILED",
         "CUDA out of memory",
         "`torch.OutOfMemoryError: CUDA out of memory`",
         "yes", "lower gpu_memory_utilization / max_model_len or raise tp"),
    _sig("no-cache-blocks", "out-of-memory",
         r"No available memory for the cache blocks|Available KV cache memory: -\d"
         r"|Insufficient memory for KV cache|not enough KV cache",
         "no memory left for the KV cache after the model was loaded",
         "`No available memory for the cache blocks` / negative `Available KV cache memory`",
         "yes", "raise gpu_memory_utilization, lower max_model_len or raise tp"),
    _sig("kv-cache-too-small", "out-of-memory",
         r"larger than the maximum number of tokens that can be stored in KV cache"
         r"|KV cache is needed, which is larger than the available KV cache memory"
         r"|available_size\(\)=[\d.]+ < need_size=[\d.]+",
         "the KV cache cannot hold what the run needs",
         "KV cache smaller than the model's max length needs",
         "yes", "lower max_model_len or max_num_seqs, or give the KV cache more memory"),
    _sig("cpu-memory-utilization", "out-of-memory",
         r"Available memory on node \S+ .*?is less than desired CPU memory utilization",
         "CPU backend: free host memory below the requested share (`--gpu-memory-utilization`)",
         "`Available memory on node ... is less than desired CPU memory utilization`",
         "yes", "lower `gpu_memory_utilization` or free host memory"),
    # --- distributed ---
    _sig("nccl-watchdog", "distributed-init",
         r"Watchdog caught collective operation timeout",
         "an NCCL collective never completed (NCCL watchdog)",
         "`Watchdog caught collective operation timeout`",
         "unknown", "check the interconnect (NCCL_P2P_DISABLE, NCCL_DEBUG=INFO), tp size and driver"),
    _sig("nccl-error", "distributed-init",
         r"NCCL error|ncclCommInitRank failed|nccl(?:Internal|UnhandledCuda|System|Invalid)\w*Error",
         "NCCL communicator setup or a collective failed",
         "`NCCL error`",
         "unknown", "run with NCCL_DEBUG=INFO; check the GPUs' peer access and the NCCL version"),
    _sig("torch-distributed-init", "distributed-init",
         r"DistStoreError|DistNetworkError|The server socket has failed to listen|TCPStore\w* .*(?:failed|timed out)"
         r"|Default process group has not been initialized",
         "torch.distributed's process group could not be set up",
         "`torch.distributed` init failed",
         "unknown", "check the master address/port and that no stale process holds it"),
    # --- inputs ---
    _sig("whisper-inconsistent-shapes", "input-shape",
         r"input_features(?:\[[^\]]*\])? contains inconsistent shapes",
         "audio longer than Whisper's 30 s window is not truncated to 3000 mel frames",
         "`input_features contains inconsistent shapes`",
         "yes", "clamp audio to 30 s in the workload"),
    _sig("mm-input-shape", "input-shape",
         r"(?:pixel[ _]values|image_embeds|image_grid_thw|video|audio|input_features)\S* (?:dim\[\d+\] expected"
         r"|should be \d+D|should have shape|has shape .* expected|contains inconsistent shapes)"
         r"|TensorSchema.*(?:mismatch|expected)|(?:Expected|expected) shape .* (?:but )?got",
         "a multimodal input's tensor shape or schema was rejected",
         "multimodal input shape rejected",
         "yes", "make the workload's inputs match the model's processor (size, frames, dims)"),
    # --- quantization ---
    _sig("moe-quant-scheme-refused", "quantization-refused",
         r"does not support quantization scheme",
         "the forced MoE backend does not support the model's quantization scheme (a legitimate refusal)",
         "backend refuses the quantization scheme",
         "no", "choose a backend that supports the scheme"),
    _sig("quant-gpu-capability", "quantization-refused",
         r"quantization method (?P<method>\w+) is not supported for the current GPU",
         "the GPU is below the quantization method's minimum compute capability",
         "`The quantization method {method} is not supported for the current GPU`",
         "no", "a GPU with the required capability, or a checkpoint in another scheme"),
    _sig("quant-unsupported", "quantization-refused",
         r"Unknown quantization method|quantization (?:method|scheme) \S+ is not supported"
         r"|does not support (?:the )?quantization",
         "this backend does not support the checkpoint's quantization",
         "quantization not supported by this backend",
         "no", "a backend or release that supports the scheme"),
    # --- waits ---
    _sig("engine-timeout", "timeout",
         r"^(?:\w+\.)*TimeoutError(?::.*)?$|Timed out waiting for engine|ENGINE_ITERATION_TIMEOUT",
         "a vLLM-level wait ran out (engine startup or an engine iteration)",
         "`TimeoutError`",
         "unknown", "raise vLLM's timeout (VLLM_ENGINE_ITERATION_TIMEOUT_S) or find what hangs"),
    _sig("timeout", "timeout",
         r"^timed out after \d+",
         "the run exceeded its timeout",
         "timed out",
         "unknown", "raise the timeout, or find what hangs", weak=True),
    # --- signals ---
    _sig("killed", "killed",
         r"^Killed$|killed by signal (?P<signal>9|15)\b|Killed process \d+|oom-kill|died, exit code: -9\b",
         "the process was killed by a signal (often the host's OOM killer)",
         "killed by a signal",
         "unknown", "check the host's memory (dmesg: oom-kill) and the run's limits", weak=True),
    _sig("signal", "killed",
         r"killed by signal (?P<signal>\d+)",
         "the process ended on a signal",
         "killed by signal {signal}",
         "unknown", "look for a crash (core dump, dmesg) or an outside kill", weak=True),
)

UNKNOWN = "unknown"
_BY_ID = {s.id: s for s in CATALOGUE}
assert all(s.klass in FAILURE_CLASSES for s in CATALOGUE)


def signature(sig_id: str) -> Signature | None:
    return _BY_ID.get(sig_id)


def failure_class(sig_id: str | None) -> str:
    """The class of a signature id ("unknown" for unknown or missing ids)."""
    sig = _BY_ID.get(sig_id or "")
    return sig.klass if sig else UNKNOWN


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
    window: str = ""           # for a dependency problem: the `harness window` command that tests it
    found: str = ""            # for "unknown": what was found instead of a cause
    diagnosed: bool = False    # the evidence comes from the DEBUG re-run (diagnosis/)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["class"] = d.pop("klass")
        return d


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
                       diagnosed=source == "diagnosis")


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
                           error=f.reason if f and f.reason else "timed out", source="status", klass=sig.klass)
    return _unknown(f, log_text, diagnosis_log)


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
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise UserError(f"{path}: unreadable ({e.strerror})") from None


def explain(source: Path | str) -> Attribution:
    """Attribute any vLLM log: a harness run folder (its results.json, run.log and diagnosis/), a
    results.json, a log file (a Path), or a pasted excerpt (a str)."""
    if isinstance(source, str):
        return attribute(None, source)
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
    log = _read(run_dir / "run.log") if (run_dir / "run.log").is_file() else None
    diag = run_dir / "diagnosis" / "run.log"
    diag_log = _read(diag) if diag.is_file() else None
    if rec is None and log is None:
        raise UserError(f"{run_dir}: neither results.json nor run.log (not a run folder)")
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
    out = [f"{name}: {att.klass} (signature {att.signature})",
           f"  evidence:   {att.error}"]
    if att.signature == UNKNOWN:
        out.append(f"  found:      {att.found}")
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


def explain_main(sources: list[str], *, as_json: bool, stdin: Any = None) -> str:
    """`harness explain` on its arguments: "-" reads an excerpt from stdin."""
    results = []
    for s in sources:
        att = explain((stdin or sys.stdin).read()) if s == "-" else explain(Path(s))
        results.append((s, att))
    if as_json:
        return "\n".join(json.dumps({"log": s} | a.to_json()) for s, a in results) + "\n"
    return "".join(explain_text(a, s) for s, a in results)


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
                "root cause": f"{chr(ord('A') + i)} · {root}", "class": failure_class(sig_id), "models": len(models),
                "model names": ", ".join(f"`{m}`" for m in models), "error": error, "fixable?": fixable,
                "evidence": "; ".join(f"{n} model{'s' if n != 1 else ''}: {e}" for e, n in ev.items()),
            })
    return pd.DataFrame(rows, columns=cols)


def _model_order(ds: Dataset) -> dict[str, int]:
    return {m: i for i, m in enumerate(ds.model_order())}
