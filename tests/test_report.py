"""The report: index.qmd's cells executed through a real Jupyter kernel (nbclient), REPORT.md, the HTML
page and the dataset card; headline claims checked against the data.

Studies: the transcribed B200 reference (its report must reproduce the published tables' figures),
the measured H200 study, and FAKE studies written by `studygen` with made-up values chosen so that a
claim holds or does not. The quarto path is exercised with a FAKE `quarto` command (quarto cannot be
installed here); everything else is real.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.core import paths

from harness.publish import report
from harness.publish import render as rendering
from harness.core.errors import UserError
from harness.publish.render import ClaimFailed, RenderError, card_body, parse_qmd, render
from harness.analyze.claims import REGISTRY
from harness.publish.report import findings, load_study
from harness.publish.sections.headline import headline

try:
    from published_b200 import plain, read_table
    from studygen import simple_study
    from test_published_tables import ROUNDING_LIMITED
except ImportError:  # tests/ imported as a package
    from tests.published_b200 import plain, read_table
    from tests.studygen import simple_study
    from tests.test_published_tables import ROUNDING_LIMITED

B200 = paths.RESULTS / "b200-reference"
H200 = paths.RESULTS / "h200"
needs_b200 = pytest.mark.skipif(not (B200 / "study.yaml").exists(), reason="results/b200-reference not present")


def _study(tmp: Path, name: str, *, dense_29: float = 1.0, regress: bool = True, b200_claims: bool = True) -> Path:
    """FAKE three-leg study: a dense Llama (3 repeats per leg, 0.29 at `dense_29` x 0.26), a MoE model
    that jumps on 0.29, and (with `regress`) a model slower on 0.26 than on 0.18. With `b200_claims`
    its study.yaml declares the B200 study's claim kinds and model classes."""
    base = [1000.0, 1006.0, 994.0]
    values: dict[tuple[str, str, str], list[float] | None] = {
        ("0.18", "Llama-3.1-8B", "mixed"): base,
        ("0.26", "Llama-3.1-8B", "mixed"): [v * 1.01 for v in base],
        ("0.29", "Llama-3.1-8B", "mixed"): [v * 1.01 * dense_29 for v in base],
        ("0.18", "Mixtral-8x7B", "mixed"): [500.0], ("0.26", "Mixtral-8x7B", "mixed"): [510.0],
        ("0.29", "Mixtral-8x7B", "mixed"): [1300.0],
        ("0.18", "Llama-3.1-8B", "single-request"): [3.8], ("0.26", "Llama-3.1-8B", "single-request"): [3.7],
        ("0.29", "Llama-3.1-8B", "single-request"): [3.7],
        ("0.18", "GLM-5", "mixed"): None, ("0.26", "GLM-5", "mixed"): [400.0], ("0.29", "GLM-5", "mixed"): [420.0],
    }
    if regress:
        values |= {("0.18", "Qwen3-VL-8B", "image"): [700.0], ("0.26", "Qwen3-VL-8B", "image"): [490.0],
                   ("0.29", "Qwen3-VL-8B", "image"): [800.0]}
    d = simple_study(tmp / name, values, model_order=["Llama-3.1-8B", "Mixtral-8x7B", "Qwen3-VL-8B", "GLM-5"])
    if b200_claims:
        _set_report(d, B200_STYLE)
    return d


# The B200 study's own claim kinds and model classes, as a study declares them in study.yaml `report:`.
B200_STYLE = {
    "claims": ["reference-flat", "single-jump", "winners", "flat-class"],
    "model_classes": {
        "rules": [{"name": "MoE", "pattern": r"(?i)mixtral|glm-"}, {"name": "multimodal", "pattern": r"(?i)-vl-"},
                  {"name": "dense", "pattern": r"(?i)llama"}],
        "plain": ["dense", "ASR", "multimodal"],
    },
}


def _set_report(d: Path, block: dict) -> None:
    meta = yaml.safe_load((d / "study.yaml").read_text())
    meta["report"] = {**(meta.get("report") or {}), **block}
    (d / "study.yaml").write_text(yaml.safe_dump(meta))


