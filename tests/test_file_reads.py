"""Who reads files: only `harness/schema/` (every file the project writes or reads back, with its
migrations) and the Dataset (`harness/analyze/dataset.py`: a study folder, each run's record, logs,
profile and kept outputs) read a study's run folders. Everything downstream takes what it needs from
the Dataset, so a record is parsed once, migrated once and checked once.

The rule, on the code's syntax tree: outside those two, a call to `open`, `<x>.open`, `json.load(s)`,
`<x>.read_text`, `<x>.read_bytes`, a `yaml` load, a run record's schema reader (`record.read`,
`checks.read`, `checks.read_measured`) or the log reader (`core.logs.read_log`) is a file read, and
each function holding one must be named in READS with why its read is not a re-read of a study's
run folder. An entry that no longer
matches a read is an error too, so the list cannot outlive the code it excuses.

JSON in particular: outside those two and the worker (the leg's interpreter, standard library only),
a `json.load(s)` call either goes through a schema reader (harness/schema/: a versioned model with
its format history) or is named in JSON_READS with why no model of the project's fits: what it
parses is not a file the project writes (vLLM's output, a model's config, an HTTP or pipe reply)."""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1] / "harness"
# Where reading a run folder belongs.
OWNERS = ("schema/", "analyze/dataset.py")

