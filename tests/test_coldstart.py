"""Cold engines read from vLLM's own log lines (copied from shipped H200 and CPU records), and the
summary's sign test over cells, one per cold engine."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.analyze import coldstart as cs

ROOT = Path(__file__).resolve().parents[1]
COMPILED = ("(EngineCore pid=1028) INFO 12-02 06:30:57 [backends.py:393] Compiling a graph for compile range "
            "(1, 16384) takes 11.48 s")
CACHED = ("(EngineCore pid=2600) INFO 12-02 06:36:14 [backends.py:292] Directly load the compiled graph(s) for "
          "compile range (1, 16384) from the cache, took 2.053 s")
CPU_COMPILED = ("(Worker pid=5752) WARNING 11-30 00:48:07 [decorators.py:333] [backbone] Compiling model again due "
                "to a load failure from /x/torch_aot_compile/18f70b70e61a798d54")
EAGER = ("WARNING 12-01 15:42:53 [vllm.py:1194] Enforce eager set, disabling torch.compile and CUDAGraphs. This is "
         "equivalent to setting -cc.mode=none -cc.cudagraph_mode=none")


@pytest.mark.parametrize(("text", "state"), [(COMPILED, "compiled"), (CACHED, "cached"), (CPU_COMPILED, "compiled"),
                                             (EAGER, "eager"), ("INFO loading weights", None)])
def test_compile_state_from_vllms_log(text: str, state: str | None) -> None:
    assert cs.compile_state("noise\n" + text + "\nmore") == state


def test_a_grouped_run_reads_its_engines_log(tmp_path: Path) -> None:
    # With engine reuse the engine starts in the group's log; the run's own slice holds only its workload.
    # The logs and the record come through the Dataset, never from the run folder here.
    from harness.analyze.dataset import load
    from studygen import record_dict, write_run

    engine = {"mode": "per-group", "group_id": "g", "instance": 1, "position": 1,
              "group_log": "../../engine-default-r1-1/run.log"}
    run = write_run(tmp_path, record_dict(engine=engine, manifest={"host": "h", "cpu_model": "c"}),
                    log="INFO throughput ...")
    (run.parents[1] / "engine-default-r1-1").mkdir()
    (run.parents[1] / "engine-default-r1-1" / "run.log").write_text(COMPILED)
    ds = load(tmp_path)
    (rd,) = ds.records["run_dir"]
    assert cs.run_state(ds, rd) == ("compiled", "h/c")
    run2 = write_run(tmp_path / "b", record_dict(manifest={"nvidia_smi": {"gpus": [{"uuid": "GPU-1"}]}}))
    ds2 = load(tmp_path / "b")
    assert cs.run_state(ds2, str(run2.relative_to(tmp_path / "b"))) == (None, "GPU-1")


def _frame(rows: list[tuple]) -> pd.DataFrame:
    cols = ["series", "leg", "model", "workload", "arm", "repeat", "kind", "value", "state", "machine",
            "engine_init_s", "position", "run_dir"]
    return pd.DataFrame([r + ("",) for r in rows], columns=cols)


def test_the_sign_test_counts_one_cell_per_cold_engine_and_prefers_the_same_machine() -> None:
    rows = []
    for i in range(6):  # six cold engines, each slower on its first workload, not on its second
        m = f"w{i}"
        rows += [("s", "A", m, "first", "default", 1, "throughput", 95.0, "compiled", "M1", 90.0, 1),
                 ("s", "A", m, "first", "default", 2, "throughput", 100.0, "cached", "M1", 40.0, 1),
                 ("s", "A", m, "first", "default", 3, "throughput", 90.0, "cached", "M2", 40.0, 1),
                 ("s", "A", m, "second", "default", 1, "latency", 2.0, "compiled", "M1", 0.0, 2),
                 ("s", "A", m, "second", "default", 2, "latency", 2.0, "cached", "M1", 0.0, 2)]
    sm = cs.summarize(_frame(rows))
    assert sm.cold_runs == 12 and len(sm.cells) == 12
    first = [c for c in sm.cells if c.first]
    assert all(c.same_machine and c.speed == pytest.approx(0.95) for c in first)  # M2's 90 is not its warm run
    assert sm.first[:2] == (6, 6) and sm.first[2] == pytest.approx(2 / 2 ** 6)
    assert sm.later == (0, 6)


def test_too_few_cells_give_no_p() -> None:
    rows = [("s", "A", "m", "w", "default", 1, "throughput", 95.0, "compiled", "M", 90.0, 1),
            ("s", "A", "m", "w", "default", 2, "throughput", 100.0, "cached", "M", 40.0, 1)]
    assert cs.summarize(_frame(rows)).first == (1, 1, None)


def test_the_shipped_h200_study_names_its_cold_first_workloads() -> None:
    # From the shipped records: OLMoE-1B-7B mixed on 0.24.0, repeat 1, was its lease's first engine of that
    # leg and model (83 s to start against 40 s), and measured 79% of the speed of the same machine's warm runs.
    from harness.publish import report

    st = report.load_study(ROOT / "results" / "h200-ablation")
    sm = report._cold.coldstart_section(st)
    cell = next(c for c in sm.cells if c.model.startswith("OLMoE") and c.workload == "mixed" and c.leg == "h200-0.24.0")
    assert cell.first and cell.cold_repeats == (1,) and cell.same_machine and cell.speed < 0.8
    assert "### Cold engines" in report.coldstart_md(st)


def test_the_sign_test_verdict_is_analyze_s_and_reads_the_direction() -> None:
    # The words the report prints come from the summary (publish/ only formats them).
    def sm(first: tuple[int, int, float | None]) -> cs.ColdSummary:
        return cs.ColdSummary(runs=0, cold_runs=0, cells=(), first=first, later=(0, 0))

    assert sm((6, 6, 0.03)).verdict == "slower on a cold engine, beyond chance"
    assert sm((0, 6, 0.03)).verdict == "faster on a cold engine, beyond chance"
    assert sm((4, 6, 0.69)).verdict == sm((1, 2, None)).verdict == "no difference established"
