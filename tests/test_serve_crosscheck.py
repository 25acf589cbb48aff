"""serve-crosscheck mechanics with FAKES only: a FAKE server (the serve tests' streaming stub, in this
process, with a /health) stands in for the leg's api_server, and a FAKE `vllm bench serve` (a small
script run as a subprocess, given the real command line) writes a result JSON shaped like vLLM's. The
real comparison needs real servers: see results/cpu-serve/serve-crosscheck.md once measured."""

from __future__ import annotations

import json
import statistics
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from harness import cli
from harness.core.errors import UserError
from harness.experiments import serve_crosscheck as sxc
from harness.measure.run import emit
from harness.measure.sweep import SweepArgs
from tests.conftest import write_scenario
from tests.test_serve import _Stub

SCENARIO = """
name: t
legs: [cpu-0.32.0]
repeats: 2
models:
  - {name: m, path: tiny}
workloads:
  - {name: srv, kind: serve, input_len: 8, output_len: 4, concurrency: [1, 2], num_prompts: 4,
     warmup_requests: 1, seed: 0}
  - {name: thr, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}
"""

# FAKE `vllm bench serve`: parses the flags the real one is given (an unknown flag fails, as vLLM's
# parser would), checks the server's /health at --base-url, logs its argv, then writes vLLM's result
# keys with known numbers: output tok/s 1000 x concurrency + the call's number, median TPOT 5 + it.
FAKE_VLLM_BENCH = '''
import argparse, json, pathlib, sys, urllib.request
CALLS, FAIL_AT = pathlib.Path({calls!r}), {fail_at!r}
p = argparse.ArgumentParser(allow_abbrev=False)
for f in ("--backend", "--base-url", "--endpoint", "--model", "--served-model-name", "--tokenizer", "--dataset-name",
          "--random-input-len", "--random-output-len", "--random-range-ratio", "--num-prompts", "--max-concurrency",
          "--request-rate", "--temperature", "--seed", "--percentile-metrics", "--metric-percentiles",
          "--result-dir", "--result-filename"):
    p.add_argument(f, required=True)
for f in ("--ignore-eos", "--disable-tqdm", "--save-result"):
    p.add_argument(f, action="store_true")
a = p.parse_args()
c = int(a.max_concurrency)
if c == FAIL_AT:
    print("Starting main benchmark run...")
    print("Traceback (most recent call last):", file=sys.stderr)
    print('  File "serve.py", line 1, in main', file=sys.stderr)
    print("RuntimeError: fake bench failed on purpose", file=sys.stderr)
    sys.exit(1)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))
with opener.open(a.base_url + "/health", timeout=5) as r:
    assert r.status == 200
n = len(CALLS.read_text().splitlines()) if CALLS.exists() else 0
with CALLS.open("a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
k = int(a.num_prompts)
res = {{"backend": a.backend, "num_prompts": k, "completed": k, "failed": 0, "duration": 1.0,
       "total_input_tokens": k * int(a.random_input_len), "total_output_tokens": k * int(a.random_output_len),
       "request_throughput": 2.0 * c, "output_throughput": 1000.0 * c + n,
       "mean_ttft_ms": 21.0, "median_ttft_ms": 20.0, "p90_ttft_ms": 25.0, "p99_ttft_ms": 30.0,
       "mean_tpot_ms": 5.0, "median_tpot_ms": 5.0 + n, "p99_tpot_ms": 9.0,
       "mean_itl_ms": 5.0, "median_itl_ms": 5.0, "p99_itl_ms": 9.0}}
pathlib.Path(a.result_dir, a.result_filename).write_text(json.dumps(res))
'''


class _HealthyStub(_Stub):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()


