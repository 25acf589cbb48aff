"""Inputs a new user gives that used to pass the plan and fail minutes in, or not at all: absurd sizes,
quoted booleans, plugin parameters reported under the wrong key, `source:` folders that cannot feed a
run, engine arguments the harness sets itself; `harness legs` on a machine where some legs cannot
resolve; `harness explain` on files that are not logs, and on a large one; the README's
serve-crosscheck flags; the report's sentence about reused runs.

Each CLI case asserts the exit status, one stderr line naming the culprit (the file and the key
path), no traceback, and the tree of the case's folder unchanged (tests/test_bad_input.py's helpers).
"""

from __future__ import annotations

import json
import os
import wave
from pathlib import Path

import pytest
import yaml

from harness import cli
from harness.core import logs, paths
from harness.core.errors import UserError
from harness.measure import leg as legmod
from harness.measure.scenario import check_plan, load_scenario
from harness.workloads import limits
from tests.studygen import record_dict, simple_study, write_run
from tests.test_bad_input import BASE, _set, one_line_error, run_cli, scenario_text, snapshot  # noqa: F401

LIMITS = "harness/workloads/limits.py"


def _wl(**kw) -> dict:
    return {"name": "w", "input_len": 8, "output_len": 4} | kw


def _workload(**kw):
    return _set("workloads", [_wl(**kw)])


# --- scenario files, through `harness sweep --dry-run` --------------------------------------------
# (id, mutation of BASE, extra CLI args, what the one stderr line must name besides the file)

