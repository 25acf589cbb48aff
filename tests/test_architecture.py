"""The house rules of docs/ARCHITECTURE.md, checked on the code: imports run only downward through
the pipeline's packages, and no module imports itself back through others (no import circle).
Imports inside functions count too: a lazy import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "harness"
# Lower number = further down the pipeline; a package may import its own rank or lower.
RANK = {"core": 0, "schema": 1, "workloads": 1, "measure": 2, "analyze": 3, "experiments": 4, "publish": 5,
        "cli": 6, "__main__": 7, "__init__": 0}


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("harness")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness") and node.level == 0:
            out.add(node.module)
            # `from harness.x import y` may name a submodule y
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in ROOT.rglob("*.py")}
    return {m: {i for i in _imports(p) if i in files and i != m} for m, p in files.items()}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_imports_run_only_downward():
    upward = [f"{m} -> {i}" for m, deps in _graph().items() for i in deps
              if RANK[_package(i)] > RANK[_package(m)]]
    assert not upward, "imports that run upward:\n" + "\n".join(sorted(upward))


def test_no_import_circle():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            # A package's face importing its own modules is how packages work, not a circle.
            if d.startswith(m + "."):
                continue
            if state.get(d) == 1:
                circles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


# The one measure module a study may read: the scenario file (its order of models, workloads and arms,
# its series); it starts nothing.
STUDIES_MAY_READ = {"harness.measure.scenario"}


def test_the_diagnostic_studies_import_no_measuring_code():
    measuring = [f"{m} -> {i}" for m, deps in _graph().items() if m.startswith("harness.analyze.studies")
                 for i in deps if (i.startswith("harness.measure") and i not in STUDIES_MAY_READ)
                 or i.startswith("harness.experiments")]
    assert not measuring, "diagnostic studies importing measuring code:\n" + "\n".join(sorted(measuring))
    assert any(m.startswith("harness.analyze.studies.") for m in _graph()), "the studies are where this test looks"


def test_the_side_experiments_are_one_module_each_in_the_registry():
    from harness import experiments

    for name in experiments.EXPERIMENTS:
        m = experiments.experiment(name)
        assert m.NAME == name and m.GROUP in experiments.GROUPS and m.HELP and m.EXAMPLE.startswith("harness ")
        for attr in ("Args", "run", "summary", "summary_md", "study_records", "quote", "SIDE_SECTION"):
            assert hasattr(m, attr), f"{m.__name__} has no {attr}"
        assert hasattr(m.Args, "add_cli_args") and hasattr(m.Args, "from_cli_args")
    assert not (ROOT / "investigate").exists()


@pytest.mark.parametrize("package", ["workloads", "schema/wire.py"])
def test_what_the_worker_imports_is_standard_library_only(package):
    # The worker runs with the leg's Python, whatever that venv holds.
    import sys
    target = ROOT / package
    files = [target] if target.is_file() else list(target.rglob("*.py"))
    for f in files:
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in tree.body:  # module level only: a function may import lazily on the harness side
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for n in names:
                top = n.split(".")[0]
                assert top in sys.stdlib_module_names or top in ("harness", "__future__"), f"{f}: imports {n}"


def test_no_worker_module_shadows_the_standard_library():
    # The worker's folder is first on its sys.path (it runs as a script in the leg's venv): a module
    # there named like a stdlib one (profile, trace, ...) replaces it for vLLM and torch too.
    import sys
    clash = [p.name for p in (ROOT / "measure" / "worker").glob("*.py") if p.stem in sys.stdlib_module_names]
    assert not clash, f"worker modules named like standard-library modules: {clash}"