def _by_id(claims):
    return {c.id: c for c in claims}


# --- claims, without the kernel ------------------------------------------------------------------

def test_flat_claim_holds_then_changes_its_sentence_when_dense_ratios_become_1_2x(tmp_path):
    flat = _by_id(load_study(_study(tmp_path, "flat")).claims)
    c = flat["flat-dense@0.26-0.29"]
    assert c.holds and c.sentence.startswith("Dense models are essentially flat (1.00x")
    assert "interval contains 1.00x on 1 of 1 rows" in c.sentence

    moved = _by_id(load_study(_study(tmp_path, "moved", dense_29=1.2)).claims)
    c = moved["flat-dense@0.26-0.29"]
    assert not c.holds
    assert "essentially flat" not in c.sentence
    assert "not flat: `Llama-3.1-8B` mixed at 1.20x" in c.sentence
    # The reference-model claim moves with it: the spread across legs is now printed as such.
    assert not moved["reference-flat"].holds and "is not flat across the legs" in moved["reference-flat"].sentence


def test_a_strict_claim_that_stops_holding_raises(tmp_path):
    st = load_study(_study(tmp_path, "moved", dense_29=1.2))
    own = {"others": st.series, "study_kinds": st.config.claims, "classes": st.config.model_classes}
    with pytest.raises(ClaimFailed, match=r"claim flat-dense@0\.26-0\.29 no longer holds.*1\.20x"):
        findings(st.canon, strict=["flat-dense@*"], **own)
    # Holding claims pass strict mode; an id the data does not make is refused, not ignored.
    findings(st.canon, strict=["single-jump@0.26-0.29", "not-monotonic"], **own)
    with pytest.raises(ClaimFailed, match="is not made by this study's data"):
        findings(st.canon, strict=["flat-asr@0.26-0.29"], **own)


def test_non_monotonic_claim_follows_the_data(tmp_path):
    yes = _by_id(load_study(_study(tmp_path, "regress")).claims)["not-monotonic"]
    assert yes.holds
    assert ("`Qwen3-VL-8B` is slower on 0.26 than on 0.18 (image 700 → 490, i.e. 0.70x) and is back above 0.18 "
            "only on 0.29 (800)") in yes.sentence
    no = _by_id(load_study(_study(tmp_path, "steady", regress=False)).claims)["not-monotonic"]
    assert not no.holds and no.sentence.startswith("Version progress is monotonic in this data")
    with pytest.raises(ClaimFailed, match="not-monotonic"):
        load_study(_study(tmp_path, "steady2", regress=False), strict_claims="not-monotonic")


def test_study_yaml_can_make_claims_strict(tmp_path):
    d = _study(tmp_path, "declared", dense_29=1.2)
    _set_report(d, {"strict_claims": ["flat-dense@0.26-0.29"]})
    with pytest.raises(ClaimFailed):
        load_study(d)
    assert load_study(d, strict_claims=[]).claims  # an explicit empty list overrides the declaration


def test_a_study_without_a_report_block_gets_only_the_generic_claims(tmp_path):
    st = load_study(_study(tmp_path, "plain", b200_claims=False))
    kinds = {c.id.split("@")[0] for c in st.claims}
    assert kinds == {k.id for k in REGISTRY.values() if k.generic} - {"newest-lowest"}  # no row is flat here
    assert not kinds & {"reference-flat", "single-jump", "winners"} and not any(k.startswith("flat-") for k in kinds)
    h = headline(st)
    assert len(h.bullets) == 3 and h.bullets[0].startswith("**0.18 → 0.26.** ")
    assert not any("Model classes" in n for n in h.notes)  # no model classes declared: no class note
    assert "diagnostic notebooks" not in report.diagnostics_intro_md(st)
    # The same data with the B200 study's block makes its claims, and the page says its classes.
    st = load_study(_study(tmp_path, "b200ish"))
    assert {"reference-flat", "single-jump@0.26-0.29", "winners@0.26-0.29", "flat-dense@0.26-0.29"} <= {
        c.id for c in st.claims}
    assert any(n.startswith("_Model classes, from the model names") for n in headline(st).notes)