SCENARIO_CASES = [
    ("input-len", _set("workloads.0.input_len", 2_000_000), [], ["workloads[0].input_len", "1,048,576", LIMITS]),
    ("output-len", _set("workloads.0.output_len", 10**9), [], ["workloads[0].output_len", "1,048,576"]),
    ("num-prompts", _set("workloads.0.num_prompts", 10**6), [], ["workloads[0].num_prompts", "65,536"]),
    ("pass-tokens", lambda d: d["workloads"][0].update(num_prompts=60_000, input_len=1_000_000), [],
     ["workloads[0].num_prompts", "tokens per pass", "2,147,483,648"]),
    ("serve-concurrency", _workload(kind="serve", concurrency=[1, 100_000]), [],
     ["workloads[0].concurrency[1]", "65,536"]),
    ("serve-requests", _workload(kind="serve", num_prompts=10**7), [], ["workloads[0].num_prompts", "65,536"]),
    ("serve-rate", _workload(kind="serve", request_rate=[1e9]), [], ["workloads[0].request_rate[0]", "1,000,000"]),
    ("serve-startup-timeout", _workload(kind="serve", startup_timeout_s=0.001), [],
     ["workloads[0].startup_timeout_s", "floor of 1 s"]),
    ("latency-batch", _workload(kind="latency", batch_size=10**6), [], ["workloads[0].batch_size", "65,536"]),
    ("latency-iterations", _workload(kind="latency", iterations=10**7), [], ["workloads[0].iterations", "10,000"]),
    ("image-width", _workload(kind="throughput", modality="image", num_prompts=1, width=100_000), [],
     ["workloads[0].width", "16,384 px"]),
    ("image-height", _workload(kind="throughput", modality="image", num_prompts=1, height=10**9), [],
     ["workloads[0].height", "16,384 px"]),
    ("images-per-prompt", _workload(kind="throughput", modality="image", num_prompts=1, images_per_prompt=10**5), [],
     ["workloads[0].images_per_prompt", "256"]),
    ("video-frames", _workload(kind="throughput", modality="video", num_prompts=1, num_frames=10**6), [],
     ["workloads[0].num_frames", "4,096"]),
    ("video-bytes", _workload(kind="throughput", modality="video", num_prompts=1, num_frames=4096, width=4096,
                              height=4096), [], ["workloads[0].num_frames", "GiB"]),
    ("audio-seconds", _workload(kind="throughput", modality="audio", num_prompts=1, duration_s=1e7), [],
     ["workloads[0].duration_s", "3,600"]),
    ("audio-rate", _workload(kind="throughput", modality="audio", num_prompts=1, sample_rate=10**9), [],
     ["workloads[0].sample_rate", "384,000"]),
    ("audio-count", _workload(kind="throughput", modality="audio", num_prompts=1, clips_per_prompt=5000), [],
     ["workloads[0].clips_per_prompt", "256"]),
    ("min-timed-above-timeout", lambda d: (d.update(timeout_s=60), d["workloads"][0].update(min_timed_s=3600)), [],
     ["workloads[0].min_timed_s", "timeout_s (60 s)"]),
    ("timeout-tiny", _set("timeout_s", 0.001), [], ["timeout_s", "floor of 1 s"]),
    ("timeout-huge", _set("timeout_s", 1e12), [], ["timeout_s", "a week"]),
    ("repeats", _set("repeats", 10**6), [], ["repeats", "1,000"]),
    ("warmup-iterations", _set("workloads.0.warmup_iterations", 10**8), [], ["workloads[0].warmup_iterations"]),
    # booleans: only true or false
    ("bool-quoted-no", _workload(kind="equivalence", ignore_eos="no"), [], ["workloads[0].ignore_eos", "true or false"]),
    ("bool-zero", _workload(kind="equivalence", ignore_eos=0), [], ["workloads[0].ignore_eos", "true or false"]),
    ("engine-args-quoted-bool", _set("models.0.engine_args", {"enforce_eager": "no"}), [],
     ["models[0].engine_args.enforce_eager", "true or false"]),
    ("engine-args-nested-bool", _set("models.0.engine_args", {"compilation_config": {"use_cudagraph": "off"}}), [],
     ["models[0].engine_args.compilation_config.use_cudagraph"]),
    # what the harness sets itself
    ("engine-args-tp", _set("models.0.engine_args", {"tensor_parallel_size": 2}), [],
     ["models[0].engine_args.tensor_parallel_size", "`tp`"]),
    ("engine-args-model", _set("models.0.engine_args", {"model": "/x"}), [], ["models[0].engine_args.model", "`path`"]),
    ("arm-engine-args-seed", _set("arms", [{"name": "a", "engine_args": {"seed": 3}}]), [],
     ["arms[0].engine_args.seed", "workload's `seed`"]),
    # the command line's overrides of the same sizes
    ("flag-timeout-tiny", lambda d: None, ["--timeout", "0.001"], ["--timeout", "floor of 1 s"]),
    ("flag-repeats", lambda d: None, ["--repeats", "100000"], ["--repeats", "1,000"]),
    ("flag-timeout-under-min-timed", _set("workloads.0.min_timed_s", 40), ["--timeout", "30"],
     ["workloads[0].min_timed_s", "--timeout (30 s)"]),
]
SUBPROCESS = {"input-len", "bool-quoted-no", "engine-args-tp", "flag-timeout-tiny"}


@pytest.mark.parametrize("case", SCENARIO_CASES, ids=[c[0] for c in SCENARIO_CASES])
def test_absurd_or_ambiguous_scenario_is_refused_at_plan_time(tmp_path, run_cli, case):
    name, mutate, extra, culprits = case
    sc = tmp_path / "t.yaml"
    sc.write_text(scenario_text(mutate))
    results = tmp_path / "results"
    results.mkdir()
    before = snapshot(tmp_path)
    rc, err = run_cli("sweep", sc, "--results", results, "--dry-run", *extra, sub=name in SUBPROCESS)
    one_line_error(rc, err, [str(sc), *culprits])
    assert snapshot(tmp_path) == before


def test_plugin_errors_carry_their_own_key_path_and_line(tmp_path, run_cli):
    # The case: a serve workload's num_prompts reported as `workloads[0].concurrency: num_prompts`.
    sc = tmp_path / "t.yaml"
    sc.write_text(scenario_text(_workload(kind="serve", concurrency=[1, 2], num_prompts=0)))
    line = 1 + next(i for i, ln in enumerate(sc.read_text().splitlines()) if "num_prompts" in ln)
    rc, err = run_cli("sweep", sc, "--results", tmp_path / "r", "--dry-run", sub=False)
    msg = one_line_error(rc, err, [str(sc), f"line {line}: workloads[0].num_prompts: should be greater than 0"])
    assert "concurrency" not in msg
    # A list item's type error: its index, and the line of that item.
    sc.write_text("name: t\nlegs: [cpu-0.27.1]\nmodels: [{name: m, path: tiny}]\nworkloads:\n"
                  "  - name: w\n    kind: serve\n    input_len: 8\n    output_len: 4\n    request_rate:\n"
                  "      - 1\n      - fast\n")
    rc, err = run_cli("sweep", sc, "--results", tmp_path / "r", "--dry-run", sub=False)
    one_line_error(rc, err, [str(sc), "line 11: workloads[0].request_rate[1]: Input should be a valid number"])
    assert not (tmp_path / "r").exists()