# Measure-time: the process measuring a run reading back what that run wrote moments ago (phases,
# logs, replies), or writes to it; no record of it exists yet, so there is no Dataset to ask.
_MEASURING = "measure-time: the run being measured, read or appended to by the process measuring it"
_WORKER = "the worker, inside the leg's interpreter (standard library only: no harness schema there)"
# (module path under harness/, function) -> why its read is not a re-read of a study's run folder.
READS: dict[tuple[str, str], str] = {
    # core: the one bounded YAML reader and the one bounded log reader.
    ("core/yamlio.py", "_compose"): "the one bounded reader of YAML (scenarios, legs, study.yaml) behind validate_at",
    ("core/logs.py", "read_log"): "the one bounded log reader; run logs reach analysis through the Dataset",
    # workloads: a model's files and a workload's source folder, at plan or build time.
    ("workloads/mm.py", "folder_images"): "a workload's source images",
    ("workloads/mm.py", "load_video"): "a workload's source video frames",
    ("workloads/mm.py", "read_wav"): "a workload's source audio",
    ("workloads/mm.py", "_json"): "a model's config.json / tokenizer files",
    ("analyze/resolution.py", "main"): "opens --out to write the table it printed; the study comes from the Dataset",
    ("workloads/mm.py", "model_info"): "a model's chat template",
    ("workloads/sources.py", "_head"): "a workload source file's magic bytes",
    ("workloads/sources.py", "_audio_problem"): "a workload's source audio",
    ("workloads/equivalence.py", "eos_ids"): "a model's generation_config.json",
    ("workloads/equivalence.py", "collect"): "writes the kept outputs (opened for writing)",
    ("workloads/equivalence.py", "read_outputs"): "the kept-outputs file's one reader (shared with the worker, "
                                                  "standard library only); analysis calls it via Dataset.outputs",
    # measure: legs, the package index, the node, and the run being measured.
    ("measure/leg.py", "additions"): "a leg's patch files (environment/patches/), hashed",
    ("measure/leg.py", "resolve"): "the lock file uv just wrote",
    ("measure/leg.py", "_apply_additions"): "a leg interpreter's reply on stdout; the patch files",
    ("measure/leg.py", "plugins"): "a leg interpreter's reply on stdout",
    ("measure/index.py", "index_versions"): "the package index's HTTP reply",
    ("measure/guard.py", "node_lock"): "the node lock's holder file",
    ("measure/serve.py", "wait_healthy"): "the server's HTTP health reply",
    ("measure/engine_metrics.py", "fetch"): "the server's HTTP /metrics reply (requests in its engine, its "
                                            "latency histograms)",
    ("measure/loadgen.py", "one_request"): "a server's streamed HTTP reply",
    ("measure/tinymodel.py", "materialize_architecture"): "a model's config.json, to build a tiny model from",
    ("measure/executors/ray.py", "run_files"): _MEASURING + " (its files shipped back from a Ray worker)",
    ("measure/paired.py", "group_cpu_s"): "/proc, the engines' CPU time",
    ("measure/paired.py", "EngineProc.spawn"): _MEASURING + " (its log, opened for writing)",
    ("measure/paired.py", "EngineProc._await"): _MEASURING + " (the worker's replies)",
    ("measure/paired.py", "measure_block"): _MEASURING + " (each engine's log, cut per pass)",
    ("measure/group.py", "_one_engine"): _MEASURING + " (the group engine's log, cut per workload)",
    ("measure/run.py", "emit"): _MEASURING + " (appends to run.jsonl)",
    ("measure/run.py", "process_group"): _MEASURING + " (its log, opened for writing)",
    ("measure/run.py", "orphans"): "/proc, processes a run left behind",
    ("measure/run.py", "finish"): _MEASURING + " (run.log, for the failure's tracebacks)",
    ("measure/engine_log.py", "view"): _MEASURING + " (the server's stats lines in run.log, after a point's start)",
    ("measure/diagnose.py", "_log"): _MEASURING + " (the DEBUG re-run's log)",
    ("measure/sweep.py", "reusable"): "the sweep deciding whether a finished record is reused (schema reader)",
    ("measure/supersede.py", "replacements"): "the sweep deciding which records it measures over (schema reader)",
    # measure/worker: runs inside the leg's interpreter.
    ("measure/worker/tokenize_cost.py", "main"): _WORKER + ": its spec.json",
    ("measure/worker/bench.py", "prompt_vocab"): _WORKER + ": a model's config / tokenizer files",
    ("measure/worker/bench.py", "Events.__call__"): _WORKER + ": appends to run.jsonl",
    ("measure/worker/bench.py", "<module>"): _WORKER + ": its spec.json, to report a crash",
    ("measure/worker/commands.py", "main"): _WORKER + ": its command pipe",
    ("measure/worker/commands.py", "<module>"): _WORKER + ": its spec.json, to report a crash",
    ("measure/worker/vllm_bench.py", "main"): _WORKER + ": its spec.json and vLLM's benchmark output",
    ("measure/worker/vllm_bench.py", "run_bench"): _WORKER + ": vLLM's benchmark output (the JSON its main() wrote)",
    ("measure/worker/kernel_trace.py", "settings_from_env"): _WORKER + ": profiler settings from the environment",
    ("measure/worker/kernel_trace.py", "read_trace"): "a torch profiler trace: the worker's, or via Dataset.profile",
    ("measure/worker/stack.py", "_cpuinfo"): _WORKER + ": /proc/cpuinfo",
    ("measure/worker/stack.py", "_leg_build"): _WORKER + ": the leg venv's marker file",
    # analyze: one log or run folder a user names, not a study.
    ("analyze/failure.py", "_read"): "`harness explain FILE`: a log the user names (core.logs.read_log)",
    ("analyze/failure.py", "_read_if_usable"): "`harness explain DIR`: the logs of a folder the user names",
    ("analyze/failure.py", "explain"): "`harness explain DIR`: a run folder the user names, not a study",
    ("analyze/failure.py", "record_class"): "after a sweep: writes the attribution into the record it just measured",
    ("analyze/rounding.py", "printed_ratios"): "a TSV of figures a source printed (published/*.tsv)",
    # experiments: measuring now, and files that are not run records.
    ("experiments/serve_crosscheck.py", "_vllm_point"): _MEASURING + " (vLLM's benchmark log and output)",
    ("experiments/serve_crosscheck.py", "_start_reason"): _MEASURING + " (the server's run.log)",
    ("experiments/window.py", "read_declared"): "a leg interpreter's reply on stdout",
    ("experiments/history.py", "memory_available_gib"): "/proc/meminfo: the host's free memory, which decides whether every release's engine fits at once",
    ("experiments/client_overhead.py", "_connection"): "an HTTP request body (the trivial endpoint)",
    ("experiments/client_overhead.py", "_endpoint_cpu_s"): "the trivial endpoint's HTTP reply",
    ("experiments/crosscheck.py", "_adopt_legacy"): "the first line of the study's crosscheck.md view",
    ("experiments/crosscheck_tokenization.py", "_vocab"): "a model's config.json",
    # publish: the report's sources and outputs.
    ("publish/render.py", "parse_qmd"): "index.qmd's YAML header and cell options",
    ("publish/render.py", "_render_kernel"): "index.qmd",
    ("publish/page_source.py", "page_source"): "index.qmd, whose text cells it runs in-process",
    ("publish/render.py", "_quarto_project"): "index.qmd's header (the filters it names)",
    ("publish/site.py", "build_site"): "the site's Quarto project file (_quarto.yml)",
    ("publish/render.py", "_render_quarto"): "Quarto's output",
    ("publish/render.py", "_narrow_variants"): "the notebook Quarto executed (the narrow figure variants its outputs carry)",
    ("publish/notes.py", "read_note"): "a study's authored note (notes/*.md) and its front matter",
    ("publish/bundle.py", "_logs_tar"): "packs the runs' logs into the bundle as bytes (copied, not parsed)",
    ("publish/bundle.py", "_patches"): "a leg file under environment/legs/",
    ("publish/bundle.py", "publish"): "appends to the bundle's MANIFEST.md",
    ("publish/browser.py", "Chromium.__init__"): "the browser's log, opened for writing",
    ("publish/browser.py", "Chromium._read_message"): "the browser's DevTools reply",
    ("publish/browser.py", "check_page"): "the browser's DevTools reply",
}