@pytest.mark.parametrize(("block", "where"), [
    ({"claims": ["no-such-kind"]}, "report.claims[0]: unknown claim kind 'no-such-kind'"),
    ({"claims": ["flat-class"]}, "report.claims[0]: claim kind 'flat-class' needs report.model_classes"),
    ({"notebooks": ["missing.ipynb"]}, "report.notebooks[0]: no such notebook"),
    ({"model_classes": {"rules": [{"name": "x", "pattern": "("}]}}, "report.model_classes.rules[0].pattern"),
    ({"claim": []}, "report.claim: unknown key"),
])
def test_a_bad_report_block_is_one_line_naming_study_yaml_and_the_key(tmp_path, block, where):
    d = _study(tmp_path, "bad", b200_claims=False)
    _set_report(d, block)
    with pytest.raises(UserError) as e:
        load_study(d)
    msg = str(e.value)
    assert msg.startswith(f"{d / 'study.yaml'}: ") and where in msg and "\n" not in msg


@needs_b200
def test_b200_claims_hold_as_published():
    """The published page's headline claims, each checked from the transcribed records."""
    st = load_study(B200)
    c = _by_id(st.claims)
    for cid in ("reference-flat", "runs-at-all@0.18-0.26", "no-general-speedup@0.18-0.26", "single-jump@0.18-0.26",
                "winners@0.26-0.29", "flat-dense@0.26-0.29", "flat-asr@0.26-0.29", "not-monotonic",
                "regression-repeated", "newest-lowest"):
        assert c[cid].holds, (cid, c[cid].sentence)
    # What the data does not support is said as the data says it: two models gain 2x on 0.26 -> 0.29,
    # and Qwen2-VL video is a multimodal row that is not flat.
    assert not c["single-jump@0.26-0.29"].holds
    assert "`Qwen2-VL-7B-Instruct` video at 1.19x" in c["flat-multimodal@0.26-0.29"].sentence


def test_h200_says_every_number_was_measured_counting_reused_runs():
    if not (H200 / "study.yaml").exists():
        pytest.skip("results/h200 not present")
    st = load_study(H200)
    assert st.ds.study.extra.get("allow_reused") is True
    runs = st.canon.runs
    reused = int((runs["reused_by"].notna() & (runs["reused_by"] != runs["invocation_id"])).sum())
    assert reused > 0
    text = report.intro_md(st)
    assert text.startswith("**Every number in this report was measured by this harness**")
    assert f"{reused} of the {len(runs)} runs behind the tables were measured by an earlier invocation" in text
    assert "reused by `--resume`" in text and "so these too are measured numbers" in text
    assert "ranscribed" not in text
    # One leg: no comparison is claimed.
    assert st.claims == () and "compares no versions" in report.headline_md(st)


# --- the qmd -------------------------------------------------------------------------------------

def test_index_qmd_is_thin_parameters_import_and_short_cells():
    header, chunks = parse_qmd(rendering.QMD.read_text(encoding="utf-8"))
    assert header["execute"]["echo"] is False and header["format"]["gfm"]["output-file"] == "REPORT.md"
    code = [c for c in chunks if c.kind == "code"]
    assert "parameters" in code[0].options["tags"] and "study =" in code[0].text
    assert code[1].text.startswith("from harness.publish import report")
    for c in code[2:]:
        assert c.options.get("output") == "asis" or str(c.options.get("label", "")).startswith("fig-"), c.text
        assert len(c.text.splitlines()) <= 3, c.text
    labels = {c.options.get("label") for c in code}
    assert {"fig-coverage", "fig-ratios", "fig-dispersion"} <= labels


