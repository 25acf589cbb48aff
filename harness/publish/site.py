"""One site of every shipped study: `quarto render` at the project root (`_quarto.yml`, a Quarto
website) renders `site.qmd` into `_site/index.html`, the index of the studies (title, date, device,
legs, models, the one-line answer, links to the page and the dataset card), and the diagnostic
notebooks (executed by the pre-render step into site-notebooks/, so the committed ones stay as they
are); each study's page and card are the already-rendered `results/<study>/report/` files,
copied as they are (the project's `resources`), so building the site renders no study again.

`build_site` builds the same site from chosen studies' rendered reports into a folder, on a private
copy of the project (Quarto writes beside its sources): what the tests run on two small studies.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.core import paths
from harness.core.errors import UserError
from harness.schema import outdir

SITE_QMD = paths.PROJ_ROOT / "site.qmd"
NOTEBOOKS_OUT = "site-notebooks"   # the executed notebooks the site renders (git ignores it)
PROJECT = paths.PROJ_ROOT / "_quarto.yml"


@dataclass(frozen=True, kw_only=True)
class StudyRow:
    """One study of the index."""

    name: str
    title: str          # the page's short title
    subtitle: str       # study.yaml's title
    date: str
    devices: list[str]
    legs: list[str]
    models: list[str]
    answer: str         # one line: the per-step counts, or what a one-leg study measures
    page: str           # links, relative to the site's root
    card: str


def shipped(results: Path) -> list[Path]:
    """The study folders under `results` with a rendered report, by name."""
    return sorted(p.parent.parent for p in results.glob("*/report/index.html") if (p.parent.parent / "study.yaml").exists())


def study_row(study: Path) -> StudyRow:
    from harness.analyze.tables import _legs
    from harness.publish.sections import answer as sec
    from harness.publish.sections.navigate import citation
    from harness.publish.sections.overview import devices, short_title
    from harness.publish.study import load_study

    st = load_study(study)
    ans = sec.answer(st)
    legs = _legs(st.canon)
    if len(legs) >= 2:
        one = "; ".join(re.sub(r"\s*\(the letters under the figure[^)]*\)", "", ln).replace("**", "").rstrip(".")
                        for ln in sec.step_lines(ans)) + "."
    else:
        n = len(st.canon.cells)
        one = (f"one leg ({legs[0][1] if legs else 'none'}): no step between versions to judge; "
               f"{n} absolute canonical figure{'s' if n != 1 else ''}.")
    models = list(dict.fromkeys(str(m) for m in st.canon.cells["model"])) if len(st.canon.cells) else []
    return StudyRow(name=st.canon.study.name, title=short_title(st), subtitle=st.canon.study.title or "",
                    date=citation(st).date, devices=devices(st.canon), legs=[lb for _, lb in _legs(st.canon)],
                    models=models, answer=one, page=f"results/{study.name}/report/index.html",
                    card=f"results/{study.name}/report/README.md")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def index_md(rows: Sequence[StudyRow], notebooks: Sequence[str] = ()) -> str:
    """The site's index: one short entry per study (so it reads on a phone), then the notebooks."""
    out = [f"{len(rows)} {'study' if len(rows) == 1 else 'studies'}, each with its page (the report) and its "
           "dataset card (the Hugging Face README: the report's text under the data's description).", ""]
    for r in rows:
        models = ", ".join(f"`{m}`" for m in r.models[:6]) + (f" and {len(r.models) - 6} more" if len(r.models) > 6 else "")
        out += [f"## [{r.title}]({r.page})", ""]
        if r.subtitle:
            out += [f"_{_cell(r.subtitle)}_", ""]
        out += [f"- **Answer:** {_cell(r.answer)}",
                f"- **Date:** {r.date}; **device:** {', '.join(r.devices) or 'not recorded'}; "
                f"**legs:** {', '.join(r.legs) or 'none'}",
                f"- **Models:** {models or 'none measured'}",
                f"- [page]({r.page}) · [dataset card]({r.card})", ""]
    if notebooks:
        out += ["## Diagnostic notebooks", "",
                *[f"- [{n}]({NOTEBOOKS_OUT}/{n}.html)" for n in notebooks], ""]
    return "\n".join(out)