# Where a JSON read may stand without a name: the owners above, and the worker, which runs in the
# leg's interpreter where no pydantic (and so no schema model) can be imported.
JSON_OWNERS = (*OWNERS, "measure/worker/")
_FOREIGN = "a file of another program's format, read for one or two of its keys"
# (module path under harness/, function) -> why its json.load(s) is not a schema model's read.
JSON_READS: dict[tuple[str, str], str] = {
    # A model's files, written by whoever published the model.
    ("workloads/mm.py", "_json"): _FOREIGN + ": a model's config.json / tokenizer_config.json",
    ("workloads/equivalence.py", "eos_ids"): _FOREIGN + ": a model's generation_config.json",
    ("experiments/crosscheck_tokenization.py", "_vocab"): _FOREIGN + ": a model's config.json (vocab_size)",
    # vLLM's own output.
    ("experiments/serve_crosscheck.py", "_vllm_point"): "vLLM's `bench serve` result JSON, whose keys are "
                                                         "vLLM's and change with its release",
    # Replies, not files: a process's stdout, a pipe, a socket.
    ("measure/leg.py", "_apply_additions"): "a leg interpreter's one-line reply on stdout (site dir, installed)",
    ("measure/leg.py", "plugins"): "a leg interpreter's one-line reply on stdout (its entry points)",
    ("experiments/window.py", "read_declared"): "a leg interpreter's one-line reply on stdout (declared requirements)",
    ("measure/paired.py", "EngineProc._await"): "the resident worker's reply on its pipe, one line per command; "
                                                "only `ok` is read, the rest is kept in replies.jsonl",
    ("measure/index.py", "index_versions"): "the package index's HTTP reply (its simple JSON API)",
    ("measure/loadgen.py", "one_request"): "one event of a server's streamed OpenAI-API reply",
    ("experiments/client_overhead.py", "_connection"): "the request body the trivial endpoint receives",
    ("experiments/client_overhead.py", "_endpoint_cpu_s"): "the trivial endpoint's HTTP reply (its CPU seconds)",
    ("publish/browser.py", "Chromium._read_message"): "the browser's DevTools protocol message",
    ("publish/browser.py", "check_page"): "the value a script evaluated in the browser returned",
    ("publish/render.py", "_narrow_variants"): "the notebook Quarto executed (nbformat's JSON)",
    # The project's own file, read where the worker reads it too.
    ("workloads/equivalence.py", "read_outputs"): "the kept outputs (outputs.jsonl.gz): one reader shared with "
                                                  "the worker, so standard library only; the record keeps their "
                                                  "hash, checked here before a row is parsed",
}

_YAML_LOADS = {"load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all"}
# Readers that take a path and read a run's file for the caller: a run record through its schema
# reader is still a run folder read again, and so is a log through core.logs.
_READERS = {"harness.schema.record": {"read"}, "harness.schema.checks": {"read", "read_measured"},
            "harness.core.logs": {"read_log"}}