def test_cells_honour_echo_and_asis_through_the_kernel(tmp_path):
    qmd = tmp_path / "t.qmd"
    qmd.write_text(textwrap.dedent('''\
        ---
        execute:
          echo: false
        ---

        ```{python}
        #| tags: [parameters]
        x = 1
        ```

        Text with a reference to @fig-one.

        ```{python}
        #| output: asis
        print(f"**x is {x}**")
        ```

        ```{python}
        #| echo: true
        print("plain")
        ```

        ```{python}
        #| label: fig-one
        #| fig-cap: "One figure."
        from harness.publish.report import Png
        import base64
        Png(base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="))
        ```
        '''))
    header, chunks = parse_qmd(qmd.read_text())
    nb, behind = rendering.to_notebook(chunks, {"x": 7})
    rendering.execute(nb, cwd=tmp_path)
    md, figs = rendering.stitch(nb, behind, header, tmp_path / "figures")
    assert "**x is 7**" in md                                  # injected parameter, asis output
    assert "x = 1" not in md                                   # echo: false
    assert "```python\nprint(\"plain\")\n```" in md and "```\nplain\n```" in md   # echo: true, plain output
    assert "![Figure 1: One figure.](figures/fig-one.png)" in md and "reference to Figure 1." in md
    assert [p.name for p in figs] == ["fig-one.png"] and figs[0].read_bytes()[:4] == b"\x89PNG"


def test_a_cell_that_raises_stops_the_render(tmp_path):
    qmd = tmp_path / "bad.qmd"
    qmd.write_text("```{python}\nraise ValueError('broken cell')\n```\n")
    header, chunks = parse_qmd(qmd.read_text())
    nb, _ = rendering.to_notebook(chunks, {})
    with pytest.raises(RenderError, match="ValueError: broken cell"):
        rendering.execute(nb, cwd=tmp_path)


# --- whole renders through the kernel ------------------------------------------------------------

@pytest.fixture(scope="module")
def b200_render(tmp_path_factory):
    if not (B200 / "study.yaml").exists():
        pytest.skip("results/b200-reference not present")
    out = tmp_path_factory.mktemp("b200") / "report"
    said: list[str] = []
    res = render(B200, out, quarto=False, say=said.append)
    return res, said


def test_b200_render_writes_report_card_html_and_data(b200_render):
    res, said = b200_render
    assert res.engine == "kernel" and "quarto is not on PATH" in said[0]
    md = res.report.read_text(encoding="utf-8")
    card = res.card.read_text(encoding="utf-8")
    assert card_body(card) == md                       # the card's body is the report, byte for byte
    meta = yaml.safe_load(card.split("---\n")[1])
    assert meta["license"] and meta["pretty_name"].startswith("vLLM 0.18 / 0.26 / 0.29")
    assert "transcribed" in meta["tags"] and "benchmark" in meta["tags"]
    default = next(c for c in meta["configs"] if c.get("default"))
    data = pd.read_parquet(res.out_dir / default["data_files"][0]["path"])
    assert len(data) == 190 and set(data["provenance"]) == {"transcribed"}
    for c in meta["configs"]:
        assert (res.out_dir / c["data_files"][0]["path"]).exists()
    html = res.html.read_text(encoding="utf-8")
    # A short title (the study and its legs); study.yaml's sentence is the line under it.
    assert "<table>" in html and '<img alt="Figure 1' in html and "<title>b200-reference: 0.18 → 0.26 → 0.29<" in html
    assert md.startswith("# b200-reference: 0.18 → 0.26 → 0.29\n\n_vLLM 0.18 / 0.26 / 0.29")
    for name in ("fig-answer.png", "fig-coverage.png", "fig-ratios.png", "fig-dispersion.png"):
        assert (res.out_dir / "figures" / name).read_bytes()[:4] == b"\x89PNG"
        assert f"figures/{name}" in md and f'src="figures/{name}"' in html
    assert (res.out_dir / "CANONICAL.md").exists() and (res.out_dir / "MANIFEST.md").exists()


