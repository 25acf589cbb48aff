"""Profiled runs and the prefill/decode split, on the worker's side (standard library; torch only
through vLLM's own profiler hooks).

Profiling: the arm's `profile` (or `harness sweep --profile`) reaches the worker as HARNESS_PROFILE
(JSON: iterations, max_steps, max_trace_mb). The engine is built with vLLM's `profiler_config`
(the torch profiler: CPU activities on a CPU leg, CUDA kernels on a GPU; no stacks, no shapes, so
the trace stays small), and the first `iterations` generate() calls of the timed region run between
`LLM.start_profile()` and `LLM.stop_profile()`, a few timed iterations rather than the whole region.
`max_steps` caps the engine steps the profiler records (vLLM's `max_iterations`) and `max_trace_mb`
the compressed trace kept; a trace over it is summarised, then deleted, and the summary says so.

What a profiled run leaves in its run directory:
  profile/*.pt.trace.json.gz   the torch profiler's trace (Chrome trace format, gzip)
  profile.json                 PROFILE_VERSION, settings, the profiled calls' seconds and output
                               tokens, the trace's name and size, and the summary (operators by self
                               time, with call counts and families)
  profile.md                   that summary as a table

Every run also leaves `requests.json`: per request of the first timed pass, time to first token and
time per output token from vLLM's own request stats (`RequestOutput.metrics`, present when the
engine keeps stats), and the run's decode share (decode time over request time, medians).

Format history (PROFILE_VERSION, REQUESTS_VERSION):
  1 - first version.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PROFILE_VERSION = 1
REQUESTS_VERSION = 1
ENV = "HARNESS_PROFILE"
TRACE_DIR = "profile"
TOP = 500           # operators kept in a run's summary, by self time (the rest: `ops_left_out`)

# Families, first match wins; the order puts the specific names before the generic ones
# (a fused MoE GEMM is MoE, an attention softmax is attention, a sampler's softmax is sampling).
FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((name, re.compile(rx, re.I)) for name, rx in (
    ("communication", r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_to_all|broadcast|gloo|shm_|custom_ar|"
                      r"send|recv|barrier"),
    ("MoE", r"moe|expert|topk_softmax|grouped_topk|permute_?tokens|align_block"),
    ("attention", r"attn|attention|flash|paged|sdpa|scaled_dot_product|mha|rotary|rope|kv_?cache|"
                  r"reshape_and_cache|cpu_attention|varlen"),
    ("sampling", r"sampl|top_?k|top_?p|multinomial|argmax|softmax|gumbel|exponential_|sort|logits|penalt"),
    ("GEMM", r"(^|[^a-z])(mm|bmm|addmm|matmul|linear|gemm|gemv|dot)([^a-z]|$)|gemm|cutlass|cublas|onednn|"
             r"mkldnn|dnnl|brgemm|sgemm|wgmma|nvjet|_mm_|mm_"),
    ("memcpy", r"memcpy|memset|copy_|_to_copy|aten::to$|clone|contiguous|pin_memory|h2d|d2h|dtoh|htod"),
    # Inductor's compiled code on the CPU: the graph's own (fused pointwise, normalisation, rotary) kernels;
    # the GEMMs and attention it calls are operators of their own, nested in it, so not in its self time.
    ("elementwise", r"compiledfxgraph|triton_(poi|per|red)|add|mul|sub|div|silu|gelu|relu|norm|exp|pow|rsqrt|mean|"
                    r"sum|fill|zero|where|sigmoid|tanh|act_and_mul|elementwise|vectorized|reduce|cat|index|gather|"
                    r"scatter|embedding|slice|view|reshape|select|empty|arange|clamp|cumsum|masked|"
                    r"aten::(neg|max|min|eq|ne|lt|gt|le|ge|abs|sqrt|any|all|unsqueeze|squeeze|t|as_strided|"
                    r"resize_|expand|narrow|split|stack|flatten|permute|transpose|repeat)$"),
))
# Names that carry a per-build hash (Inductor's compiled graphs): one name on every leg.
_HASHED = re.compile(r"(CompiledFxGraph) \S+")
FAMILY_NAMES = ("attention", "GEMM", "MoE", "communication", "sampling", "elementwise", "memcpy", "other")
OUTSIDE = "(outside operators)"   # the profiled span no operator covers: Python, scheduling, waiting


def op_name(name: str) -> str:
    return _HASHED.sub(r"\1", name)


def family(name: str) -> str:
    for fam, rx in FAMILIES:
        if rx.search(name):
            return fam
    return "other"


# --- settings ---------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Settings:
    iterations: int = 3          # timed generate() calls profiled
    max_steps: int = 256         # engine steps the profiler records at most
    max_trace_mb: float = 32.0   # compressed trace kept at most


def settings_from_env(environ: dict[str, str] | None = None) -> Settings | None:
    raw = (os.environ if environ is None else environ).get(ENV)
    if not raw:
        return None
    data = json.loads(raw)
    return Settings(**{k: v for k, v in data.items() if k in Settings.__dataclass_fields__})


def engine_kwargs(s: Settings, trace_dir: Path) -> dict[str, Any]:
    """vLLM's own profiler, configured for a small trace of the profiled calls only."""
    trace_dir.mkdir(parents=True, exist_ok=True)
    return {"profiler_config": {
        "profiler": "torch", "torch_profiler_dir": str(trace_dir.resolve()),
        "torch_profiler_with_stack": False, "torch_profiler_record_shapes": False,
        "torch_profiler_with_memory": False, "torch_profiler_use_gzip": True,
        # The key-averages table vLLM can print would land in the run's log; the summary replaces it.
        "torch_profiler_dump_cuda_time_total": False, "max_iterations": s.max_steps,
    }}