def _reader_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The names a module calls those readers by: bare (`from harness.schema.record import read`) and
    the module aliases (`from harness.schema import checks`, `import harness.core.logs as logs`)."""
    bare: set[str] = set()
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                if a.name in _READERS.get(node.module, ()):
                    bare.add(a.asname or a.name)
                if f"{node.module}.{a.name}" in _READERS:
                    modules.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name in _READERS}
    return bare, modules


def _is_read(call: ast.Call, bare: set[str], modules: set[str]) -> bool:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id == "open" or f.id in bare
    if not isinstance(f, ast.Attribute):
        return False
    base = f.value.id if isinstance(f.value, ast.Name) else None
    return (f.attr in ("open", "fdopen", "read_text", "read_bytes")
            or (base == "json" and f.attr in ("load", "loads"))
            or (base == "yaml" and f.attr in _YAML_LOADS)
            or (base in modules and any(f.attr in names for names in _READERS.values())))


def reads(root: Path) -> dict[tuple[str, str], list[int]]:
    """(module path under `root`, enclosing Class.function or <module>) -> lines of file reads, for
    every module outside OWNERS."""
    out: dict[tuple[str, str], list[int]] = {}

    def visit(node: ast.AST, rel: str, scope: tuple[str, ...], in_function: bool,
              names: tuple[set[str], set[str]]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not in_function:
                # A nested function or class counts as its outermost function: the unit a reader owns.
                visit(child, rel, scope + (child.name,), not isinstance(child, ast.ClassDef), names)
                continue
            if isinstance(child, ast.Call) and _is_read(child, *names):
                out.setdefault((rel, ".".join(scope) or "<module>"), []).append(child.lineno)
            visit(child, rel, scope, in_function, names)

    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(OWNERS):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        visit(tree, rel, (), False, _reader_names(tree))
    return out


def _is_json_load(call: ast.Call) -> bool:
    f = call.func
    return (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "json"
            and f.attr in ("load", "loads"))


def json_reads(root: Path) -> dict[tuple[str, str], list[int]]:
    """(module path under `root`, enclosing Class.function or <module>) -> lines of `json.load(s)`
    calls, for every module outside JSON_OWNERS. Scoped as `reads` scopes them."""
    out: dict[tuple[str, str], list[int]] = {}

    def visit(node: ast.AST, rel: str, scope: tuple[str, ...], in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not in_function:
                visit(child, rel, scope + (child.name,), not isinstance(child, ast.ClassDef))
                continue
            if isinstance(child, ast.Call) and _is_json_load(child):
                out.setdefault((rel, ".".join(scope) or "<module>"), []).append(child.lineno)
            visit(child, rel, scope, in_function)

    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if not rel.startswith(JSON_OWNERS):
            visit(ast.parse(path.read_text(encoding="utf-8")), rel, (), False)
    return out


def test_only_the_schema_and_the_dataset_read_files_unexcused() -> None:
    found = reads(HARNESS)
    unexcused = [f"harness/{m}: {fn} (line {', '.join(map(str, ls))})" for (m, fn), ls in found.items()
                 if (m, fn) not in READS]
    assert not unexcused, ("file reads outside harness/schema/ and the Dataset; take the data from the Dataset "
                           "(or the file's schema reader), or name the function in READS with why:\n"
                           + "\n".join(unexcused))


def test_every_excuse_still_names_a_read() -> None:
    found = reads(HARNESS)
    stale = [f"{m}: {fn}" for m, fn in READS if (m, fn) not in found]
    assert not stale, "READS names functions that read no file (any more):\n" + "\n".join(stale)


def test_a_planted_read_is_caught(tmp_path: Path) -> None:
    # The scan must see each form of read, in a function and in a method, and skip the owners only.
    pkg = tmp_path / "analyze"
    pkg.mkdir()
    (pkg / "planted.py").write_text(
        "import json, yaml\nfrom pathlib import Path\n"
        "def state(run_dir):\n    return json.loads((Path(run_dir) / 'results.json').read_text())\n"
        "class C:\n    def m(self, p):\n        with open(p) as f:\n            return yaml.safe_load(f)\n"
        "    def n(self, p):\n        def inner():\n            return p.read_bytes()\n        return inner()\n"
        "from harness.schema import checks as ck\nfrom harness.core.logs import read_log\n"
        "def rec(d):\n    return ck.read_measured(d / 'results.json'), read_log(d / 'run.log')\n")
    (pkg / "dataset.py").write_text("import json\ndef load(p):\n    return json.load(open(p))\n")
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "record.py").write_text("def read(p):\n    return p.read_text()\n")
    assert reads(tmp_path) == {("analyze/planted.py", "state"): [4, 4], ("analyze/planted.py", "C.m"): [7, 8],
                               ("analyze/planted.py", "C.n"): [11], ("analyze/planted.py", "rec"): [16, 16]}
    assert reads(tmp_path).keys() - READS.keys()   # and the real test would refuse it


# --- JSON reads: a schema model, or named with why ---------------------------------------------------

def test_every_json_read_outside_the_schema_is_named_with_why() -> None:
    found = json_reads(HARNESS)
    unnamed = [f"harness/{m}: {fn} (line {', '.join(map(str, ls))})" for (m, fn), ls in found.items()
               if (m, fn) not in JSON_READS]
    assert not unnamed, ("json.load(s) outside harness/schema/, the Dataset and the worker; read the file "
                         "through its schema model (harness/schema/), or, for a file or reply of another "
                         "program's format, name the function in JSON_READS with why:\n" + "\n".join(unnamed))


def test_every_named_json_read_still_reads_json() -> None:
    found = json_reads(HARNESS)
    stale = [f"{m}: {fn}" for m, fn in JSON_READS if (m, fn) not in found]
    assert not stale, "JSON_READS names functions that parse no JSON (any more):\n" + "\n".join(stale)
    assert all(why.strip() for why in JSON_READS.values())


def test_a_planted_json_read_is_caught(tmp_path: Path) -> None:
    # Both calls, at module level and in a method; the schema, the Dataset and the worker skipped.
    (tmp_path / "measure" / "worker").mkdir(parents=True)
    (tmp_path / "measure" / "planted.py").write_text(
        "import json\nFIRST = json.loads('{}')\n"
        "class C:\n    def m(self, f):\n        return json.load(f)\n")
    (tmp_path / "measure" / "worker" / "w.py").write_text("import json\nX = json.loads('1')\n")
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "m.py").write_text("import json\ndef read(p):\n    return json.loads(p.read_text())\n")
    assert json_reads(tmp_path) == {("measure/planted.py", "<module>"): [2], ("measure/planted.py", "C.m"): [5]}


def test_the_worker_side_files_read_through_their_schema(tmp_path: Path) -> None:
    """run.jsonl, manifest.json and the tokenization probe's answer, as a crash can leave them."""
    from harness.schema.run_files import read_events, read_object, read_tokenize_cost

    (tmp_path / "run.jsonl").write_text('{"t": 1.0, "phase": "engine", "pid": 7, "size": 3}\n'
                                        '{"t": 2.0, "pid": 7}\n[1, 2]\n{"t": 3.0, "phase": "tim')
    assert read_events(tmp_path) == [{"t": 1.0, "phase": "engine", "pid": 7, "size": 3}]
    assert read_events(tmp_path / "absent") == []
    (tmp_path / "manifest.json").write_text('{"vllm": "0.32.0"}')
    (tmp_path / "list.json").write_text("[1]")
    (tmp_path / "cut.json").write_text('{"vllm": ')
    assert read_object(tmp_path / "manifest.json") == {"vllm": "0.32.0"}
    assert [read_object(tmp_path / n) for n in ("list.json", "cut.json", "absent.json")] == [{}, {}, {}]
    (tmp_path / "out.json").write_text('{"seconds": [0.5, 0.25], "median_s": 0.375, "prompts": 2, "tokens": 64}')
    got = read_tokenize_cost(tmp_path / "out.json")
    assert got is not None and got.median_s == 0.375 and got.tokens == 64
    assert read_tokenize_cost(tmp_path / "manifest.json") is None and read_tokenize_cost(tmp_path / "no.json") is None
