"""The report through real `quarto render` (html and gfm) on a shipped study, and its agreement with
the harness's own renderer (index.qmd's cells through a Jupyter kernel, no Quarto): the same section
headings in the same order, the same table cells, the same figures under the same numbers.

Quarto is found on PATH or in .cache/quarto (`make quarto`; `.ci/run` installs it from
../shared/quarto where that folder exists). Without it these tests skip; the fallback renderer is
tested everywhere by test_report.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.core import paths
from harness.publish import render as rendering
from harness.publish.render import RenderResult, find_quarto, render

QUARTO = find_quarto()
needs_quarto = pytest.mark.skipif(
    QUARTO is None, reason="quarto is not installed: not on PATH, not in .cache/quarto "
                           "(`make quarto` installs it from ../shared/quarto)")
STUDY = paths.RESULTS / "h200"          # small: one leg, two figures, a text-only figure cell
LEFTOVERS = ("index.html", "REPORT.md", "index_files", ".quarto", "index.quarto_ipynb")


# --- reading the two outputs ---------------------------------------------------------------------

class _Page(HTMLParser):
    """Headings (level, text) of the page body and the cell texts of each table."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[tuple[int, str]] = []
        self.tables: list[list[list[str]]] = []
        self._h: list[str] | None = None
        self._level = 0
        self._cell: list[str] | None = None
        self._skip = 0            # inside the table of contents / quarto's side panels

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("nav", "header") and self._skip == 0 and (a.get("id") == "TOC" or tag == "nav"):
            self._skip = 1
        elif self._skip and tag in ("nav", "header"):
            self._skip += 1
        if self._skip:
            return
        if re.fullmatch(r"h[1-3]", tag):
            self._h, self._level = [], int(tag[1])
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if self._skip:
            if tag in ("nav", "header"):
                self._skip -= 1
            return
        if re.fullmatch(r"h[1-3]", tag) and self._h is not None:
            self.headings.append((self._level, _norm("".join(self._h))))
            self._h = None
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(_norm("".join(self._cell)))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._h is not None:
            self._h.append(data)
        if self._cell is not None:
            self._cell.append(data)


def _norm(s: str) -> str:
    # Quarto's smart punctuation vs python-markdown's plain quotes; whitespace as wrapped.
    s = s.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    s = s.replace("\u2013", "--").replace("\u2014", "---").replace("\u2026", "...").replace("\xa0", " ")
    return re.sub(r"\s+", " ", s).strip()