def site_index_md(results: Path | str = paths.RESULTS, studies: str = "all", notebooks: str = "true") -> str:
    """What `site.qmd`'s cell prints: the index of `studies` ("all": every shipped one; else names
    separated by commas) read from their records under `results`."""
    root = Path(results)
    picked = shipped(root) if studies == "all" else [root / s.strip() for s in studies.split(",") if s.strip()]
    nbs = sorted(p.stem for p in (paths.PROJ_ROOT / "notebooks").glob("*.ipynb")) if notebooks == "true" else []
    return index_md([study_row(p) for p in picked], nbs)


def execute_notebooks(src: Path, dest: Path) -> list[Path]:
    """Each notebook of `src`, executed with its default parameters from the project's root (as
    tests/test_notebooks.py runs them), into `dest`; the committed notebooks stay as they are."""
    import papermill as pm

    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for nb in sorted(src.glob("*.ipynb")):
        pm.execute_notebook(str(nb), str(dest / nb.name), kernel_name="python3", cwd=str(paths.PROJ_ROOT),
                            progress_bar=False)
        out.append(dest / nb.name)
    return out


def build_site(reports: dict[str, Path], out: Path, *, results: Path = paths.RESULTS, notebooks: bool = False,
               quarto: str | None = None) -> Path:
    """The site of the studies in `reports` (study name → its rendered report folder) into `out`,
    built by `quarto render` on a private copy of the project; with `notebooks`, the diagnostic
    notebooks too (executed first: slow). Returns `out/index.html`. `out` is new, empty, or a site
    this function wrote (its marker): any other folder is refused before anything is rendered."""
    from harness.publish.render import RenderError, _quarto_error, find_quarto, quarto_env

    outdir.check_folder(out, verb="site", replace=True)
    exe = quarto or find_quarto()
    if exe is None:
        raise UserError("quarto: command not found on PATH or in .cache/quarto (`make quarto` installs it)")
    with tempfile.TemporaryDirectory(prefix="harness-site-") as tmp:
        proj = Path(tmp)
        config = yaml.safe_load(PROJECT.read_text(encoding="utf-8"))
        # The notebooks are executed here, not by the project's pre-render step (a script beside the
        # project it would not find in this copy).
        config["project"].pop("pre-render", None)
        if notebooks:
            execute_notebooks(paths.PROJ_ROOT / "notebooks", proj / NOTEBOOKS_OUT)
        else:
            config["project"]["render"] = [r for r in config["project"]["render"]
                                           if not str(r).startswith(f"{NOTEBOOKS_OUT}/")]
            config["website"]["navbar"]["left"] = [i for i in config["website"]["navbar"].get("left", [])
                                                   if not str(i.get("href", "")).startswith(f"{NOTEBOOKS_OUT}/")]
        (proj / "_quarto.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        shutil.copy2(SITE_QMD, proj / SITE_QMD.name)
        for name, rep in reports.items():
            dest = proj / "results" / name / "report"
            dest.mkdir(parents=True)
            for f in ("index.html", "README.md"):
                shutil.copy2(rep / f, dest / f)
        # site.qmd's cell reads which studies from the environment (a -P parameter would reach the
        # notebooks' parameter cells too).
        env = quarto_env(HARNESS_SITE_RESULTS=str(results), HARNESS_SITE_STUDIES=",".join(reports),
                         HARNESS_SITE_NOTEBOOKS=str(notebooks).lower())
        proc = subprocess.run([exe, "render"], cwd=proj, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise RenderError(f"quarto render (site) failed (exit {proc.returncode}): "
                              f"{_quarto_error(proc.stderr + chr(10) + proc.stdout)}")
        # Written aside and moved into place; only a folder carrying this function's marker is replaced.
        with outdir.output_dir(out, verb="site", replace=True) as aside:
            shutil.copytree(proj / "_site", aside, dirs_exist_ok=True)
    return out / "index.html"
