"""The diagnostic notebooks, executed end to end with papermill on the shipped data (`run=False`:
nothing is measured by these tests). Any cell error fails the test; the outputs are checked for the
study's key numbers, and every figure cell must have drawn a figure.

The CPU variants are executed on the records their documented `run=True` commands measured
(results/cpu-falsification, results/cpu-arms, results/cpu-repeat) and on results/cpu-tiny."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import nbformat
import papermill as pm
import pytest
from jupyter_client.kernelspec import KernelSpecManager

from harness.analyze.studies import common, dispersion, falsification, moe_backend, repeat
from harness.core import paths
from harness.analyze.dataset import load

NB = paths.NOTEBOOKS
STEMS = ("235b_repeat", "moe_backend", "cutlass_falsification", "dispersion")


def _builder():
    spec = importlib.util.spec_from_file_location("build_notebooks", NB / "build_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def execute(stem: str, out_dir: Path, **params) -> nbformat.NotebookNode:
    out = out_dir / f"{stem}.ipynb"
    pm.execute_notebook(str(NB / f"{stem}.ipynb"), str(out), parameters=params, kernel_name="python3",
                        cwd=str(paths.PROJ_ROOT), progress_bar=False)
    return nbformat.read(out, as_version=4)


def text_of(nb: nbformat.NotebookNode) -> str:
    out = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            if o.output_type == "stream":
                out.append(o.text)
            elif o.output_type in ("display_data", "execute_result"):
                out.append(o.data.get("text/markdown") or o.data.get("text/plain", ""))
    return "\n".join(out)


def figures_drawn(nb: nbformat.NotebookNode) -> dict[str, bool]:
    """label -> whether the cell that carries it output a PNG."""
    found = {}
    for c in nb.cells:
        m = re.match(r"#\| label: (fig-[\w-]+)", c.source) if c.cell_type == "code" else None
        if m:
            found[m.group(1)] = any(o.output_type in ("display_data", "execute_result") and "image/png" in o.data
                                    for o in c.get("outputs", []))
    return found


def study_has_runs(name: str) -> bool:
    return any((paths.RESULTS / name / "runs").glob("**/results.json"))


# --- what the notebooks are -------------------------------------------------------------------------

def test_the_notebooks_on_disk_are_what_the_builder_builds():
    assert _builder().main(["--check"]) == 0


@pytest.mark.parametrize("stem", STEMS)
def test_a_notebook_reads_parameters_imports_then_calls(stem):
    nb = nbformat.read(NB / f"{stem}.ipynb", as_version=4)
    first, params, imports = nb.cells[:3]
    assert first.cell_type == "markdown" and f"papermill notebooks/{stem}.ipynb out.ipynb -k python3" in first.source
    assert "CPU variant, measured for real" in first.source and "results/cpu-" in first.source
    assert params.metadata.get("tags") == ["parameters"]
    # papermill must read every parameter (a comment it cannot parse hides the name from -p checks).
    declared = [ln.split("=")[0].strip() for ln in params.source.splitlines() if ln.strip()]
    assert list(pm.inspect_notebook(str(NB / f"{stem}.ipynb"))) == declared
    assert sum("parameters" in c.metadata.get("tags", []) for c in nb.cells) == 1
    studies = [s for m in re.finditer(r"^from harness\.(?:analyze\.studies|experiments) import (.+)$", imports.source, re.M)
               for s in m.group(1).split(", ")]
    body = "\n".join(c.source for c in nb.cells[3:] if c.cell_type == "code")
    assert studies and all(f"{s}." in body for s in studies), "imports the study modules it calls, and only those"
    code = [c for c in nb.cells[3:] if c.cell_type == "code"]
    assert all("import " not in c.source for c in code), "one import cell"
    assert all(len(c.source.splitlines()) <= 12 for c in code), "cells stay short: logic lives in harness"
    assert any(c.source.startswith("#| label: fig-") for c in code)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert all(not c.get("outputs") for c in code), "committed notebooks carry no outputs"


def test_every_cpu_variant_command_names_run_true_or_measured_records():
    for stem in STEMS:
        md = nbformat.read(NB / f"{stem}.ipynb", as_version=4).cells[0].source
        cmd = md.split("CPU variant")[1]
        assert ("-p run True" in cmd) or ("results/cpu-tiny" in cmd), stem
    readme = (NB / "README.md").read_text()
    for stem in STEMS:
        assert f"notebooks/{stem}.ipynb" in readme


def test_the_python3_kernel_is_this_environment():
    spec = KernelSpecManager().get_kernel_spec("python3")
    # jupyter_client runs a bare "python" as the interpreter that starts the kernel: this one.
    assert spec.argv[0] in ("python", "python3", sys.executable)
    assert spec.language == "python"


# --- executed on the published B200 data ------------------------------------------------------------

@pytest.fixture(scope="module")
def b200_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("nb")
    return {stem: execute(stem, out) for stem in STEMS}


def test_235b_repeat_reproduces_the_published_repeat_table(b200_runs):
    nb = b200_runs["235b_repeat"]
    text = text_of(nb)
    assert ("| image | 7,030 / 6,985 / 6,948 | 6,985 | 4,862 / 4,919 / 5,049 | 4,919 | 0.70x | [0.68, 0.74] | slower "
            "| 1.2% / 3.8% | 0.5% / 1.2% | 42.0% | 11.0x |") in text
    assert "| text-only | 4,503 / 4,512 / 4,482 | 4,503 | 3,947 / 3,956 / 3,953 | 3,953 | 0.88x |" in text
    assert "| video | 1,406 / 1,460 / 1,410 | 1,410 | 1,422 / 1,450 / 1,478 | 1,450 | 1.03x |" in text
    assert "image: 26/18 = 0.70x [0.68, 0.74], slower; the medians differ by 42.0%" in text
    assert "signal, not noise" in text and "not distinguishable from the repeat spread" in text
    # "Repeat spread is under 1.5%": holds for 0.18 image (1.2%), not for 0.26 image under range/median.
    assert "| image | 0.18 | range/median | 1.2% | True |" in text
    assert "range/median: over 1.5% for 0.26 image (3.8%)" in text
    assert "0.26 image: median of repeats 4,919 vs main table 4,896 (+0.5%)" in text
    assert "transcribed" in text
    assert figures_drawn(nb) == {"fig-repeat-samples": True, "fig-ratio-vs-decode": True}


def test_moe_backend_shows_arms_routing_and_refusals(b200_runs):
    nb = b200_runs["moe_backend"]
    text = text_of(nb)
    assert "| 0.18 | `auto` | 7,457 | 1/1 | reference | Modular | none | record manifest | — |" in text
    assert "| 0.26 | `auto` | 5,536 | 1/1 | 0.74x | Monolithic | 140 SMs |" in text
    assert "| 0.26 | `triton` | 5,782 | 1/1 | 0.78x | Modular | none |" in text
    assert "| 0.26 | `cutlass` | refused | 0/1 |" in text and "does not support quantization scheme" in text
    assert "The routing alone does not explain the gap" in text
    assert figures_drawn(nb) == {"fig-moe-arms": True}


def test_cutlass_falsification_concludes_the_cutlass_pin(b200_runs):
    nb = b200_runs["cutlass_falsification"]
    text = text_of(nb)
    assert "| baseline | rc=1 | rc=1 | rc=1 | rc=1 |" in text
    assert "| cutlass-dsl-4.5.3 (pin nvidia-cutlass-dsl==4.5.3) | rc=0 | rc=0 | rc=0 | rc=0 |" in text
    assert "Only `cutlass-dsl-4.5.3` flips every outcome: 4 of 4 model(s) fail under the baseline" in text
    assert "`control-0.26` (leg gpu-0.26.0 instead of gpu-0.18.0) also flips every outcome" in text
    assert figures_drawn(nb) == {"fig-falsification-matrix": True}


def test_dispersion_covers_every_model_and_leg(b200_runs):
    nb = b200_runs["dispersion"]
    text = text_of(nb)
    assert "series main, rep235; 196 canonical cells, 6 with repeats" in text
    assert "| GLM-5.2-NVFP4 | failed | ok | ok |" in text
    assert "| main | 26/18 | single pass | 58 |" in text and "| rep235 | 26/18 | slower | 2 |" in text
    assert "| rep235 | Qwen3-VL-235B-A22B-Instruct-FP8 | image | 26/18 | 0.70x | [0.68, 0.74] | slower | 3 | 3 |" in text
    assert figures_drawn(nb) == {"fig-coverage": True, "fig-dispersion": True, "fig-ratio-dots": True}


def test_dispersion_on_a_one_leg_study_has_no_ratio_and_no_error(tmp_path):
    nb = execute("dispersion", tmp_path, results_dir="results/h200")
    text = text_of(nb)
    assert "0 ratios" in text and all(figures_drawn(nb).values())


def test_a_cell_error_fails_the_run(tmp_path):
    with pytest.raises(pm.PapermillExecutionError, match="no records of series 'nope'"):
        execute("235b_repeat", tmp_path, series="nope")


# --- the CPU variants, on the records their run=True commands measured -------------------------------

@pytest.mark.skipif(not study_has_runs("cpu-falsification"), reason="results/cpu-falsification not measured")
def test_cpu_falsification_variant(tmp_path):
    nb = execute("cutlass_falsification", tmp_path, results_dir="results/cpu-falsification",
                 scenario="cpu-falsification", series="cpu-falsification")
    text = text_of(nb)
    m = falsification.falsification_matrix(load(paths.RESULTS / "cpu-falsification"), series="cpu-falsification",
                                scenario="cpu-falsification")
    c = falsification.single_variable_conclusion(m)
    assert c.flips_every == ("kv-cache-1g",) and c.flips_none == ("enforce-eager", "max-model-len-512", "gpu-mem-0.1")
    assert "Only `kv-cache-1g` flips every outcome" in text and "provenance measured" in text
    assert "less than requested memory for kv" in text
    assert all(figures_drawn(nb).values())


@pytest.mark.skipif(not study_has_runs("cpu-arms"), reason="results/cpu-arms not measured")
def test_cpu_arms_variant(tmp_path):
    nb = execute("moe_backend", tmp_path, results_dir="results/cpu-arms", scenario="cpu-tiny-arms", series="arms",
                 reference="cpu-0.32.0:default")
    text = text_of(nb)
    arms = moe_backend.arm_table(load(paths.RESULTS / "cpu-arms"), series="arms", scenario="cpu-tiny-arms",
                        reference="cpu-0.32.0:default")
    eager = arms.table.set_index("arm").loc["eager"]
    assert eager["enforce_eager"] == "True" and eager["n"] == 2
    assert f"| 0.32 | `eager` | {common.fmt_value(eager['value'], 'throughput')} | 2/2 |" in text
    assert "| 0.32 | eager | — | — | — | True | not logged |" in text
    assert all(figures_drawn(nb).values())


@pytest.mark.skipif(not study_has_runs("cpu-repeat"), reason="results/cpu-repeat not measured")
def test_cpu_repeat_variant(tmp_path):
    nb = execute("235b_repeat", tmp_path, results_dir="results/cpu-repeat", scenario="cpu-tiny", series="cpu-tiny",
                 model="tiny-llama", legs="cpu-0.27.1,cpu-0.32.0", workloads="mixed,long-context", reps=2)
    text = text_of(nb)
    st = repeat.repeat_study(load(paths.RESULTS / "cpu-repeat"), series="cpu-tiny", model="tiny-llama",
                         legs="cpu-0.27.1,cpu-0.32.0", workloads="mixed,long-context")
    assert set(st.table["decode_share_source"]) == {"measured tokens"} and list(st.table["old_n"]) == [2, 2]
    for r in st.table.itertuples():
        assert f"{r.workload}: 32/27 = {r.ratio:.2f}x [{r.ci_low:.2f}, {r.ci_high:.2f}]" in text
    assert "Against decode share" in text
    assert figures_drawn(nb) == {"fig-repeat-samples": True, "fig-ratio-vs-decode": True}


@pytest.mark.skipif(not study_has_runs("cpu-tiny-mm"), reason="results/cpu-tiny-mm not measured")
def test_decode_share_of_the_multimodal_study_is_measured_and_its_order_not_overread():
    """The shipped image/video records carry vLLM's request stats: the decode share is measured decode
    time, and with no ratio outside the repeat noise the rank correlation is said to be no evidence."""
    st = repeat.repeat_study(load(paths.RESULTS / "cpu-tiny-mm"), series="cpu-tiny-mm", model="tiny-qwen2-vl",
                             legs="cpu-0.27.1,cpu-0.32.0")
    assert set(st.table["decode_share_source"]) == {"measured decode time"} and set(st.table["old_n"]) == {3}
    last = repeat.repeat_conclusion(st)[-1]
    assert last.startswith("Against decode share (") and "over 4 workloads" in last
    if not set(st.table["verdict"]) & {"faster", "slower"}:
        assert "is read from the repeat noise and is no evidence either way" in last


@pytest.mark.skipif(not study_has_runs("cpu-tiny-serial"), reason="results/cpu-tiny-serial not measured yet")
@pytest.mark.parametrize("allow_reused", [None, True])
def test_cpu_tiny_dispersion_variant(tmp_path, allow_reused):
    nb = execute("dispersion", tmp_path, results_dir="results/cpu-tiny-serial", allow_reused=allow_reused)
    text = text_of(nb)
    canons = dispersion.canonical_all(load(paths.RESULTS / "cpu-tiny-serial"), allow_reused=allow_reused)
    disp, ratios = dispersion.dispersion_frame(canons), dispersion.ratio_frame(canons)
    assert f"{len(disp)} canonical cells, {int((disp['n'] > 1).sum())} with repeats; {len(ratios)} ratios" in text
    assert all(figures_drawn(nb).values())