def test_limits_are_far_above_the_shipped_scenarios():
    for path in sorted(paths.SCENARIOS.glob("*.yaml")):
        sc = load_scenario(path)
        for w in sc.workloads:
            assert w.input_len * 8 <= limits.MAX_TOKENS and w.output_len * 8 <= limits.MAX_TOKENS, path
            assert all(c * 8 <= limits.MAX_CONCURRENCY for c in w.params.get("concurrency", [])), path
        assert sc.repeats * 8 <= limits.MAX_REPEATS and sc.timeout_s * 8 <= limits.MAX_TIMEOUT_S, path


# --- source: folders, checked at plan time (dry run included) -------------------------------------

def _wav(path: Path, frames: int) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\x01\x00" * frames)


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32   # the checks read a file's first bytes only


def _source(tmp_path: Path, what: str) -> tuple[str, str, str]:
    """(modality, source as written in the scenario, what the error names) for one bad folder."""
    d = tmp_path / "data"
    d.mkdir()
    if what == "missing":
        return "image", str(d / "nope"), "no such folder"
    if what == "file":
        (d / "x.png").write_bytes(PNG)
        return "image", str(d / "x.png"), "is a file, not a folder"
    if what == "no-images":
        (d / "README.txt").write_text("no pictures here\n")
        return "image", str(d), "holds no image files"
    if what == "not-an-image":
        (d / "a.png").write_bytes(PNG)
        (d / "b.jpg").write_text("<html>not a jpeg</html>")
        return "image", str(d), "b.jpg is not an image"
    if what == "empty-image":
        (d / "a.png").write_bytes(b"")
        return "image", str(d), "a.png is an empty file"
    if what == "empty-wav":
        _wav(d / "ok.wav", 160)
        _wav(d / "silent.wav", 0)
        return "audio", str(d), "silent.wav is an empty wav"
    if what == "zero-byte-wav":
        (d / "a.wav").write_bytes(b"")
        return "audio", str(d), "a.wav is an empty file"
    if what == "no-videos":
        (d / "frames").mkdir()
        (d / "frames" / "notes.txt").write_text("x")
        return "video", str(d), "holds no videos"
    if what == "symlink-out":
        (tmp_path / "data" / "link").symlink_to("/etc")
        return "image", str(d / "link"), "points out of the project tree"
    if what == "symlink-inside-out":
        (d / "a.png").write_bytes(PNG)
        (d / "b.png").symlink_to("/etc/hostname")
        return "image", str(d), "points out of the project tree"
    if what == "relative":
        return "image", "data", "relative path"
    raise AssertionError(what)


SOURCE_CASES = ["missing", "file", "no-images", "not-an-image", "empty-image", "empty-wav", "zero-byte-wav",
                "no-videos", "symlink-out", "symlink-inside-out", "relative"]


@pytest.mark.parametrize("what", SOURCE_CASES)
def test_bad_source_folder_is_refused_at_plan_time(tmp_path, run_cli, what):
    modality, source, culprit = _source(tmp_path, what)
    sc = tmp_path / "t.yaml"
    sc.write_text(scenario_text(_workload(kind="throughput", modality=modality, num_prompts=1, source=source)))
    line = 1 + next(i for i, ln in enumerate(sc.read_text().splitlines()) if "source:" in ln)
    before = snapshot(tmp_path)
    rc, err = run_cli("sweep", sc, "--results", tmp_path / "results", "--dry-run", sub=what == "missing")
    one_line_error(rc, err, [str(sc), f"line {line}: workloads[0].source", culprit])
    assert snapshot(tmp_path) == before


