"""Workload kinds are plugins: code outside harness/workloads/ asks a kind's Metric and Traits, never
its name, and a new kind with its own metric (one module, one registry line) reaches the tables, the
export, bisect's search direction and the report's answer without any other change.

The dummy kind below is a FAKE: its records are made up, nothing is measured."""

from __future__ import annotations

import ast
import csv
import dataclasses
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from harness import workloads
from harness.workloads.base import Metric, Timed, Traits
from tests.studygen import record_dict, write_run, write_study_yaml

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "harness"


# --- no branch on a kind's name outside harness/workloads/ ---------------------------------------

def _named(node: ast.AST, names: set[str]) -> list[ast.Constant]:
    """String constants naming a kind in `node`, itself or as an element of a tuple, list or set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
        return [node]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [c for e in node.elts for c in _named(e, names)]
    return []


def kind_branches(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, kind name) of every comparison or `in` test against a kind's name, every dict key that
    is one (a lookup table by kind) and every `case` on one."""
    hits: list[ast.Constant] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            hits += [c for operand in (node.left, *node.comparators) for c in _named(operand, names)]
        elif isinstance(node, ast.Dict):
            hits += [c for k in node.keys if k is not None for c in _named(k, names)]
        elif isinstance(node, ast.MatchValue):
            hits += _named(node.value, names)
    return sorted((c.lineno, str(c.value)) for c in hits)


# Not a kind: the record's `serve` section (RunRecord.serve), named by its field.
NOT_A_KIND = {("harness/measure/serve.py", "serve"),
              # Command names that are spelt like a kind: `harness check serve` (the experiments' registry)
              # and the old `harness equivalence` verb (the CLI's table of renamed verbs).
              ("harness/experiments/__init__.py", "serve"), ("harness/cli/__init__.py", "equivalence")}


