"""Engine-instance variance per workload, what would decide a cell, and the table simulation at measured
components (harness.analyze.engine_variance, harness.analyze.simulation)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.analyze import engine_variance as ev
from harness.analyze import simulation as sim
from harness.analyze.dataset import load
from harness.core.errors import UserError
from harness.analyze.significance import decide_table, decided_how, fpr_limit, nested_paired

ROOT = Path(__file__).resolve().parents[1]
PAIRED = ROOT / "results" / "cpu-tiny-paired"


@pytest.mark.parametrize("engine_sd", [None, 0.01, 0.03])
def test_the_vectorised_table_rule_is_the_tables_rule(engine_sd):
    rng = np.random.default_rng(5)
    reps, cells, b, k = 300, 4, 4, 3
    d = rng.normal(0.0, 0.04, (reps, cells, b, k)) + rng.normal(0.0, 0.02, (reps, cells, b, 1)) \
        + rng.choice([0.0, 0.03, -0.06], (reps, cells, 1, 1))
    parts = [sim.nested_p(d[:, c], margin=0.05, engine_sd=engine_sd) for c in range(cells)]
    codes = sim.bh_codes(*(np.stack([p[i] for p in parts], axis=1) for i in range(3)))
    word = {"faster": 1, "slower": -1, "equivalent": 2, "undecided": 0}
    for r in range(reps):
        tests = [nested_paired(list(d[r, c]), margin=0.05, engine_sd=engine_sd).test for c in range(cells)]
        assert [word[v] for v in decide_table(tests)] == list(codes[r]), r
    assert (codes != 0).any() and (codes == 0).any()


def test_an_aa_table_is_called_different_at_most_at_alpha_and_power_grows_with_the_effect():
    cells = [sim.Component(name=f"c{i}", pair_sd=sd, tau_old=t, tau_new=t)
             for i, (sd, t) in enumerate([(0.04, 0.0), (0.05, 0.01), (0.06, 0.02), (0.05, 0.005)])]
    reps = 20000
    aa = sim.table_rates(cells, 4, 3, reps=reps, seed=3)
    assert aa["false_call"] <= fpr_limit(reps)
    assert 3.0 < aa["equivalent"] + aa["undecided"] <= 4 - aa["false_call"] + 1e-9   # a false call takes a cell
    p = [sim.table_rates(cells, 4, 3, effect=e, reps=4000, seed=4)["power"] for e in (0.03, 0.05, 0.08)]
    assert p[0] < p[1] < p[2]


def test_an_aa_table_stays_at_alpha_with_many_blocks_where_one_procedure_over_each_cells_smaller_p_did_not():
    # At 16 blocks an A/A table at results/cpu-aa's components (pair sd 0.10-0.13, instance sd 0-0.03)
    # has about one cell rightly called equivalent. Benjamini-Hochberg over each cell's smaller p (the
    # rule before) let that call raise the threshold for the other cells' difference p's; the rule now
    # runs the two kinds of test apart, and the difference p's of an A/A are then all null.
    cells = [sim.Component(name=f"c{i}", pair_sd=sd, tau_old=t, tau_new=t)
             for i, (sd, t) in enumerate([(0.135, 0.0275), (0.116, 0.0194), (0.096, 0.0), (0.120, 0.0241)])]
    reps = 20000
    aa = sim.table_rates(cells, 16, 3, reps=reps, seed=11)
    assert aa["equivalent"] > 0.5                      # the setting where the old rule went wrong
    assert aa["false_call"] <= fpr_limit(reps)
    # The same simulated tables under one procedure over each cell's smaller p: over the limit, so the
    # assertion above is one a rule can fail.
    rng = np.random.default_rng(11)
    ps, peqs, signs = [], [], []
    for c in cells:
        u = rng.normal(0.0, c.tau_new, (reps, 16, 1)) - rng.normal(0.0, c.tau_old, (reps, 16, 1))
        p, p_eq, s = sim.nested_p(u + rng.normal(0.0, c.pair_sd, (reps, 16, 3)), margin=0.05)
        ps.append(p), peqs.append(p_eq), signs.append(s)
    p, p_eq = np.stack(ps, axis=1), np.stack(peqs, axis=1)
    use_diff = p <= p_eq
    one = sim._bh_rejected(np.where(use_diff, p, p_eq), alpha=0.05)
    assert float(np.mean((one & use_diff).any(axis=1))) > fpr_limit(reps)


def test_decides_is_the_serial_rules_sizing_on_block_means_and_a_bound_helps_only_when_small():
    m, pv, bv = math.log(1.05), 0.05 ** 2, 2 * 0.01 ** 2
    for b in (3, 5, 8):
        assert ev.decides(m, pv, bv, b, 3, margin=0.05) == decided_how(m, math.sqrt(bv + pv / 3), 0.05, b)
    cost = ev.BlockCost(setup_s=120.0, round_s=25.0, blocks=4)
    plain = ev.cheapest_design([(m, pv, bv)], cost, margin=0.05)
    tight = ev.cheapest_design([(m, pv, bv)], cost, margin=0.05, engine_sd=0.005)
    loose = ev.cheapest_design([(m, pv, bv)], cost, margin=0.05, engine_sd=0.05)
    assert tight.seconds < plain.seconds < loose.seconds
    assert ev.cheapest_design([(math.log(1.09), pv, bv)], cost, margin=0.05).seconds < plain.seconds
    assert plain.seconds == cost.seconds(plain.blocks, plain.pairs)
    # Needing fewer cells of a table is never dearer.
    cells = [(math.log(1.09), pv, bv), (math.log(1.05), pv, bv), (math.log(1.02), pv, bv)]
    assert (ev.cheapest_design(cells, cost, margin=0.05, need=1).seconds
            <= ev.cheapest_design(cells, cost, margin=0.05, need=2).seconds
            <= ev.cheapest_design(cells, cost, margin=0.05, need=3).seconds)


def test_time_to_decide_lines_for_a_shipped_paired_study():
    # Real records (cpu-tiny-paired, 4 blocks x 5 pairs); no A/A study names its legs, so the cells' own
    # blocks give the instance variance, and the line says so.
    ds = load(PAIRED)
    cost = ev.block_cost(ds)
    assert cost is not None and cost.blocks == 4 and cost.setup_s > cost.round_s > 0
    lines = ev.time_to_decide_lines(str(PAIRED), [str(PAIRED)])
    assert "this run's own blocks" in lines[0]
    assert sum(" · " in ln and "x)" in ln for ln in lines) == 4
    assert lines[-3].startswith("  3 of 4 cells in one sweep:") and lines[-2].startswith("  4 of 4 cells")
    assert lines[-1].startswith("  decided in this run:")
    # A cell the study's verdict object decided says so, with that verdict, and the count agrees.
    from harness.analyze.canonical import canonicalize
    from harness.analyze.verdicts import study_verdicts
    decided = [c for c in study_verdicts(canonicalize(ds)).cells if c.verdict in ("faster", "slower", "equivalent")]
    assert decided, "cpu-tiny-paired decides some cell"
    for c in decided:
        assert any(ln.startswith(f"  {c.model} · {c.workload} (") and f"decided in this run ({c.text})" in ln
                   for ln in lines)
    assert f"  decided in this run: {len(decided)} of 4 cells" in lines
    cells, _ = ev.time_to_decide(ds)
    assert all(c.plan is None or c.plan.blocks >= 2 for c in cells)


def test_pair_logs_keep_each_series_blocks_apart():
    logs = ev.pair_logs(load(PAIRED), "cpu-0.27.1", "cpu-0.32.0")
    keys = {k for blocks in logs.values() for k in blocks}
    assert keys == {("cpu-tiny", b) for b in (1, 2, 3, 4)}
    per = ev.by_workload(load(PAIRED), "cpu-0.27.1", "cpu-0.32.0")
    assert len(per) == 4 and all(v.blocks == 4 and v.engine_sd_upper >= v.engine_sd for v in per.values())


def test_bad_study_is_one_line_and_exit_2(tmp_path):
    for args in (["time-to-decide", str(tmp_path / "none")], ["components", str(tmp_path / "none")]):
        out = subprocess.run([sys.executable, "-m", "harness.analyze.engine_variance", *args], capture_output=True,
                             text=True, cwd=ROOT, timeout=120)
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert out.stderr.strip().count("\n") == 0 and "none" in out.stderr


def test_series_verdicts_are_the_tables_own_per_series():
    from harness.analyze import tables
    from harness.analyze.canonical import canonicalize

    ds = load(PAIRED)
    rows = ev.series_verdicts(ds)
    assert {r["series"] for r in rows} == {"cpu-tiny"} and len(rows) == 4
    canon = canonicalize(ds)
    for kind in ("throughput", "latency"):
        t = tables.kind_table(canon, kind).data
        col = next(c for c in t.columns if str(c).endswith(" verdict"))
        for r in t.to_dict("records"):
            mine = next(x for x in rows if x["workload"] == r["workload"])
            assert mine["verdict"] == r[col] and mine["kind"] == kind


def test_make_mains_deciding_time_takes_the_instance_variance_from_the_aa_studies():
    # What `make main` runs at its end (DECIDE_ARGS): the shipped A/A studies name cpu-tiny's two legs.
    inst = [str(ROOT / "results" / "cpu-instance-variance"), str(ROOT / "results" / "cpu-aa")]
    taus = ev.instance_taus([load(p) for p in inst])
    assert {leg for leg, _ in taus} >= {"cpu-0.27.1", "cpu-0.32.0"}
    cells, _ = ev.time_to_decide(load(PAIRED), instances=[load(p) for p in inst])
    assert len(cells) == 4 and all(c.from_instances for c in cells)
    lines = ev.time_to_decide_lines(str(PAIRED), inst)
    assert "results/cpu-instance-variance" in lines[0] and "results/cpu-aa" in lines[0]
    out = subprocess.run(["make", "-n", "main", "MAIN_STUDY=x"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert "harness.analyze.engine_variance time-to-decide results/x --instances" in out.stdout


def test_pooled_components_count_every_studys_blocks_as_instances_of_their_own():
    # Two shipped paired studies of the same legs (cpu-tiny-paired: 4 blocks; cpu-modes' paired blocks):
    # pooled, each study's blocks stay its own cells (about that study's mean), the pairs and blocks add up,
    # and each cell's upper limit has the studies' degrees of freedom together (a tighter bound than one's).
    a, b = load(PAIRED), load(ROOT / "results" / "cpu-tiny-serial")
    legs = ("cpu-0.27.1", "cpu-0.32.0")
    c = load(ROOT / "results" / "cpu-modes")
    logs = ev.study_pair_logs([a, c], *legs)
    assert {k[0] for k in logs} == {"cpu-tiny-paired", "cpu-modes"}
    one, both = ev.engine_variance(a, *legs), ev.engine_variance(a, *legs, pool=[c])
    assert both.blocks == one.blocks + ev.engine_variance(c, *legs).blocks
    assert both.pairs == one.pairs + ev.engine_variance(c, *legs).pairs
    # A shift of the whole study (every pair of the second study moved by 0.2) is no instance variance.
    shifted = {k: {bk: [d + (0.2 if k[0] == "cpu-modes" else 0.0) for d in bl] for bk, bl in v.items()}
               for k, v in logs.items()}
    assert ev.estimate(shifted).engine_sd == pytest.approx(ev.estimate(logs).engine_sd)
    cell = next(iter(ev.by_workload(a, *legs)))
    assert ev.by_workload(a, *legs, pool=[c])[cell].engine_sd_upper <= ev.by_workload(a, *legs)[cell].engine_sd_upper * 1.5
    with pytest.raises(UserError, match="named twice"):
        ev.study_pair_logs([a, a], *legs)
    assert ev.engine_variance(b, *legs).blocks == 0   # a serial study has no paired blocks to pool
    out = subprocess.run([sys.executable, "-m", "harness.analyze.engine_variance", "components",
                          str(PAIRED), "--pool", str(ROOT / "results" / "cpu-modes")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and "pooled with" in out.stdout, out.stderr
    out = subprocess.run([sys.executable, "-m", "harness.analyze.engine_variance", "time-to-decide",
                          str(PAIRED), "--pool", str(ROOT / "results" / "cpu-modes")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and "results/cpu-modes together" in out.stdout, out.stderr


def test_make_mains_deciding_time_pools_the_shipped_idle_host_runs():
    # DECIDE_ARGS pools the shipped make-main runs; the pooled section sizes the design from their blocks
    # together, and a run that is itself among the pooled folders is counted once.
    out = subprocess.run(["make", "-n", "main", "MAIN_STUDY=x"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    pool = ["results/cpu-tiny", "results/cpu-tiny-run1", "results/cpu-tiny-run2", "results/cpu-tiny-paired"]
    assert "--pool " + " ".join(pool) in " ".join(out.stdout.split())
    lines = ev.time_to_decide_lines(str(ROOT / "results" / "cpu-tiny-run1"), [],
                                    [str(ROOT / p) for p in pool])
    at = next(i for i, x in enumerate(lines) if x.startswith("the same at the ratios"))
    assert "(4 studies' blocks" in lines[at] and "cpu-tiny-run1," not in lines[at]
    assert sum("cells in one sweep" in x for x in lines[at:]) == 2
    own, _ = ev.time_to_decide(load(ROOT / "results" / "cpu-tiny-run1"))
    pooled, _ = ev.time_to_decide(load(ROOT / "results" / "cpu-tiny-run1"),
                                  pool=[load(ROOT / p) for p in pool if p != "results/cpu-tiny-run1"])
    # The pooled ratio of a cell is the mean over every study's pairs, not this run's alone.
    assert any(abs(a.ratio - b.ratio) > 1e-6 for a, b in zip(own, pooled))


def test_time_to_decide_sizes_every_line_at_the_margin_the_verdicts_use(tmp_path):
    # A GPU study that declares no margin (a copy of h200-aa without its `margin:` line): its verdicts use
    # the GPU default (±2%), and so do the per-cell plans and the table lines (which took 5% whenever
    # study.yaml named none).
    import shutil

    from harness.analyze.canonical import canonicalize
    from harness.analyze.verdicts import study_margin

    study = tmp_path / "h200-aa"
    shutil.copytree(ROOT / "results" / "h200-aa", study, ignore=shutil.ignore_patterns("report", "derived"))
    y = study / "study.yaml"
    y.write_text("".join(ln for ln in y.read_text().splitlines(True) if not ln.startswith("margin:")))
    ds = load(study)
    margin, source = study_margin(canonicalize(ds))
    assert margin == 0.02 and "default" in source
    cells, cost = ev.time_to_decide(ds)
    assert cells and cost is not None
    params = [(math.log(c.ratio), c.pair_var, c.block_var) for c in cells]
    want = ev.cheapest_design(params, cost, margin=margin, need=len(cells))
    lines = ev.time_to_decide_lines(str(study))
    said = next(x for x in lines if x.startswith(f"  {len(cells)} of {len(cells)} cells in one sweep:"))
    assert (f"{want.blocks} blocks x {want.pairs} pairs" in said) if want else "no design" in said