def page(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def md_headings(md: str) -> list[str]:
    """REPORT.md's ATX headings outside fenced code, as text."""
    out, fenced = [], False
    for ln in md.splitlines():
        if ln.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", ln):
            out.append(_norm(ln))
    return out


def md_figures(md: str) -> list[tuple[int, str]]:
    """(number, file) of each figure in REPORT.md: its image link and the "Figure N:" caption after it."""
    figs = []
    for m in re.finditer(r"\(figures/([\w.-]+\.png)\)", md):
        cap = re.search(r"Figure\s(\d+):", md[m.end():])   # Quarto puts a no-break space there
        assert cap, f"figure {m.group(1)} has no caption after it"
        figs.append((int(cap.group(1)), m.group(1)))
    return figs


# --- the renders ---------------------------------------------------------------------------------

def _plain_env() -> dict[str, str]:
    """A user's shell: the venv not activated, quarto only where the user has it (or .cache/quarto)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "QUARTO_PYTHON", "PYTHONPATH")}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    return env


@pytest.fixture(scope="module")
def quarto_render(tmp_path_factory) -> tuple[Path, str]:
    """`harness report results/h200 --quarto`, as the README says, from a shell without the venv on
    PATH; into a temporary folder (the committed report stays as it is)."""
    out = tmp_path_factory.mktemp("quarto") / "report"
    before = {n: (paths.PROJ_ROOT / n).exists() for n in LEFTOVERS}
    gitignore = (paths.PROJ_ROOT / ".gitignore").read_bytes()
    study_files = sorted(str(p) for p in STUDY.rglob("*") if "report" not in p.relative_to(STUDY).parts)
    proc = subprocess.run([sys.executable, "-m", "harness", "report", "results/h200", "--quarto", "--out", str(out)],
                          cwd=paths.PROJ_ROOT, env=_plain_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (paths.PROJ_ROOT / ".gitignore").read_bytes() == gitignore, "quarto edited the tracked .gitignore"
    left = [n for n in LEFTOVERS if (paths.PROJ_ROOT / n).exists() and not before[n]]
    assert left == [], f"quarto left {left} in the work tree"
    assert sorted(str(p) for p in STUDY.rglob("*") if "report" not in p.relative_to(STUDY).parts) == study_files
    return out, proc.stdout


@pytest.fixture(scope="module")
def kernel_render(tmp_path_factory) -> RenderResult:
    return render(STUDY, tmp_path_factory.mktemp("kernel") / "report", quarto=False, say=lambda s: None)


@needs_quarto
def test_quarto_renders_html_and_gfm_into_the_report_folder(quarto_render):
    out, said = quarto_render
    assert "report (quarto," in said and "quarto found" in said
    html = (out / "index.html").read_text(encoding="utf-8")
    md = (out / "REPORT.md").read_text(encoding="utf-8")
    title = md.splitlines()[0].removeprefix("# ")            # short: the study's name and its leg
    assert title == "h200: 0.26"
    # The title is the document's, study.yaml's sentence its subtitle, and "About this dataset" stays
    # a section in the contents.
    assert f"<title>{title}</title>" in html and f'<h1 class="title">{title}</h1>' in html
    assert '<p class="subtitle lead">vLLM 0.26.0 on 2x H200' in html and "\n*vLLM 0.26.0 on 2x H200" in md
    toc = html[html.index('id="TOC"'):html.index("</nav>", html.index('id="TOC"'))]
    assert 'href="#about-this-dataset"' in toc
    assert md.startswith(f"# {title}\n") and "# Benchmark report" not in md
    # One self-contained page; the figures beside REPORT.md under the fallback's names.
    assert "index_files/" not in html and re.findall(r'<img src="(?!data:)', html) == []
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["fig-answer.png", "fig-coverage.png", "fig-dispersion.png",
                                                                  "fig-drift.png"]
    assert "figure-commonmark" not in md and not (out / "index_files").exists()
    assert (out / "README.md").read_text(encoding="utf-8").endswith(md)          # the card is the report


@needs_quarto
def test_quarto_and_the_fallback_agree(quarto_render, kernel_render):
    out, _ = quarto_render
    q_html, k_html = page(out / "index.html"), page(kernel_render.html)
    q_md = (out / "REPORT.md").read_text(encoding="utf-8")
    k_md = kernel_render.report.read_text(encoding="utf-8")
    # Same sections in the same order (the page's title is its h1 in both).
    assert q_html.headings == k_html.headings
    assert md_headings(q_md) == md_headings(k_md)
    assert len(q_html.headings) > 10
    # Same tables, cell by cell.
    assert len(q_html.tables) == len(k_html.tables) > 3
    for q, k in zip(q_html.tables, k_html.tables):
        assert q == k
    # Same figures, same numbers; the text-only ratio cell is no figure in either.
    # A one-leg study's answer picture (each cell's figure) comes first, as a study with steps has its matrix.
    assert md_figures(q_md) == md_figures(k_md) == [(1, "fig-answer.png"), (2, "fig-coverage.png"),
                                                  (3, "fig-dispersion.png"), (4, "fig-drift.png")]
    for md in (q_md, k_md):
        assert "there is no ratio to plot" in md and "Ratio of each step" not in md
    q_caps = re.findall(r"Figure&nbsp;(\d+)|Figure\s(\d+):", (out / "index.html").read_text(encoding="utf-8"))
    assert sorted({int(a or b) for a, b in q_caps}) == [1, 2, 3, 4]


@needs_quarto
def test_quarto_page_in_a_browser(quarto_render, tmp_path):
    from harness.publish.browser import Chromium, check_page, find_chromium

    exe = find_chromium()
    if exe is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)")
    out, _ = quarto_render
    with Chromium(exe) as b:
        wide = check_page(b, out / "index.html", width=1400, screenshot=tmp_path / "h200-quarto-1400.png")
        narrow = check_page(b, out / "index.html", width=400, screenshot=tmp_path / "h200-quarto-400.png")
    print(f"screenshots: {tmp_path}")
    assert len(wide.images) == 4 and all(i["loaded"] for i in wide.images)   # answer, coverage, dispersion, drift
    assert wide.console_errors == [] and narrow.console_errors == []
    assert wide.n_too_wide == 0, wide.too_wide
    assert narrow.last_column is not None and narrow.last_column["visible"], narrow.last_column


def test_quarto_renders_a_private_copy_of_the_project(tmp_path):
    """What Quarto would sweep in from beside the source (a stale index_files/ of another study's
    render, .quarto/, the site's _quarto.yml) stays out of the copy it renders; the filters the
    qmd's header names come along."""
    src = tmp_path / "proj"
    (src / "index_files" / "figure-commonmark").mkdir(parents=True)
    (src / "index_files" / "figure-commonmark" / "fig-old-output-1.png").write_bytes(b"stale")
    (src / ".quarto").mkdir()
    (src / "f").mkdir()
    (src / "f" / "x.lua").write_text("return {}\n")
    (src / "index.qmd").write_text("---\nfilters:\n  - f/x.lua\n  - quarto\n---\n# t\n")
    (src / "_quarto.yml").write_text("project:\n  type: website\n")
    dest = tmp_path / "copy"
    dest.mkdir()
    qmd = rendering._quarto_project(src / "index.qmd", dest)
    assert qmd == dest / "index.qmd"
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == \
        ["f/x.lua", "index.qmd"]


def test_quarto_figures_take_the_fallback_names(tmp_path):
    built, scratch = tmp_path / "built", tmp_path / "scratch"
    d = built / "index_files" / "figure-commonmark"
    d.mkdir(parents=True)
    for n in ("fig-a-output-1.png", "fig-b-output-1.png", "fig-b-output-2.png"):
        (d / n).write_bytes(n.encode())
    md = ("![](index_files/figure-commonmark/fig-a-output-1.png)\n"
          "![](index_files/figure-commonmark/fig-b-output-1.png)\n"
          "![](index_files/figure-commonmark/fig-b-output-2.png)\n")
    out, figs = rendering._quarto_figures(md, built, scratch)
    assert out == "![](figures/fig-a.png)\n![](figures/fig-b-1.png)\n![](figures/fig-b-2.png)\n"
    assert [p.name for p in figs] == ["fig-a.png", "fig-b-1.png", "fig-b-2.png"]
    assert (scratch / "figures" / "fig-b-2.png").read_bytes() == b"fig-b-output-2.png"
    with pytest.raises(rendering.RenderError, match="did not write"):
        rendering._quarto_figures("![](index_files/figure-commonmark/gone-output-1.png)", built, scratch)


def test_quarto_error_names_the_cell_exception():
    out = "\x1b[31mClaimFailed\x1b[39m: nope\nClaimFailed: claim x does not hold\n\x1b[33mWARN: Error encountered\x1b[39m\n"
    assert rendering._quarto_error(out) == "ClaimFailed: claim x does not hold"
    assert rendering._quarto_error("Error running filter main.lua:\nWARN: x\n") == "Error running filter main.lua:"


# --- the site ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_render(tmp_path_factory) -> Path:
    """results/cpu-tiny through quarto: a second small study, with two legs (an answer matrix)."""
    out = tmp_path_factory.mktemp("quarto-tiny") / "report"
    render(paths.RESULTS / "cpu-tiny", out, quarto=True, say=lambda s: None)
    return out


@needs_quarto
def test_site_of_two_studies_in_a_browser(quarto_render, tiny_render, tmp_path):
    """The site (harness.publish.site: what `quarto render` at the root builds, here from two studies'
    rendered reports): its index lists both with their answers and links, and every page of it, served
    as a site is, passes at 400 and 1400 px: no sideways scroll, every image loaded and drawn, no empty
    table, the answer matrix above the fold, and no page naming the other study's records."""
    from harness.publish.browser import Chromium, check_page, find_chromium, serve
    from harness.publish.site import build_site

    site = tmp_path / "site"
    index = build_site({"h200": quarto_render[0], "cpu-tiny": tiny_render}, site)
    text = index.read_text(encoding="utf-8")
    for name in ("h200", "cpu-tiny"):
        assert f'href="results/{name}/report/index.html"' in text and f'href="results/{name}/report/README.md"' in text
    # The site's answer line is the study's one verdict object's (whatever the shipped run decided).
    from harness.analyze.canonical import canonicalize
    from harness.analyze.dataset import load
    from harness.analyze.verdicts import step_sentence, study_verdicts

    sv = study_verdicts(canonicalize(load(paths.RESULTS / "cpu-tiny")))
    said = step_sentence(sv.step("cpu-0.27.1", "cpu-0.32.0"))
    assert "cpu-tiny: 0.27 → 0.32" in text and f"0.27 → 0.32: {said}" in text, said
    assert "h200: 0.26" in text and "one leg (0.26)" in text
    pages = {"index.html": None, "results/h200/report/index.html": "h200",
             "results/cpu-tiny/report/index.html": "cpu-tiny"}
    for rel, name in pages.items():
        html = (site / rel).read_text(encoding="utf-8")
        others = [o for o in ("h200", "cpu-tiny") if name is not None and o != name]
        assert all(f"results/{o}/" not in html for o in others), f"{rel} names another study's records"
    exe = find_chromium()
    if exe is None:
        pytest.skip("chromium is not installed")
    with Chromium(exe) as b, serve(site) as base:
        for rel, name in pages.items():
            for width in (400, 1400):
                c = check_page(b, site / rel, width=width, url=base + rel,
                               screenshot=tmp_path / f"{name or 'index'}-{width}.png")
                assert c.problems == [], (rel, width, c.problems)
                assert c.scroll_width <= width and c.n_too_wide == 0, (rel, width, c.scroll_width, c.too_wide)
                assert all(i["loaded"] and i["width"] > 0 for i in c.images), (rel, width, c.images)
                if name == "cpu-tiny":
                    assert c.answer_figure is not None and c.answer_figure["top"] < c.height, (width, c.answer_figure)
                    assert c.answer_figure["width"] <= width
    print(f"screenshots: {tmp_path}")


def test_the_site_project_runs_the_notebooks_into_their_own_folder():
    """`quarto render` at the root: the pre-render step executes the notebooks into the folder the
    site renders (never the committed notebooks/, which Quarto would write outputs back into), and
    git ignores that folder and the site."""
    import yaml

    from harness.publish.site import NOTEBOOKS_OUT

    project = yaml.safe_load((paths.PROJ_ROOT / "_quarto.yml").read_text(encoding="utf-8"))["project"]
    assert (paths.PROJ_ROOT / project["pre-render"]).is_file()
    assert project["render"] == ["site.qmd", f"{NOTEBOOKS_OUT}/*.ipynb"]
    assert not any(str(r).startswith("notebooks/") for r in project["render"])
    ignored = (paths.PROJ_ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert f"/{NOTEBOOKS_OUT}/" in ignored and "/_site/" in ignored