def test_nothing_outside_workloads_branches_on_a_kind_name():
    names = set(workloads.KINDS)
    found = []
    for path in sorted(HARNESS.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("harness/workloads/"):
            continue
        found += [f"{rel}:{line}: {name!r}" for line, name in kind_branches(path.read_text(encoding="utf-8"), names)
                  if (rel, name) not in NOT_A_KIND]
    assert not found, ("branch on a workload kind's name; ask workloads.metric_of / traits_of instead:\n"
                       + "\n".join(found))


def test_the_scan_finds_each_planted_branch():
    names = {"throughput", "latency"}
    planted = '''
def f(kind, r):
    a = r["x"] if kind == "throughput" else r["y"]
    if kind not in ("throughput", "latency"):
        return None
    unit = {"latency": "ms/tok"}[kind]
    match kind:
        case "latency":
            return 1
    return "throughput" != kind
'''
    assert kind_branches(planted, names) == [(3, "throughput"), (4, "latency"), (4, "throughput"),
                                             (6, "latency"), (8, "latency"), (10, "throughput")]
    # Naming a kind is not branching on it: an argument, a default, a folder name.
    assert kind_branches('table(canon, "throughput")\ndef g(kind="latency"): return kind\n', names) == []


# --- a dummy kind with its own metric -------------------------------------------------------------

DUMMY = "dummy"
# Its own field, unit, direction, title and format; requests_per_s is a record field no shipped kind
# takes as its metric.
DUMMY_METRIC = Metric(key="requests_per_s", unit="req/s", higher_is_better=True,
                      title="Dummy requests (req/s, higher is better)", digits=3, spoken="dummy requests per s")


@dataclasses.dataclass(frozen=True, kw_only=True)
class _DummyParams:
    batch_size: int = 1
    iterations: int = 2


def _dummy_module() -> types.ModuleType:
    mod = types.ModuleType("tests._dummy_kind")
    mod.NAME = DUMMY
    mod.Params = _DummyParams
    mod.METRIC = DUMMY_METRIC
    mod.TRAITS = Traits()
    mod.prompt_groups = lambda work, build: [build(work["batch_size"], work["seed"] + i)
                                             for i in range(work["iterations"])]
    mod.warmup_prompts = lambda work, build: build(1, work["seed"] + 10_000)

    def metrics(t: Timed) -> dict[str, Any]:
        return {"requests_per_s": t.num_seqs / t.seconds}
    mod.metrics = metrics
    return mod


@pytest.fixture
def dummy_kind(monkeypatch):
    """The dummy kind registered as a kind is: its module, and one line in KINDS."""
    monkeypatch.setitem(sys.modules, "tests._dummy_kind", _dummy_module())
    monkeypatch.setitem(workloads.KINDS, DUMMY, "tests._dummy_kind")
    return DUMMY


LEGS = [("cpu-old", "old"), ("cpu-new", "new")]
VALUES = {("cpu-old", "fast-model"): [10.0, 10.2, 9.9], ("cpu-new", "fast-model"): [12.0, 12.1, 11.9],
          ("cpu-old", "slow-model"): [4.0, 4.1, 3.9], ("cpu-new", "slow-model"): [3.0, 3.1, 2.9]}


def _dummy_study(root: Path) -> Path:
    study = root / "dummy-study"
    write_study_yaml(study, LEGS)
    for (leg, model), values in VALUES.items():
        label = dict(LEGS)[leg]
        for rep, v in enumerate(values, 1):
            write_run(study, record_dict(leg=leg, leg_label=label, model=model, workload="toy", kind=DUMMY,
                                         repeat=rep, study=study.name, metrics={"requests_per_s": v}))
    return study


def test_the_one_lookup_answers_for_a_new_kind(dummy_kind):
    assert workloads.metric_of(DUMMY) is DUMMY_METRIC
    assert workloads.traits_of(DUMMY) == Traits()
    assert workloads.metric_fields()[-1] == "requests_per_s"
    from harness.measure.scenario import prompts_per_pass

    assert prompts_per_pass(DUMMY, {"batch_size": 3, "iterations": 4}) == 12


def test_a_new_kind_reaches_tables_export_and_the_answer(dummy_kind, tmp_path):
    from harness.analyze.canonical import canonicalize
    from harness.analyze.dataset import columns, load
    from harness.analyze.derive import derive_into
    from harness.analyze.claims.base import steps
    from harness.publish.sections.answer import answer
    from harness.publish.study import load_study

    study = _dummy_study(tmp_path)
    ds = load(study)
    assert "requests_per_s" in columns() and ds.problems == ()
    canon = canonicalize(ds)
    assert set(canon.cells["kind"]) == {DUMMY} and len(canon.cells) == 4

    out = tmp_path / "derived"
    derive_into(study, out)
    table = (out / "tables" / f"{DUMMY}.md").read_text(encoding="utf-8")
    assert DUMMY_METRIC.title in table
    assert "12.000" in table and "3.000" in table            # its own format: three decimals
    rows = list(csv.DictReader((out / "export" / "canonical.csv").open(encoding="utf-8")))
    assert {(r["kind"], r["metric"], r["unit"]) for r in rows} == {(DUMMY, "requests_per_s", "req/s")}
    said = (out / "export" / "DATA_DICTIONARY.md").read_text(encoding="utf-8")
    assert "`dummy` (metric: dummy requests per s, higher is better)" in said and "`req/s`" in said

    # Its direction: higher is better, so the new leg is faster on the first model, slower on the second.
    by_model = {s.model: s for s in steps(canon, "cpu-old", "cpu-new", DUMMY)}
    assert by_model["fast-model"].ratio.value == pytest.approx(12.0 / 10.0)
    assert by_model["slow-model"].ratio.value == pytest.approx(3.0 / 4.0)
    cells = {c.model: c for c in answer(load_study(study)).cells if c.kind == DUMMY}
    assert cells["fast-model"].ratio == pytest.approx(1.2) and cells["fast-model"].cls == "faster"
    assert cells["slow-model"].ratio == pytest.approx(0.75) and cells["slow-model"].cls == "slower"


def test_bisect_searches_in_a_new_kinds_direction(dummy_kind, tmp_path, monkeypatch):
    from harness.experiments import bisect as bis
    from harness.experiments.bisect import BisectArgs, Measurement

    # The H200 ablation scenario with its latency workload declared as the dummy kind instead.
    real = bis.load_scenario

    def with_dummy(name):  # noqa: ANN001, ANN202
        sc = real(name)
        wls = [w.model_copy(update={"kind": DUMMY}) if w.name == "fixed-batch-32" else w for w in sc.workloads]
        return sc.model_copy(update={"workloads": wls})

    monkeypatch.setattr(bis, "load_scenario", with_dummy)
    monkeypatch.setattr(bis, "index_url", lambda: pytest.fail("asked for the package index"))
    # FAKE measurement: req/s per release; higher is better, so the drop at 0.25.1 is the regression.
    centres = {"0.24.0": 10.0, "0.25.0": 10.0, "0.25.1": 8.0, "0.25.2": 8.0, "0.26.0": 8.0}

    def fake(versions):  # noqa: ANN001, ANN202
        return [Measurement(leg=f"leg-{v}", samples=tuple(centres[v] * f for f in (0.995, 1.0, 1.005)))
                for v in versions]

    args = BisectArgs(scenario="h200-ablation", good="h200-0.24.0", bad="h200-0.26.0",
                      model="OLMoE-1B-7B (dummy weights)", workload="fixed-batch-32", repeats=3, threshold=0.01,
                      versions=("0.25.0", "0.25.1"), results=tmp_path / "bisect")
    rec, _ = bis.bisect(args, measure=fake)
    assert rec.inputs.metric == "requests_per_s" and rec.inputs.higher_is_better is True
    assert rec.conclusion.first_differing == "0.25.1"
    bad = next(s for s in rec.steps if s.version == "0.26.0")
    assert bad.ratio is not None and bad.ratio < 1      # slower, read the dummy's way (new/old)
    assert "req/s" in bis.summary_md(bis.summary(rec))