def test_b200_report_is_labelled_transcribed(b200_render):
    md = b200_render[0].report.read_text(encoding="utf-8")
    # The answer comes first and says at once that the figures are transcribed; the full provenance
    # paragraph opens "About this dataset".
    answer = md[md.index("## The answer"):md.index("## Headline findings")]
    assert "The figures are transcribed, not measured" in answer
    about = md[md.index("## About this dataset"):]
    assert about.split("\n\n")[1].startswith("**Transcribed, not measured.** Every figure in this report is "
                                             "transcribed from B200 study report (REPORT.md)")
    assert "None was measured by this harness" in md
    assert "Every number in this report was measured" not in md
    assert md.count("transcribed from B200 study report (REPORT.md), not measured by this harness") >= 3


def _printed_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


@pytest.mark.parametrize("name", ["throughput", "latency"])
def test_b200_report_reproduces_the_published_tables(b200_render, name):
    """Every printed figure, and every printed ratio in the "printed" column beside the recomputed one,
    whose rounding interval must hold it (nothing is flagged: test_published_tables checks the bounds)."""
    md = b200_render[0].report.read_text(encoding="utf-8")
    pub = read_table(name)
    lines = [ln for ln in md.splitlines() if ln.startswith("| `")]
    for row in pub.rows:
        start = _printed_row(row[:6])[:-2] + " | "
        hit = [ln for ln in lines if ln.startswith(start)]
        assert len(hit) >= 1, row
        cells = [c.strip() for c in hit[0].strip("|").split(" | ")]
        printed = cells[7::2]            # each ratio column is followed by its "printed" column
        assert printed == [c for c in row[6:]], (row, cells)
        assert "⚠" not in hit[0]


def test_b200_headline_numbers_are_the_published_ones(b200_render):
    md = b200_render[0].report.read_text(encoding="utf-8")
    for text in (
        "| 0.18 | 13/15 | `Kimi-Linear-48B-A3B-Instruct`, `Qwen2-VL-7B-Instruct`, `Qwen2.5-Omni-7B`, "
        "`Qwen3-VL-235B-A22B-Instruct-FP8`, `Qwen3-VL-8B-Instruct`, `whisper-large-v3` | "
        "`GLM-5.2-NVFP4`, `gemma-4-26B-A4B-it` |",
        "13 of 15 models support a three-way comparison",
        "(21,943 / 22,263 / 22,157 tok/s)",
        "The single large jump is `gpt-oss-120b` mixed at 3.31x (7,304 → 24,184 tok/s)",
        "The winners are `GLM-5.2-NVFP4` mixed at 2.47x, `Qwen3-VL-235B-A22B-Instruct-FP8` image at 2.08x, "
        "`Qwen3-Next-80B-A3B-Instruct` mixed at 1.76x and `Kimi-Linear-48B-A3B-Instruct` mixed at 1.69x",
        "(image 7,004 → 4,896, i.e. 0.70x) and is back above 0.18 only on 0.29 (10,175)",
        "image 0.70x [0.68, 0.74]", "against a gap of 42%",
        "`Qwen3-VL-8B-Instruct` image is flat across all three legs (15,582 / 15,496 / 15,336), with 0.29 "
        "marginally lowest",
        "6 models run on 0.18 only under a dependency pin (`nvidia-cutlass-dsl==4.5.3`)",
        "| 0.18 | 0.18.0 | 2.10.0+cu128 | 12.8 | 4.57.6 | 4.8.0 (7 models) → 4.5.3 (6 models) | "
        "no: nvidia-cutlass-dsl |",
        "Only `cutlass-dsl-4.5.3` flips every outcome",
    ):
        assert text in md, text
    # The H200 companion's figures come from its own transcribed study, named where they are shown.
    h200 = md[md.index("#### The H200 counterpart of each headline"):]
    h200 = h200[:h200.index("\n## ")]
    assert "results/h200-reference" in h200
    for quoted in ("11,290", "6,539", "4,614", "1.03x", "does not transfer", "transfers"):
        assert quoted in h200