# --- the trace's summary ------------------------------------------------------------------------

@dataclass(kw_only=True)
class Op:
    name: str
    family: str
    self_s: float
    calls: int
    share: float = 0.0           # of the profiled time


@dataclass(kw_only=True)
class Summary:
    device: str                  # "cpu": CPU operators; "cuda": GPU kernels and copies
    profiled_s: float            # what the shares are of: the span on the CPU, kernel time on a GPU
    op_s: float                  # time inside operators / kernels
    steps: int | None            # engine steps seen in the trace (None: not recognisable)
    ops: list[Op] = field(default_factory=list)              # top operators by self time
    ops_left_out: int = 0                                    # operators beyond TOP (in `families` still)
    families: dict[str, float] = field(default_factory=dict)  # seconds per family, every operator counted
    family_calls: dict[str, int] = field(default_factory=dict)


_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
_STEP = re.compile(r"execute_model|model_runner|ModelRunner|engine_core_step|_step$", re.I)


def read_trace(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    return data.get("traceEvents", []) if isinstance(data, dict) else data


def summarize(events: list[dict], *, top: int = TOP) -> Summary:
    """Self time per operator (GPU kernels where the trace has them, else CPU operators), grouped
    into families, with the share of the profiled time each takes."""
    spans = [e for e in events if e.get("ph") == "X" and isinstance(e.get("dur"), (int, float))]
    gpu = [e for e in spans if e.get("cat") in _GPU_CATS]
    by_name: dict[str, list[float]] = {}
    if gpu:
        device = "cuda"
        for e in gpu:
            by_name.setdefault(op_name(str(e["name"])), []).append(e["dur"] / 1e6)
        op_s = sum(sum(v) for v in by_name.values())
        profiled = op_s
    else:
        device = "cpu"
        ops = [e for e in spans if e.get("cat") == "cpu_op"]
        threads: dict[tuple, list[dict]] = {}
        for e in ops:
            threads.setdefault((e.get("pid"), e.get("tid")), []).append(e)
        top_level = 0.0
        for evs in threads.values():
            evs.sort(key=lambda e: (e["ts"], -e["dur"]))
            stack: list[list] = []          # [end, name, child time]
            for e in evs:
                start, end = e["ts"], e["ts"] + e["dur"]
                while stack and stack[-1][0] <= start:
                    _close(stack.pop(), by_name)
                if stack:
                    stack[-1][2] += e["dur"]
                else:
                    top_level += e["dur"]
                stack.append([end, e, 0.0])
            while stack:
                _close(stack.pop(), by_name)
        op_s = sum(sum(v) for v in by_name.values())
        # The span of the busiest thread: the operators' time plus what no operator covers there.
        main = max(threads.values(), key=lambda evs: sum(e["dur"] for e in evs), default=[])
        span = (max(e["ts"] + e["dur"] for e in main) - min(e["ts"] for e in main)) / 1e6 if main else 0.0
        main_top = _union(main) / 1e6
        outside = max(span - main_top, 0.0)
        if outside > 0:
            by_name[OUTSIDE] = [outside]
        profiled = op_s + outside
    steps = sum(1 for e in spans if e.get("cat") in ("user_annotation", "python_function")
                and _STEP.search(str(e.get("name", "")))) or None
    rows = [Op(name=n, family="other" if n == OUTSIDE else family(n), self_s=sum(v), calls=len(v))
            for n, v in by_name.items()]
    rows.sort(key=lambda o: -o.self_s)
    fams = {f: 0.0 for f in FAMILY_NAMES}
    calls = {f: 0 for f in FAMILY_NAMES}
    for o in rows:
        o.share = o.self_s / profiled if profiled else 0.0
        fams[o.family] += o.self_s
        calls[o.family] += o.calls
    return Summary(device=device, profiled_s=profiled, op_s=op_s, steps=steps, ops=rows[:top],
                   ops_left_out=max(len(rows) - top, 0), families=fams, family_calls=calls)


def _close(frame: list, by_name: dict[str, list[float]]) -> None:
    _, e, child = frame
    by_name.setdefault(op_name(str(e["name"])), []).append(max(e["dur"] - child, 0.0) / 1e6)


def _union(evs: list[dict]) -> float:
    total, end = 0.0, None
    for e in sorted(evs, key=lambda e: e["ts"]):
        s, t = e["ts"], e["ts"] + e["dur"]
        if end is None or s > end:
            total += t - s
            end = t
        elif t > end:
            total += t - end
            end = t
    return total


def summary_md(summary: dict) -> str:
    """The run's summary as a markdown table (profile.md)."""
    tok = summary.get("output_tokens") or 0
    s = summary["summary"]
    lines = [f"# Profile: {summary.get('run_id', '')}", "",
             f"{s['device']} operators, {summary['calls']} profiled generate() call(s), "
             f"{tok:,} output tokens, profiled {s['profiled_s']:.3f} s"
             + (f", {s['steps']} engine steps" if s.get("steps") else "") + ".", "",
             "| family | self s | share | calls |", "|---|---:|---:|---:|"]
    for f in FAMILY_NAMES:
        if s["families"].get(f):
            share = s["families"][f] / s["profiled_s"] if s["profiled_s"] else 0.0
            lines.append(f"| {f} | {s['families'][f]:.4f} | {share:.1%} | {s['family_calls'][f]:,} |")
    lines += ["", "| operator | family | self s | share | calls |", "|---|---|---:|---:|---:|"]
    for o in s["ops"][:40]:
        name = o["name"].replace("|", "\\|")
        lines.append(f"| `{name}` | {o['family']} | {o['self_s']:.4f} | {o['share']:.1%} | {o['calls']:,} |")
    return "\n".join(lines) + "\n"


# --- the worker's hooks -------------------------------------------------------------------------

class Profiler:
    """Profiles the first `iterations` timed generate() calls of each workload."""

    def __init__(self, s: Settings, trace_dir: Path):
        self.s, self.trace_dir = s, trace_dir
        self.calls, self.seconds, self.output_tokens = 0, 0.0, 0
        self.active = False
        self.before: set[Path] = set()

    def reset(self) -> None:
        self.calls, self.seconds, self.output_tokens = 0, 0.0, 0

    def wants(self) -> bool:
        return self.calls < self.s.iterations

    def start(self, llm) -> None:
        self.before = set(self.trace_dir.glob("*"))
        llm.start_profile()
        self.active = True

    def counted(self, seconds: float, output_tokens: int) -> None:
        self.calls += 1
        self.seconds += seconds
        self.output_tokens += output_tokens

    def stop(self, llm, run_dir: Path, run_id: str = "") -> dict | None:
        """Stop the profiler, move its trace into the run's folder, summarise it."""
        if not self.active:
            return None
        t0 = time.perf_counter()
        llm.stop_profile()
        self.active = False
        new = sorted(p for p in _wait_for_traces(self.trace_dir, self.before) if p.is_file())
        dest = run_dir / TRACE_DIR
        dest.mkdir(parents=True, exist_ok=True)
        traces = []
        for p in new:
            target = dest / p.name
            if p.resolve() != target.resolve():
                os.replace(p, target)
            traces.append(target)
        try:
            return write_profile(run_dir, traces, settings=self.s, calls=self.calls, seconds=self.seconds,
                                 output_tokens=self.output_tokens, run_id=run_id,
                                 export_s=time.perf_counter() - t0, trace_dir=self.trace_dir)
        except (OSError, ValueError, KeyError, TypeError) as e:
            # A trace that cannot be summarised costs the summary, never the run's measurement.
            out = {"schema_version": PROFILE_VERSION, "run_id": run_id, "settings": asdict(self.s),
                   "calls": self.calls, "seconds": self.seconds, "output_tokens": self.output_tokens,
                   "traces": [str(t.relative_to(run_dir)) for t in traces], "error": f"{type(e).__name__}: {e}"}
            (run_dir / "profile.json").write_text(json.dumps(out, indent=2))
            return out


def write_profile(run_dir: Path, traces: list[Path], *, settings: Settings, calls: int, seconds: float,
                  output_tokens: int, run_id: str = "", export_s: float | None = None,
                  trace_dir: Path | None = None) -> dict:
    """profile.json and profile.md of a run from its trace files (already in the run's folder)."""
    out: dict[str, Any] = {"schema_version": PROFILE_VERSION, "run_id": run_id, "settings": asdict(settings),
                           "calls": calls, "seconds": seconds, "output_tokens": output_tokens,
                           "export_s": export_s, "traces": [], "trace_bytes": 0, "trace_dropped": False}
    trace_files = [t for t in traces if ".pt.trace.json" in t.name]
    if not trace_files:
        out["error"] = f"the profiler wrote no trace into {trace_dir or run_dir}"
        (run_dir / "profile.json").write_text(json.dumps(out, indent=2))
        return out
    events: list[dict] = []
    for t in trace_files:
        events += read_trace(t)
    s = summarize(events)
    out["summary"] = asdict(s)
    out["steps_capped"] = bool(s.steps and s.steps >= settings.max_steps)
    size = sum(t.stat().st_size for t in traces)
    out["trace_bytes"] = size
    out["traces"] = [str(t.relative_to(run_dir)) for t in traces]
    if size > settings.max_trace_mb * 1e6:
        for t in traces:
            t.unlink()
        out["trace_dropped"] = True
        out["traces"] = []
    (run_dir / "profile.json").write_text(json.dumps(out, indent=2))
    (run_dir / "profile.md").write_text(summary_md(out))
    return out


def _wait_for_traces(d: Path, before: set[Path], timeout_s: float = 120.0) -> list[Path]:
    """The trace files the engine's process wrote after stop_profile() (it may still be writing)."""
    deadline = time.monotonic() + timeout_s
    seen: dict[Path, int] = {}
    while True:
        new = [p for p in d.glob("*") if p not in before and not p.name.endswith(".tmp")]
        sizes = {p: p.stat().st_size for p in new if p.exists()}
        if new and sizes == seen:
            return new
        if time.monotonic() > deadline:
            return new
        seen = sizes
        time.sleep(0.5)


# --- the prefill/decode split -------------------------------------------------------------------

def request_times(outputs: list) -> list[dict]:
    """Per request, from vLLM's request stats (absent when the engine keeps no stats): queue time,
    time to first token (the frontend's clock), decode time and time per output token (the engine
    core's clock, first to last token)."""
    rows = []
    for o in outputs:
        m = getattr(o, "metrics", None)
        if m is None:
            continue
        n = int(getattr(m, "num_generation_tokens", 0) or len(o.outputs[0].token_ids))
        ttft = getattr(m, "first_token_latency", None)
        first, last = getattr(m, "first_token_ts", 0.0), getattr(m, "last_token_ts", 0.0)
        queued, sched = getattr(m, "queued_ts", 0.0), getattr(m, "scheduled_ts", 0.0)
        if not ttft or not first or not last:
            continue
        decode = max(last - first, 0.0)
        rows.append({"ttft_s": ttft, "decode_s": decode, "tpot_s": decode / (n - 1) if n > 1 else None,
                     "queue_s": max(sched - queued, 0.0) if queued and sched else None,
                     "prefill_s": max(first - sched, 0.0) if sched else None, "output_tokens": n})
    return rows


def split(rows: list[dict]) -> dict[str, Any] | None:
    """The run's prefill/decode split: medians over requests, and the decode share: decode time over
    (time to first token + decode time), per request, median."""
    if not rows:
        return None
    shares = [r["decode_s"] / (r["ttft_s"] + r["decode_s"]) for r in rows if r["ttft_s"] + r["decode_s"] > 0]
    tpot = [r["tpot_s"] for r in rows if r["tpot_s"] is not None]
    return {"requests": len(rows), "ttft_s": statistics.median(r["ttft_s"] for r in rows),
            "tpot_s": statistics.median(tpot) if tpot else None,
            "decode_s": statistics.median(r["decode_s"] for r in rows),
            "decode_share": statistics.median(shares) if shares else None,
            "source": "vllm request stats (RequestOutput.metrics)"}


def write_requests(run_dir: Path, outputs: list, *, stats_on: bool) -> dict | None:
    rows = request_times(outputs)
    out = {"schema_version": REQUESTS_VERSION, "stats_on": stats_on, "split": split(rows), "requests": rows}
    (run_dir / "requests.json").write_text(json.dumps(out))
    return out["split"]