class FakeServer:
    """FAKE of harness.measure.serve.Server: the serve tests' stub in a thread instead of vLLM's
    api_server; it states a prompt vocabulary (12 ids: never the stub's failing id 13) as the real
    server's worker does. `fail`: it never becomes healthy, with a cause in its log."""
    fail = False
    made: list[FakeServer] = []

    def __init__(self, spec, run_dir: Path, env: dict[str, str]) -> None:
        self.run_dir, self.starts, self.stops = run_dir, 0, 0
        self.port: int | None = None
        self._srv: ThreadingHTTPServer | None = None
        FakeServer.made.append(self)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float):
        self.stop()
        self.starts += 1
        if self.fail:
            (self.run_dir / "run.log").write_text("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                                                  "ValueError: fake engine refused to start\n")
            return "server exited with code 1 before it was healthy", 0.1
        emit(self.run_dir, "prompt_vocab", size=12, source="fake")
        self._srv = ThreadingHTTPServer(("127.0.0.1", 0), _HealthyStub)
        self.port = self._srv.server_address[1]
        threading.Thread(target=self._srv.serve_forever, daemon=True).start()
        return None, 0.01

    def alive(self) -> bool:
        return self._srv is not None

    def settle(self, timeout_s: float) -> None:
        pass  # a thread, not a process: nothing to reap

    def exit_reason(self) -> str:
        return "server stopped answering"

    def stop(self) -> None:
        if self._srv is not None:
            self._srv.shutdown()
            self._srv.server_close()
            self.stops += 1
        self._srv = None


@pytest.fixture
def fakes(tmp_path, fake_sweep, monkeypatch):
    """The FAKE server and FAKE vLLM bench wired in through the module's own defaults, so that the CLI
    verb runs them too. Returns (scenario path, calls log, a function writing the fake bench)."""
    FakeServer.made, FakeServer.fail = [], False
    monkeypatch.setattr(sxc, "Server", FakeServer)
    calls = tmp_path / "calls.jsonl"

    def bench(fail_at: int | None = None) -> None:
        script = tmp_path / "fake_vllm_bench.py"
        script.write_text(FAKE_VLLM_BENCH.format(calls=str(calls), fail_at=fail_at))
        monkeypatch.setattr(sxc, "vllm_bench_prefix", lambda spec: [sys.executable, str(script)])

    bench()
    return write_scenario(tmp_path, SCENARIO), calls, bench


def _argv(line: str) -> dict[str, str | bool]:
    args = json.loads(line)
    out: dict[str, str | bool] = {}
    for i, a in enumerate(args):
        if a.startswith("--"):
            nxt = args[i + 1] if i + 1 < len(args) else None
            out[a] = nxt if nxt is not None and not nxt.startswith("--") else True
    return out


def test_fake_server_and_fake_bench_pair_every_point_with_alternating_order(tmp_path, fakes):
    scenario, calls, _ = fakes
    res = sxc.serve_crosscheck(SweepArgs(scenario=str(scenario), results=tmp_path / "r"))
    (rec,) = res.records
    assert (rec.leg, rec.model, rec.workload) == ("cpu-0.32.0", "m", "srv")     # the throughput workload is not served
    assert res.files == [tmp_path / "r" / "t" / "serve-crosscheck" / "cpu-0.32.0--m--srv.json"]
    assert sxc.read(res.files[0]) == rec
    # One server per repeat, stopped after it.
    assert [(s.starts, s.stops) for s in FakeServer.made] == [(1, 1), (1, 1)]
    assert [[(x.concurrency, x.first) for x in r.points] for r in rec.repeats] == \
        [[(1, "harness"), (2, "vllm")], [(1, "vllm"), (2, "harness")]]
    assert all(x.harness.status == "ok" and x.vllm.status == "ok" for r in rec.repeats for x in r.points)
    # vLLM's command line: the point's concurrency, seed and the workload's lengths, against the live server.
    argvs = [_argv(line) for line in calls.read_text().splitlines()]
    assert [(a["--max-concurrency"], a["--seed"]) for a in argvs] == [("1", "1000"), ("2", "2000")] * 2
    for a in argvs:
        assert a["--num-prompts"] == "4" and a["--random-input-len"] == "8" and a["--random-output-len"] == "4"
        assert a["--request-rate"] == "inf" and a["--ignore-eos"] is True and a["--temperature"] == "0"
        assert a["--served-model-name"] == "m" and a["--dataset-name"] == "random" and a["--backend"] == "vllm"
    # vLLM's raw JSON is kept beside the server's log, per point.
    p0 = rec.repeats[0].points[0]
    raw = json.loads((tmp_path / "r" / "t" / p0.vllm.raw).read_text())
    assert raw["output_throughput"] == 1000.0 and p0.vllm.output_tok_s == 1000.0 and p0.vllm.tpot_ms.p50 == 5.0
    assert p0.harness.metrics.completed == 4 and p0.harness.metrics.output_tokens == 16
    # The ratios: harness ÷ vLLM of the medians, the rule's interval with two repeats per side.
    c1, c2 = rec.summary
    assert c1.output_tok_s.vllm == [1000.0, 1002.0] and c2.output_tok_s.vllm == [2001.0, 2003.0]
    h = [r.points[0].harness.metrics.output_tok_s for r in rec.repeats]
    assert c1.output_tok_s.harness == h
    assert c1.output_tok_s.ratio == pytest.approx(statistics.median(h) / 1001.0)
    assert c1.output_tok_s.ci_low is not None and c1.output_tok_s.verdict != "single pass"
    tpot = [r.points[0].harness.metrics.tpot_ms.p50 for r in rec.repeats]
    assert c1.tpot_p50_ms.vllm == [5.0, 7.0]
    assert c1.tpot_p50_ms.ratio == pytest.approx(statistics.median(tpot) / 6.0)
    assert c1.band == "below" and c1.excluded == []   # the stub streams about 100 tok/s, not 1000
    md = res.view.read_text()
    assert res.view == tmp_path / "r" / "t" / "serve-crosscheck.md"
    assert "| cpu-0.32.0 | `m` | srv | c=1 rate=inf | 2 / 2 |" in md and "different token ids" in md
    assert f"{c1.output_tok_s.ratio:.3f} [{c1.output_tok_s.ci_low:.3f}, {c1.output_tok_s.ci_high:.3f}]" in md


def test_fake_bench_exit_1_is_recorded_with_its_output_tail_through_the_cli(tmp_path, fakes, capsys):
    scenario, calls, bench = fakes
    bench(fail_at=2)
    rc = cli.main(["check", "serve", str(scenario), "--results", str(tmp_path / "r")])
    out, err = capsys.readouterr()
    assert rc == 0 and "Traceback" not in err
    rec = sxc.read(tmp_path / "r" / "t" / "serve-crosscheck" / "cpu-0.32.0--m--srv.json")
    (rep,) = rec.repeats                                           # --repeats defaults to 1
    ok, bad = rep.points
    assert ok.vllm.status == "ok" and bad.harness.status == "ok"   # the harness side is measured regardless
    assert bad.vllm.status == "failed" and bad.vllm.exit_code == 1
    assert bad.vllm.reason == "vLLM's serve benchmark exited with code 1: RuntimeError: fake bench failed on purpose"
    assert bad.vllm.output_tail[-1] == "RuntimeError: fake bench failed on purpose"
    assert rep.status == "failed" and FakeServer.made[0].stops == 1
    c1, c2 = rec.summary
    assert c1.output_tok_s.verdict == "single pass" and c1.output_tok_s.ratio is not None
    assert c2.output_tok_s.vllm == [] and c2.output_tok_s.ratio is None and c2.output_tok_s.verdict == "missing"
    assert c2.excluded == [f"r1 vLLM: {bad.vllm.reason}"]
    assert "(single pass)" in out and "c=2 rate=inf r1 vLLM: vLLM's serve benchmark exited with code 1" in out
    assert len(calls.read_text().splitlines()) == 1                # only the point that succeeded logged itself


def test_fake_server_that_never_starts_fails_every_point_with_its_cause(tmp_path, fakes):
    scenario, calls, _ = fakes
    FakeServer.fail = True
    (rec,) = sxc.serve_crosscheck(SweepArgs(scenario=str(scenario), results=tmp_path / "r", repeats=1)).records
    (rep,) = rec.repeats
    assert rep.status == "failed"
    assert rep.reason == "server exited with code 1 before it was healthy: ValueError: fake engine refused to start"
    assert [x.harness.status for x in rep.points] == [x.vllm.status for x in rep.points] == ["failed", "failed"]
    assert all(x.vllm.reason.startswith("server not started: server exited") for x in rep.points)
    assert not calls.exists()                                      # vLLM's benchmark never ran
    assert all(s.output_tok_s.ratio is None for s in rec.summary)


def test_scenario_without_a_serve_workload_is_one_line(tmp_path, fakes):
    path = write_scenario(tmp_path, SCENARIO.replace("kind: serve", "kind: latency").replace(
        ", concurrency: [1, 2], num_prompts: 4,\n     warmup_requests: 1, seed: 0", ""), name="noserve")
    with pytest.raises(UserError, match="no serve workload with a default arm"):
        sxc.serve_crosscheck(SweepArgs(scenario=str(path), results=tmp_path / "r"))
    assert cli.main(["check", "serve", str(path), "--results", str(tmp_path / "r"), "--repeats", "0"]) == 2


def test_a_crosscheck_refused_by_a_busy_node_writes_nothing(tmp_path, fakes):
    # Another sweep measures (it holds the node lock): the crosscheck is refused in one line and leaves no
    # study.yaml behind, so the folder is not made a study by a command that measured nothing.
    from harness.core.errors import NodeBusyError
    from harness.measure import guard

    scenario, calls, _ = fakes
    with guard.node_lock():
        with pytest.raises(NodeBusyError):
            sxc.serve_crosscheck(SweepArgs(scenario=str(scenario), results=tmp_path / "r", repeats=1))
    assert not list((tmp_path / "r").rglob("study.yaml")) and not calls.exists()


def test_vllm_metrics_reads_vllms_result_keys():
    m = sxc.vllm_metrics({"num_prompts": 32, "completed": 31, "failed": 1, "duration": 2.0, "output_throughput": 992.0,
                          "request_throughput": 15.5, "median_ttft_ms": 12.0, "p99_ttft_ms": 40.0,
                          "mean_tpot_ms": float("nan"), "median_tpot_ms": 3.0, "median_itl_ms": 2.5})
    assert (m["requests"], m["completed"], m["failed"]) == (32, 31, 1)
    assert (m["output_tok_s"], m["requests_per_s"]) == (992.0, 15.5)
    assert m["ttft_ms"].p50 == 12.0 and m["ttft_ms"].p99 == 40.0 and m["tpot_ms"].mean is None   # NaN: no value
    assert m["itl_ms"].p50 == 2.5 and m["e2el_ms"].p50 is None


def test_a_side_with_unfinished_requests_is_left_out_of_the_ratio():
    """Hand-made records (no server): vLLM completed 3 of 4 requests in r2, so only r1 counts there,
    and the harness's two repeats face one vLLM sample ("too few repeats", not an interval)."""
    from harness.schema.serve import PointMetrics, ServePoint

    def ours(tok_s: float) -> ServePoint:
        m = PointMetrics(requests=4, completed=4, failed=0, duration_s=1.0, output_tokens=16, prompt_tokens=32,
                         output_tok_s=tok_s, requests_per_s=4.0)
        return ServePoint(index=0, concurrency=1, seed=1000, status="ok", metrics=m)

    def theirs(tok_s: float, completed: int) -> sxc.VllmPoint:
        return sxc.VllmPoint(status="ok", requests=4, completed=completed, failed=4 - completed, output_tok_s=tok_s)

    reps = [sxc.RepeatRun(repeat=r, status="ok", run_dir=f"r{r}", points=[
        sxc.PointPair(index=0, concurrency=1, seed=1000, first=sxc.first_side(0, r), harness=ours(h), vllm=theirs(v, n))])
        for r, h, v, n in ((1, 98.0, 100.0, 4), (2, 99.0, 50.0, 3))]
    (s,) = sxc.summarize(reps)
    assert s.output_tok_s.harness == [98.0, 99.0] and s.output_tok_s.vllm == [100.0]
    assert s.output_tok_s.ratio == pytest.approx(98.5 / 100.0) and s.output_tok_s.verdict == "too few repeats"
    # 0.985 is inside ±3%, but one vLLM sample gives no interval: the point is not judged.
    assert s.band == "no interval" and s.excluded == ["r2 vLLM: 3 of 4 requests completed"]
    rec = sxc.ServeCrosscheckRecord(leg="l", model="m", workload="w", scenario="s", invocation_id="i",
                                    started_at="t", settings={}, repeats=reps, summary=[s])
    assert "| no interval (too few repeats) |" in sxc.crosscheck_md([rec])


@pytest.mark.parametrize("ratio, low, high, band", [
    (1.01, 0.90, 1.12, "undecided"),   # the point estimate is inside ±3%, the interval is not
    (0.99, 0.96, 1.00, "undecided"),   # crosses 0.97
    (1.02, 1.00, 1.05, "undecided"),   # crosses 1.03
    (1.00, 0.97, 1.03, "within"),      # the band's edges count as inside
    (1.01, 0.99, 1.02, "within"),
    (0.90, 0.85, 0.95, "below"),
    (1.10, 1.05, 1.20, "above"),
    (1.01, None, None, "no interval"),
    (None, None, None, None),
])
def test_band_judges_the_whole_interval(ratio, low, high, band):
    from harness.schema.serve_crosscheck import interval_band

    assert interval_band(ratio, low, high, 0.03) == band


def _summary_of(harness: list[float], vllm: list[float]) -> sxc.PointSummary:
    """Hand-made records (no server): one point, one pair per repeat, every request completed."""
    from harness.schema.serve import PointMetrics, ServePoint

    def ours(tok_s: float) -> ServePoint:
        m = PointMetrics(requests=4, completed=4, failed=0, duration_s=1.0, output_tokens=16, prompt_tokens=32,
                         output_tok_s=tok_s, requests_per_s=4.0)
        return ServePoint(index=0, concurrency=1, seed=1000, status="ok", metrics=m)

    reps = [sxc.RepeatRun(repeat=r, status="ok", run_dir=f"r{r}", points=[
        sxc.PointPair(index=0, concurrency=1, seed=1000, first=sxc.first_side(0, r), harness=ours(h),
                      vllm=sxc.VllmPoint(status="ok", requests=4, completed=4, failed=0, output_tok_s=v))])
        for r, (h, v) in enumerate(zip(harness, vllm), start=1)]
    (s,) = sxc.summarize(reps)
    return s


def _md_band(s: sxc.PointSummary) -> str:
    rec = sxc.ServeCrosscheckRecord(leg="l", model="m", workload="w", scenario="s", invocation_id="i",
                                    started_at="t", settings={}, summary=[s])
    row = next(x for x in sxc.crosscheck_md([rec]).splitlines() if x.startswith("| l |"))
    return row.split(" | ")[8]


def test_ratio_inside_the_band_with_a_wide_interval_is_not_within():
    s = _summary_of([90.0, 112.0], [99.0, 101.0])
    o = s.output_tok_s
    assert o.ratio == pytest.approx(1.01) and o.ci_low < 0.97 and o.ci_high > 1.03
    assert s.band == "undecided" and _md_band(s) == "undecided (interval wider than the band)"


def test_narrow_interval_inside_the_band_is_within_and_outside_is_outside():
    s = _summary_of([100.0, 100.4, 100.2], [99.9, 100.1, 100.0])
    assert s.output_tok_s.ci_low >= 0.97 and s.output_tok_s.ci_high <= 1.03
    assert s.band == "within" and _md_band(s) == "within"
    low = _summary_of([80.0, 80.4, 80.2], [99.9, 100.1, 100.0])
    assert low.band == "below" and _md_band(low) == "outside (below)"


def test_fake_crosscheck_again_refuses_resumes_or_supersedes_and_never_replaces_silently(tmp_path, fakes):
    """FAKE server and bench: a second crosscheck of the same settings would replace the first one's
    record. Without a flag it stops before measuring; --resume measures only the repeats the record
    lacks; --supersede moves the first one to superseded/ and measures again."""
    import dataclasses

    scenario, calls, _ = fakes
    args = SweepArgs(scenario=str(scenario), results=tmp_path / "r", repeats=1)
    (first,) = sxc.serve_crosscheck(args).records
    path = tmp_path / "r" / "t" / "serve-crosscheck" / "cpu-0.32.0--m--srv.json"
    n_calls = len(calls.read_text().splitlines())
    with pytest.raises(UserError, match="already recorded .*--resume .*--supersede") as e:
        sxc.serve_crosscheck(args)
    assert "\n" not in str(e.value) and sxc.read(path) == first
    assert len(calls.read_text().splitlines()) == n_calls  # nothing measured
    # --resume with two repeats: r1 carried as it was, only r2 measured.
    (both,) = sxc.serve_crosscheck(dataclasses.replace(args, repeats=2, resume=True)).records
    assert [r.repeat for r in both.repeats] == [1, 2] and both.repeats[0] == first.repeats[0]
    assert len(calls.read_text().splitlines()) == n_calls + 2 and any("carried over" in n for n in both.notes)
    # --resume with nothing left to measure returns the record as it is.
    (same,) = sxc.serve_crosscheck(dataclasses.replace(args, repeats=2, resume=True)).records
    assert same == both and len(calls.read_text().splitlines()) == n_calls + 2
    # --supersede: the earlier record and its folder move whole; a new one is measured.
    (new,) = sxc.serve_crosscheck(dataclasses.replace(args, supersede=True)).records
    moved = list((tmp_path / "r" / "t" / "superseded").glob("*/serve-crosscheck/cpu-0.32.0--m--srv.json"))
    assert len(moved) == 1 and sxc.read(moved[0]) == both and (moved[0].parent / "cpu-0.32.0--m--srv" / "r2").is_dir()
    assert new.invocation_id != both.invocation_id and [r.repeat for r in new.repeats] == [1]


def test_a_points_one_answer_is_its_band_and_the_ratio_cell_names_only_a_decided_difference():
    # The shipped real record (results/cpu-serve-arrivals: two clients on one real server): the ratio's
    # interval lies within ±3%, so the row says "within" once and no "undecided" stands beside it.
    from harness.experiments.serve_crosscheck import load_all
    from harness.experiments.serve_crosscheck_md import crosscheck_md

    study = Path(__file__).resolve().parents[1] / "results" / "cpu-serve-arrivals"
    recs = load_all(study)
    row = next(ln for ln in crosscheck_md(recs).splitlines() if ln.startswith("| cpu-0.32.0 "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[7] == "1.000 [0.998, 1.002]" and cells[8] == "within"
    assert "undecided" not in row
    # A decided difference is still named beside its interval.
    o = recs[0].summary[0].output_tok_s.model_copy(update={"verdict": "harness higher"})
    from harness.experiments.serve_crosscheck_md import _ratio_cell
    assert _ratio_cell(o).endswith("] harness higher")
    assert (study / "serve-crosscheck.md").read_text(encoding="utf-8") == crosscheck_md(recs)