def test_generated_study_render_changes_the_flat_sentence(tmp_path):
    """A FAKE study whose 0.26 -> 0.29 dense ratio is 1.2x, rendered through the kernel."""
    d = _study(tmp_path, "moved", dense_29=1.2)
    res = render(d, quarto=False, say=lambda s: None)
    assert res.out_dir == d / "report"
    md = res.report.read_text(encoding="utf-8")
    assert card_body(res.card.read_text(encoding="utf-8")) == md
    assert "not flat: `Llama-3.1-8B` mixed at 1.20x" in md
    assert "Dense models are essentially flat" not in md.split("**0.26 → 0.29.**")[1].split("\n")[0]
    assert "**Every number in this report was measured by this harness**" in md and "ranscribed" not in md
    assert res.html.exists() and (res.out_dir / "export" / "canonical.parquet").exists()


def test_strict_claim_fails_the_cli_loudly_and_writes_nothing(tmp_path):
    d = _study(tmp_path, "moved", dense_29=1.2)
    proc = subprocess.run([sys.executable, "-m", "harness", "report", str(d), "--out", str(tmp_path / "out"),
                           "--no-quarto", "--strict-claim", "flat-dense@0.26-0.29"],
                          capture_output=True, text=True, cwd=paths.PROJ_ROOT)
    assert proc.returncode == 2
    err = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "claim flat-dense@0.26-0.29 no longer holds" in err[0] and "1.20x" in err[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert not list(tmp_path.glob(".report-*"))


# --- the quarto path -----------------------------------------------------------------------------

FAKE_QUARTO = """#!INTERPRETER
# FAKE quarto: records its arguments (one list per call) and writes what `quarto render` would: from
# the qmd, REPORT.md and the executed notebook it keeps; from that notebook, the page.
import json, pathlib, sys
args = sys.argv[1:]
import os
log = pathlib.Path("LOG")
calls = json.loads(log.read_text()) if log.exists() else []
log.write_text(json.dumps(calls + [args + ["QUARTO_PYTHON=" + os.environ.get("QUARTO_PYTHON", "")]]))
src = pathlib.Path(args[1])
out = src.parent            # quarto writes beside the source it renders
if src.suffix == ".qmd":
    params = dict(args[i + 1].split(":", 1) for i, a in enumerate(args) if a == "-P")
    (out / "REPORT.md").write_text("# fake\\n\\nstudy " + params["study"] + "\\n")
    (out / (src.stem + ".quarto_ipynb")).write_text("{}")
else:
    (out / "index.html").write_text("<html></html>\\n")
"""


def test_quarto_on_path_renders_with_the_study_as_a_parameter(tmp_path, monkeypatch):
    """FAKE quarto: what matters is the command line and what render does with quarto's output."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv.json"
    exe = bin_dir / "quarto"
    exe.write_text(FAKE_QUARTO.replace("INTERPRETER", sys.executable).replace("LOG", str(log)))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    d = _study(tmp_path, "q")
    said: list[str] = []
    res = render(d, tmp_path / "out", say=said.append)
    import json
    argv, page = json.loads(log.read_text())
    assert res.engine == "quarto" and said[0].startswith("report: quarto found")
    # A private copy of index.qmd, outside the work tree (quarto writes beside its source).
    assert argv[0] == "render" and argv[1].endswith("/index.qmd") and not argv[1].startswith(str(paths.PROJ_ROOT))
    assert ["-P", f"study:{d.resolve()}"] == argv[argv.index("-P"):argv.index("-P") + 2]
    assert "strict_claims:auto" in argv and argv[-1] == f"QUARTO_PYTHON={sys.executable}"
    # The cells run once: REPORT.md from the qmd, keeping the executed notebook; the page from that
    # notebook, not executed again.
    assert argv[2:4] == ["--to", "gfm"] and "keep-ipynb:true" in argv
    assert page[1] == str(Path(argv[1]).with_suffix(".ipynb")) and page[2:5] == ["--to", "html", "--no-execute"]
    assert "-P" not in page
    md = res.report.read_text()
    assert md == f"# fake\n\nstudy {d.resolve()}\n"
    assert card_body(res.card.read_text()) == md                  # the card is built the same way
    assert (res.out_dir / "export" / "canonical.parquet").exists()
    with pytest.raises(UserError, match="quarto: command not found"):
        monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
        monkeypatch.setattr(rendering, "PROJECT_QUARTO", tmp_path / "nowhere" / "quarto")   # nor `make quarto`'s
        render(d, tmp_path / "out2", quarto=True, say=said.append)


def test_not_a_study_is_one_line_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness", "report", str(tmp_path / "nope")],
                          capture_output=True, text=True, cwd=paths.PROJ_ROOT)
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: {tmp_path / 'nope'}: no such study folder"


# --- answer first, rounding fidelity, one-leg pages -------------------------------------------------

@needs_b200
def test_answer_opens_the_page_with_verdicts_and_failure_causes():
    from harness.publish.sections.answer import answer

    st = load_study(B200)
    ans = answer(st)
    glm = [c for c in ans.shown if c.model == "GLM-5.2-NVFP4" and c.step == "0.18 → 0.26"]
    assert glm and glm[0].verdict == "missing" and "a pin does not fix it" in glm[0].note
    assert "config-unparseable" in glm[0].note
    assert len(glm) == 1 and "mixed" in glm[0].workload and "fixed-batch-32" in glm[0].workload   # merged
    kimi = next(c for c in ans.cells if c.model == "Kimi-Linear-48B-A3B-Instruct" and c.workload == "mixed"
                and c.step == "0.18 → 0.26")
    assert "0.18 passes only under `nvidia-cutlass-dsl==4.5.3`" in kimi.note
    qmd = (paths.PROJ_ROOT / "index.qmd").read_text(encoding="utf-8")
    assert qmd.index("report.answer_md(st)") < qmd.index("report.intro_md(st)") < qmd.index("report.about_md(st)")


@needs_b200
def test_transcribed_ratios_carry_the_rounding_interval_and_the_printed_ratio():
    from harness.analyze import rounding
    from harness.publish.sections.data import kind_table

    assert rounding.half_unit("21,943") == 0.5 and rounding.half_unit("0.18") == 0.005
    st = load_study(B200)
    t = kind_table(st, "latency").display
    row = t[(t["model"] == "`Llama-3.1-8B-Instruct`") & (t["workload"] == "fixed-batch-32")].iloc[0]
    # 0.17 -> 0.18 ms/tok: 0.94x as recomputed, but rounding allows [0.89, 1.00]; the source printed 0.99x.
    assert row["26→29"] == "0.94x [0.89, 1.00]" and row["26→29 printed"] == "0.99x"
    assert not t.apply(lambda col: col.astype(str).str.contains("⚠")).any().any()   # nothing beyond rounding
    p = rounding.Printed(value=1.20, low=0.89, high=1.00)
    assert p.disagrees


def test_one_leg_tables_say_nothing_about_ratios():
    h200 = paths.RESULTS / "h200"
    if not (h200 / "study.yaml").exists():
        pytest.skip("results/h200 not present")
    from harness.publish.sections.data import latency_md, throughput_md

    st = load_study(h200)
    assert "Ratios new/old" not in throughput_md(st) and "Ratios old/new" not in latency_md(st)
    assert "compare/" not in report.links_md(st) and "`compare/`" not in report.about_md(st)


def test_a_bisect_shows_only_in_the_reports_of_its_own_model():
    """results/bisect holds a tiny-llama bisect of the cpu-tiny scenario between the two CPU legs: the
    cpu-tiny report lists it; the multimodal study on the same legs (no tiny-llama) and the serving
    study (same legs and model, another scenario) do not; window records (a leg's, naming no study)
    show on no study's page."""
    from harness.publish.sections.diagnostics import side_records_md

    tiny = side_records_md(load_study(paths.RESULTS / "cpu-tiny-serial"))
    mm = side_records_md(load_study(paths.RESULTS / "cpu-tiny-mm"))
    serve = side_records_md(load_study(paths.RESULTS / "cpu-serve"))
    assert "Bisect: cpu-tiny / tiny-llama / mixed" in tiny
    assert "Bisect:" not in mm and "Bisect:" not in serve
    assert not any("Dependency window" in t for t in (tiny, mm, serve))