def test_usable_source_folders_pass_the_plan_checks(tmp_path):
    for modality in ("image", "audio", "video"):
        d = tmp_path / modality
        d.mkdir()
        if modality == "image":
            (d / "a.png").write_bytes(PNG)
            (d / "sub").mkdir()
            (d / "sub" / "b.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 16)
        elif modality == "audio":
            _wav(d / "a.wav", 1600)
            (d / "b.flac").write_bytes(b"fLaC" + b"\x00" * 64)
        else:
            (d / "clip1").mkdir()
            (d / "clip1" / "f0.png").write_bytes(PNG)
            (d / "v.mp4").write_bytes(b"\x00\x00\x00\x18ftypisom" + b"\x00" * 16)
        sc = tmp_path / f"{modality}.yaml"
        sc.write_text(scenario_text(_workload(kind="throughput", modality=modality, num_prompts=1, source=str(d))))
        # A symlink that stays inside the tree is fine.
        (tmp_path / f"{modality}-link").symlink_to(d)
        check_plan(sc, load_scenario(sc), ["w"])
        sc.write_text(scenario_text(_workload(kind="throughput", modality=modality, num_prompts=1,
                                              source=str(tmp_path / f"{modality}-link"))))
        check_plan(sc, load_scenario(sc), ["w"])
        # A workload the plan leaves out is not checked; a cluster's nodes hold their own data.
        sc.write_text(scenario_text(_workload(kind="throughput", modality=modality, num_prompts=1,
                                              source=str(tmp_path / "nope"))))
        check_plan(sc, load_scenario(sc), [])
        check_plan(sc, load_scenario(sc), ["w"], check_sources=False)
        with pytest.raises(UserError, match="no such folder"):
            check_plan(sc, load_scenario(sc), ["w"])


# --- harness legs --------------------------------------------------------------------------------

@pytest.fixture
def legs_dir(tmp_path, monkeypatch):
    """A legs folder of three legs none of which can resolve here, each for its own reason, and no
    index asked: one described only, one whose index variable is unset, one prebuilt with no interpreter."""
    d = tmp_path / "legs"
    d.mkdir()
    monkeypatch.setattr(paths, "LEGS", d)
    for var in ("H3_TORCH_INDEX", *legmod._UV_SOURCES):
        monkeypatch.delenv(var, raising=False)
    base = {"label": "x", "device": "cuda", "vllm_version": "0.26.0"}
    legs = {
        "described": base | {"buildable": False},
        "gpu-index": base | {"requirements": ["torch==2.11.0+cu130"], "extra_index_urls": ["${H3_TORCH_INDEX}"]},
        "prebuilt": base | {"prebuilt_python": str(tmp_path / "no-such-python")},
    }
    for name, body in legs.items():
        (d / f"{name}.yaml").write_text(yaml.safe_dump({"name": name} | body))
    return d


def test_legs_lists_every_leg_with_the_reason_and_exits_0(legs_dir, capsys):
    before = snapshot(legs_dir.parent)
    rc = cli.main(["legs"])
    out, err = capsys.readouterr()
    assert rc == 0 and err == "" and "Traceback" not in out
    lines = out.splitlines()
    assert lines == [
        "described: described only (not buildable here)",
        "gpu-index: unresolved here: $H3_TORCH_INDEX is not set (it takes torch==2.11.0+cu130 from there)",
        f"prebuilt: unresolved here: inspect prebuilt python failed (exit 127): no interpreter "
        f"{legs_dir.parent / 'no-such-python'} on this machine",
    ]
    assert snapshot(legs_dir.parent) == before


@pytest.mark.parametrize("name, culprit", [("gpu-index", "$H3_TORCH_INDEX is not set"),
                                           ("prebuilt", "no interpreter"), ("described", "described only")])
def test_a_named_leg_that_cannot_resolve_is_exit_2_naming_it(legs_dir, capsys, name, culprit):
    before = snapshot(legs_dir.parent)
    rc = cli.main(["legs", name])
    one_line_error(rc, capsys.readouterr().err, [str(legs_dir / f"{name}.yaml"), f"leg {name}", culprit])
    assert snapshot(legs_dir.parent) == before


def test_an_index_variable_set_here_is_asked(legs_dir, monkeypatch):
    spec = legmod.load_leg("gpu-index")
    assert legmod.unavailable_here(spec)
    monkeypatch.setenv("H3_TORCH_INDEX", "file:///nowhere")
    assert legmod.unavailable_here(spec) is None
    monkeypatch.delenv("H3_TORCH_INDEX")
    monkeypatch.setenv("UV_EXTRA_INDEX_URL", "file:///nowhere")   # uv's own source: it may have the build
    assert legmod.unavailable_here(spec) is None


# --- harness explain -----------------------------------------------------------------------------

CAUSE = Path(__file__).parent / "data" / "vllm_logs" / "046-study-cutlass-thrmma.log"


def test_explain_empty_and_binary_files_say_so(tmp_path, run_cli):
    empty, blank, binary = tmp_path / "empty.log", tmp_path / "blank.log", tmp_path / "core.bin"
    empty.write_bytes(b"")
    blank.write_text("\n \n\n")
    binary.write_bytes(bytes(range(256)) * 64)
    before = snapshot(tmp_path)
    for path, culprit in ((empty, "empty file"), (blank, "empty file"), (binary, "not a text log")):
        rc, err = run_cli("explain", path, sub=path is binary)
        one_line_error(rc, err, [str(path), culprit])
    # Every argument unusable: exit 2, one line for each.
    rc, err = run_cli("explain", empty, binary, tmp_path / "missing.log", sub=False)
    lines = err.strip().splitlines()
    assert rc == 2 and "Traceback" not in err and len(lines) == 3
    assert "empty file" in lines[0] and str(empty) in lines[0]
    assert "not a text log" in lines[1] and str(binary) in lines[1]
    assert "no such file" in lines[2]
    assert snapshot(tmp_path) == before


def test_explain_goes_on_past_an_unusable_log(tmp_path, capsys):
    empty, good = tmp_path / "empty.log", tmp_path / "run.log"
    empty.write_bytes(b"")
    good.write_text(CAUSE.read_text())
    rc = cli.main(["explain", str(empty), str(good)])
    out, err = capsys.readouterr()
    assert rc == 0 and f"{good}: dependency-window (signature cutlass-thrmma)" in out
    assert err.strip() == f"error: {empty}: empty file"


def _big_log(path: Path, mib: int, *, middle: str = "", end: str = "", head: str = "") -> None:
    noise = ("(EngineCore_DP0 pid=45) INFO 12-01 10:03:37 [core.py:116] Processed prompts: 45%|####5     | "
             "460/1024 [00:12<00:15, 36.5it/s]\n") * 2000
    with open(path, "w") as f:
        f.write(head)
        while f.tell() < (mib << 20) // 2:
            f.write(noise)
        f.write(middle)
        while f.tell() < mib << 20:
            f.write(noise)
        f.write(end)


def test_explain_reads_a_large_log_as_its_head_and_tail(tmp_path, capsys):
    """A big generated log: the cause at its end is found; one in its middle is beyond the bound and not
    read, unless the head holds one (the earliest cause decides, as for a whole log)."""
    cause = CAUSE.read_text()
    tail_log, middle_log, head_log = tmp_path / "tail.log", tmp_path / "middle.log", tmp_path / "head.log"
    _big_log(tail_log, 24, end=cause)
    _big_log(middle_log, 24, middle=cause)
    _big_log(head_log, 24, head="ERROR 12-01 10:00:01 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. "
                                "Tried to allocate 2.00 GiB\n", end=cause)
    rc = cli.main(["explain", "--json", str(tail_log), str(middle_log), str(head_log)])
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == 0
    assert out[0]["signature"] == "cutlass-thrmma" and "ThrMma" in out[0]["error"]
    assert out[1]["signature"] != "cutlass-thrmma" and "ThrMma" not in out[1]["error"]
    assert "OutOfMemoryError" in out[2]["error"]
    text = logs.read_log(middle_log)
    assert len(text.encode()) < logs.LOG_HEAD_BYTES + logs.LOG_TAIL_BYTES + 4096
    assert "bytes of this log not read]" in text


def test_explain_caps_a_line_without_end(tmp_path):
    one = tmp_path / "one.log"
    one.write_text("x" * (8 << 20))
    text = logs.read_log(one)
    assert all(len(ln) < logs.MAX_LINE_CHARS + 100 for ln in text.splitlines())
    assert "characters of this line not read]" in text


# --- check serve's flags, as the README documents them ------------------------------------------

def test_serve_crosscheck_takes_the_readme_flags(tmp_path, capsys):
    p = cli.build_parser()
    a = p.parse_args(["check", "serve", "s", "--leg", "L", "--resume", "--retry-failed"])
    assert a.resume and a.retry_failed and not a.supersede
    assert p.parse_args(["check", "serve", "s", "--supersede"]).supersede
    with pytest.raises(SystemExit) as e:
        p.parse_args(["check", "serve", "s", "--resume", "--supersede"])
    assert e.value.code == 2
    readme = (paths.PROJ_ROOT / "README.md").read_text()
    assert "check serve SCENARIO --leg L [--repeats N] [--resume [--retry-failed] | --supersede]" in readme


# --- the report's sentence about reused runs -------------------------------------------------------

def test_report_counts_reused_runs_the_tables_leave_out(tmp_path):
    from harness.publish import report
    from harness.publish.study import load_study

    d = simple_study(tmp_path / "s", {("0.18", "m", "mixed"): [10.0, 11.0, 12.0],
                                      ("0.26", "m", "mixed"): [20.0, 21.0, 22.0]})
    # FAKE sweep indexes: a later --resume reused two runs whose measuring invocation left no index
    # here, so the tables leave them out (the study does not declare allow_reused).
    (d / "sweeps").mkdir()
    runs = [f"main/{leg}/m/mixed/default/r{i}" for leg in ("gpu-0.18.0", "gpu-0.26.0") for i in (1, 2, 3)]
    (d / "sweeps" / "20260101T000000-aaaaaa.json").write_text(json.dumps({
        "invocation_id": "inv-1", "runs": [{"run_id": r, "reused": False} for r in runs[:2] + runs[4:]]}))
    (d / "sweeps" / "20260102T000000-bbbbbb.json").write_text(json.dumps({
        "invocation_id": "inv-2", "runs": [{"run_id": r, "reused": True} for r in runs[2:4]]}))
    text = report.intro_md(load_study(d))
    assert "2 of the 6 run records were reused by `--resume` in a later invocation" in text
    assert "none of the 4 runs behind the tables is one of them" in text
    assert "None of the" not in text
    # With allow_reused they are behind the tables, and counted there.
    (d / "study.yaml").write_text((d / "study.yaml").read_text() + "allow_reused: true\n")
    text = report.intro_md(load_study(d))
    assert "2 of the 6 runs behind the tables were measured by an earlier invocation" in text
    # Nothing reused: the plain sentence.
    for p in (d / "sweeps").glob("*bbbbbb.json"):
        os.remove(p)
    write_run(d, record_dict(leg="gpu-0.18.0", model="m", repeat=4, value=13.0))
    assert "None of the 7 runs behind the tables was reused by `--resume`." in report.intro_md(load_study(d))


def test_the_readme_states_the_limits_the_module_holds():
    readme = (paths.PROJ_ROOT / "README.md").read_text()
    for value in (limits.MAX_TOKENS, limits.MAX_PROMPTS, limits.MAX_PASS_TOKENS, limits.MAX_CONCURRENCY,
                  limits.MAX_LOAD_POINTS, int(limits.MAX_REQUEST_RATE), limits.MAX_ITERATIONS, limits.MAX_SIDE_PX,
                  limits.MAX_FRAMES, limits.MAX_ITEMS_PER_PROMPT, int(limits.MAX_AUDIO_S), limits.MAX_SAMPLE_RATE,
                  limits.MAX_REPEATS):
        assert f"| {value:,}" in readme or f" {value:,} " in readme or f"{value:,}/s" in readme, value
    assert f"{limits.MAX_ITEM_BYTES >> 30} GiB" in readme and "1 s to a week" in readme
    assert f"first {logs.LOG_HEAD_BYTES >> 10} KiB and last {logs.LOG_TAIL_BYTES >> 20} MiB" in readme
