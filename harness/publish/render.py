"""Rendering a study's report: index.qmd through `quarto render` where the command exists, else its
code cells through a Jupyter kernel here; then REPORT.md, the HTML page, the figures, the dataset card
and the derived tables, written together.

Without quarto: the qmd is split into its YAML header, markdown and ```{python} chunks (`#|` options
honoured: `echo`, `output: asis`, `label`, `fig-cap`, `include`); the chunks become a notebook, the
parameters are injected after the cell tagged `parameters` (as papermill and Quarto do), nbclient runs
it, and the outputs are stitched back between the markdown: asis output as markdown, figures as PNG
files, echoed code as fenced blocks. python-markdown turns REPORT.md into the HTML page. The dataset
card `README.md` is a Hugging Face YAML header followed by REPORT.md's text, unchanged, so its body is
the report by construction.

This module imports nothing heavy at load time, so the kernel starts at once and the derived tables
are built in a thread while the cells run. The report's content is `harness.publish.report`; the
claims, sections and card it is made of import nothing from here.
"""

from __future__ import annotations

import html
import os
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from harness.core import paths
from harness.core.errors import UserError
from harness.publish.card import card_body, card_header, card_text  # noqa: F401  (card_body: re-exported)
from harness.core.locate import rel as _rel
from harness.core.locate import resolve as _resolve
from harness.analyze.strict import ClaimFailed, strict_ids

QMD = paths.PROJ_ROOT / "index.qmd"
KERNEL = "python3"


class RenderError(UserError):
    """A cell of index.qmd raised, or quarto failed: the report is not written."""


# --- qmd → notebook → markdown -------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Chunk:
    kind: Literal["markdown", "code"]
    text: str
    options: dict[str, Any] = field(default_factory=dict)


_FENCE = re.compile(r"^```\{python[^}]*\}\s*$")


def parse_qmd(text: str, path: Path | str = "index.qmd") -> tuple[dict[str, Any], list[Chunk]]:
    """The YAML header and the markdown / ```{python} chunks, with each chunk's `#|` options."""
    header: dict[str, Any] = {}
    body = text
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end < 0:
            raise RenderError(f"{path}: YAML header is not closed")
        header = yaml.safe_load(text[4:end]) or {}
        body = text[end + 5:]
    chunks: list[Chunk] = []
    md: list[str] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        if _FENCE.match(lines[i]):
            if "".join(md).strip():
                chunks.append(Chunk(kind="markdown", text="\n".join(md).strip("\n")))
            md = []
            j = i + 1
            while j < len(lines) and lines[j].rstrip() != "```":
                j += 1
            if j == len(lines):
                raise RenderError(f"{path}: code chunk opened on line {i + 1} is not closed")
            code = lines[i + 1:j]
            opts = [ln[3:] if ln.startswith("#| ") else ln[2:] for ln in code if ln.startswith("#|")]
            try:
                options = yaml.safe_load("\n".join(opts)) or {} if opts else {}
            except yaml.YAMLError as e:
                first = str(e).splitlines()[0]
                raise RenderError(f"{path}: chunk on line {i + 1}: bad `#|` options ({first})") from None
            src = "\n".join(ln for ln in code if not ln.startswith("#|"))
            chunks.append(Chunk(kind="code", text=src.strip("\n"), options=options))
            i = j + 1
            continue
        md.append(lines[i])
        i += 1
    if "".join(md).strip():
        chunks.append(Chunk(kind="markdown", text="\n".join(md).strip("\n")))
    return header, chunks


def to_notebook(chunks: Sequence[Chunk], params: dict[str, Any]) -> tuple[Any, list[Chunk]]:
    """A notebook of the chunks, the parameters injected after the cell tagged `parameters` (as papermill
    and Quarto do). Returns it with the chunk behind each cell."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3", "language": "python"}
    behind: list[Chunk] = []
    for ch in chunks:
        if ch.kind == "markdown":
            nb.cells.append(nbformat.v4.new_markdown_cell(ch.text))
            behind.append(ch)
            continue
        tags = ch.options.get("tags") or []
        cell = nbformat.v4.new_code_cell(ch.text)
        cell.metadata["tags"] = list(tags)
        nb.cells.append(cell)
        behind.append(ch)
        if "parameters" in tags and params:
            src = "\n".join(f"{k} = {v!r}" for k, v in params.items())
            injected = nbformat.v4.new_code_cell(src)
            injected.metadata["tags"] = ["injected-parameters"]
            nb.cells.append(injected)
            behind.append(Chunk(kind="code", text=src, options={"echo": False, "tags": ["injected-parameters"]}))
    return nb, behind


def execute(nb: Any, *, cwd: Path, timeout_s: int = 600) -> Any:
    """Run every cell through a Jupyter kernel; a cell that raises stops the render. The kernel's own
    console output (its start-up notices) goes to a file, shown only if the kernel cannot run."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    client = NotebookClient(nb, kernel_name=KERNEL, timeout=timeout_s, allow_errors=False,
                            resources={"metadata": {"path": str(cwd)}})
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        try:
            client.execute(stdout=log, stderr=log)
        except CellExecutionError as e:
            if e.ename == "ClaimFailed":
                raise ClaimFailed(e.evalue) from None
            raise RenderError(f"index.qmd: a cell raised {e.ename}: {e.evalue}") from None
        except (DeadKernelError, RuntimeError, OSError) as e:
            log.seek(0)
            tail = [ln for ln in log.read().splitlines() if ln.strip()][-1:]
            raise RenderError(f"Jupyter kernel {KERNEL!r} could not run index.qmd ({type(e).__name__}: {e})"
                              + (f": {tail[0]}" if tail else "")) from None
    return nb


def stitch(nb: Any, behind: Sequence[Chunk], header: dict[str, Any], figures_dir: Path,
           figures_rel: str = "figures") -> tuple[str, list[Path]]:
    """The executed notebook as GitHub-flavoured markdown: markdown cells as written, asis outputs as
    markdown, figures as PNG files under `figures_dir`, echoed code (`echo: true`) as fenced blocks."""
    import base64

    exe = header.get("execute") or {}
    echo_default = bool(exe.get("echo", True))
    parts: list[str] = []
    written: list[Path] = []
    fig_no: dict[str, int] = {}
    for n, (cell, ch) in enumerate(zip(nb.cells, behind)):
        if ch.kind == "markdown":
            parts.append(ch.text)
            continue
        opts = ch.options
        if "injected-parameters" in (opts.get("tags") or []):
            continue
        if opts.get("echo", echo_default) is True:
            parts.append(f"```python\n{ch.text}\n```")
        if opts.get("include", True) is False or opts.get("output", True) is False:
            continue
        asis = opts.get("output") == "asis"
        out: list[str] = []
        outputs = cell.get("outputs", [])
        n_img = sum("image/png" in o.get("data", {}) for o in outputs)
        label = str(opts.get("label") or f"cell-{n}")
        cap = str(opts.get("fig-cap") or "")
        if n_img and label.startswith("fig-"):
            fig_no.setdefault(label, len(fig_no) + 1)
            cap = f"Figure {fig_no[label]}: {cap}" if cap else f"Figure {fig_no[label]}"
        k = 0
        for o in outputs:
            if o.output_type == "stream":
                if o.name != "stdout":
                    continue
                out.append(o.text if asis else f"```\n{o.text.rstrip()}\n```\n")
            elif o.output_type in ("display_data", "execute_result"):
                data = o.get("data", {})
                if "image/png" in data:
                    k += 1
                    figures_dir.mkdir(parents=True, exist_ok=True)
                    path = figures_dir / (f"{label}.png" if n_img == 1 else f"{label}-{k}.png")
                    path.write_bytes(base64.b64decode(data["image/png"]))
                    written.append(path)
                    alt = cap if n_img == 1 else f"{cap} ({chr(ord('a') + k - 1)})"
                    out.append(f"![{alt}]({figures_rel}/{path.name})\n")
                    if k == n_img and cap:
                        out.append(f"\n*{cap}*\n")
                elif "text/markdown" in data:
                    out.append(data["text/markdown"].rstrip() + "\n")
                elif "text/plain" in data:
                    out.append(data["text/plain"] + "\n" if asis else f"```\n{data['text/plain']}\n```\n")
        text = "".join(out).strip("\n")
        if text:
            parts.append(text)
    md = "\n\n".join(p.strip("\n") for p in parts if p.strip()) + "\n"
    # Cross-references as Quarto writes them in GFM: "@fig-x" becomes "Figure N".
    md = re.sub(r"@(fig-[\w-]+)", lambda m: f"Figure {fig_no[m.group(1)]}" if m.group(1) in fig_no else m.group(0), md)
    return md, written


# --- HTML ----------------------------------------------------------------------------------------

CSS = """body{font:15px/1.5 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1f2328}
main{max-width:1100px;margin:2rem auto;padding:0 1.5rem}
table{border-collapse:collapse;margin:1rem 0;font-size:13px;display:block;overflow-x:auto}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}code{background:#f6f8fa;padding:0 3px;border-radius:3px;font-size:90%}
pre{background:#f6f8fa;padding:.8rem;overflow-x:auto}img{max-width:100%}
h1,h2{border-bottom:1px solid #d8dee4;padding-bottom:.3rem}
td code{overflow-wrap:anywhere}
@media (max-width:600px){main{padding:0 .5rem}table{font-size:11px}th,td{padding:2px 4px}
p>img{max-width:none}p:has(>img){overflow-x:auto}}"""


def to_html(report_md: str) -> str:
    import markdown

    body = markdown.markdown(report_md, extensions=["tables", "fenced_code", "toc", "sane_lists"],
                             output_format="html5")
    m = re.search(r"^# (.+)$", report_md, flags=re.M)
    title = html.escape(m.group(1).replace("`", "")) if m else "Report"
    return (f"<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<style>\n{CSS}\n</style>\n"
            f"</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n")


# --- render --------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class RenderResult:
    engine: Literal["quarto", "kernel"]
    out_dir: Path
    report: Path
    card: Path
    html: Path
    figures: tuple[Path, ...]
    derived: tuple[Path, ...]
    seconds: float


def _params(study_dir: Path, strict_claims: Iterable[str] | str | bool | None,
            allow: dict[str, bool | None] | None = None) -> dict[str, Any]:
    # Plain strings, as papermill and `quarto render -P` pass them.
    strict = "" if strict_claims is None else ",".join(strict_ids(strict_claims))
    flags = {k: "auto" if v is None else str(v).lower() for k, v in (allow or {}).items()}
    return {"study": str(study_dir), "strict_claims": strict if strict_claims is not None else "auto"} | flags


def _render_kernel(qmd: Path, params: dict[str, Any], scratch: Path) -> tuple[str, list[Path]]:
    header, chunks = parse_qmd(qmd.read_text(encoding="utf-8"), qmd)
    nb, behind = to_notebook(chunks, params)
    execute(nb, cwd=qmd.parent)
    md, figs = stitch(nb, behind, header, scratch / "figures")
    (scratch / "REPORT.md").write_text(md, encoding="utf-8")
    (scratch / "index.html").write_text(to_html(md), encoding="utf-8")
    return md, figs


# Where `make quarto` installs Quarto when none is on PATH (from ../shared/quarto, see the Makefile).
PROJECT_QUARTO = paths.PROJ_ROOT / ".cache" / "quarto" / "bin" / "quarto"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def find_quarto() -> str | None:
    """`quarto` on PATH, else the one `make quarto` installed into the project's cache."""
    exe = shutil.which("quarto")
    if exe:
        return exe
    return str(PROJECT_QUARTO) if os.access(PROJECT_QUARTO, os.X_OK) else None


def _quarto_project(qmd: Path, dest: Path) -> Path:
    """A private copy of the report's source (the qmd and the filters its header names): Quarto writes
    `.quarto/`, `*.quarto_ipynb` and `index_files/` beside its source, and sweeps whatever
    `index_files/` it finds there into the output, a stale one from another study's render included.
    The project's `_quarto.yml` (the site's) stays behind: the report renders as one file. Returns the
    copy's qmd."""
    shutil.copy2(qmd, dest / qmd.name)
    header, _ = parse_qmd(qmd.read_text(encoding="utf-8"), qmd)
    for f in header.get("filters") or []:
        name = f.get("path") if isinstance(f, dict) else f
        src = qmd.parent / str(name)
        if isinstance(name, str) and src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest / qmd.name


def _quarto_error(output: str) -> str:
    """The line that says what went wrong in quarto's (coloured) output: a Python exception if a cell
    raised, else quarto's own last ERROR line, else its last line."""
    lines = [ln.strip() for ln in _ANSI.sub("", output).splitlines() if ln.strip()]
    exc = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception|Failed|Interrupt): ", ln)]
    err = [ln for ln in lines if re.match(r"^(ERROR|Error)\b", ln)]
    return (exc or err or lines or [""])[-1]


def _render_quarto(exe: str, qmd: Path, params: dict[str, Any], scratch: Path) -> tuple[str, list[Path]]:
    with tempfile.TemporaryDirectory(prefix="harness-quarto-") as tmp:
        copy = _quarto_project(qmd, Path(tmp))
        built = copy.parent          # quarto writes beside its source: here, the private copy
        # The cells run once: the first pass executes them and writes REPORT.md, keeping the executed
        # notebook (keep-ipynb: `index.quarto_ipynb`, its outputs in it); the second renders the page
        # from that notebook, which Quarto does not execute (--no-execute says so), so the page and
        # REPORT.md show the same outputs of one execution, at the cost of one. keep-md: with it Quarto
        # skips its clean-up, which otherwise deletes index_files/ (the gfm figures with it); the copy
        # is thrown away anyway.
        cmd = [exe, "render", str(copy), "--to", "gfm", "-M", "keep-md:true", "-M", "keep-ipynb:true"]
        for k, v in params.items():
            cmd += ["-P", f"{k}:{v}"]
        env = quarto_env()
        _run_quarto(cmd, cwd=tmp, env=env, name=qmd.name)
        executed = built / f"{qmd.stem}.quarto_ipynb"
        if not executed.is_file():
            raise RenderError(f"quarto render {qmd.name} kept no executed notebook ({executed.name})")
        notebook = executed.rename(built / f"{qmd.stem}.ipynb")
        variants = _narrow_variants(notebook)
        _run_quarto([exe, "render", str(notebook), "--to", "html", "--no-execute", "-M", "keep-md:true"],
                    cwd=tmp, env=env, name=qmd.name)
        if not (built / "REPORT.md").exists() or not (built / "index.html").exists():
            raise RenderError(f"quarto render {qmd.name} wrote no REPORT.md / index.html")
        md, figs = _quarto_figures((built / "REPORT.md").read_text(encoding="utf-8"), built, scratch)
        page = (built / "index.html").read_text(encoding="utf-8")
        files = built / f"{qmd.stem}_files"
        if f"{files.name}/" in page and files.is_dir():
            # Not self-contained (`embed-resources` off): the page needs its libraries beside it.
            shutil.copytree(files, scratch / files.name, ignore=shutil.ignore_patterns("figure-commonmark"))
        (scratch / "index.html").write_text(_with_pictures(page, variants), encoding="utf-8")
    (scratch / "REPORT.md").write_text(md, encoding="utf-8")
    return md, figs


def _narrow_variants(notebook: Path) -> dict[str, dict]:
    """wide PNG (base64, as the page embeds it) -> its narrow variant and text sizes, from the figure
    outputs of the executed notebook that carry them (`figure_cells.Png`)."""
    from harness.publish.figure_cells import PICTURE_MIME

    nb = json.loads(notebook.read_text(encoding="utf-8"))
    out: dict[str, dict] = {}
    for cell in nb.get("cells", []):
        for o in cell.get("outputs", []) or []:
            data = o.get("data") or {}
            if PICTURE_MIME in data and "image/png" in data:
                png = data["image/png"]
                out["".join(png).replace("\n", "") if isinstance(png, list) else png.replace("\n", "")] = data[PICTURE_MIME]
    return out


def _with_pictures(page: str, variants: dict[str, dict]) -> str:
    """Each of the page's figure <img> whose picture has a narrow variant becomes a <picture> that gives
    it to a phone's viewport; every figure <img> carries its text sizes (`data-text-px`)."""
    from harness.publish.figure_cells import picture

    def swap(m: re.Match[str]) -> str:
        v = variants.get(m.group(1))
        if v is None:
            return m.group(0)
        return picture(m.group(0), text_px=v.get("text_px"), narrow_text_px=v.get("narrow_text_px"),
                       narrow=v.get("narrow"))

    return re.sub(r'<img\b[^>]*?\bsrc="data:image/png;base64,([A-Za-z0-9+/=]+)"[^>]*>', swap, page)


def quarto_env(**extra: str) -> dict[str, str]:
    """The environment `quarto render` runs in. Quarto's Jupyter engine runs the kernel of the Python
    it finds; make that this project's (QUARTO_PYTHON, and its bin/ first on PATH for `jupyter`),
    whether or not the venv is activated, and let the kernel, which starts in a private copy, import
    this checkout's harness."""
    py_bin = str(Path(sys.executable).parent)
    return dict(os.environ, QUARTO_PYTHON=os.environ.get("QUARTO_PYTHON", sys.executable),
                PATH=os.pathsep.join([py_bin, os.environ.get("PATH", "")]),
                PYTHONPATH=os.pathsep.join(p for p in [str(paths.PROJ_ROOT), os.environ.get("PYTHONPATH")] if p),
                **extra)


def _run_quarto(cmd: list[str], *, cwd: str, env: dict[str, str], name: str) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        line = _quarto_error(proc.stderr + "\n" + proc.stdout)
        if "ClaimFailed:" in line:
            raise ClaimFailed(line.split("ClaimFailed:", 1)[-1].strip())
        raise RenderError(f"quarto render {name} failed (exit {proc.returncode}): {line}")


def _quarto_figures(md: str, built: Path, scratch: Path) -> tuple[str, list[Path]]:
    """REPORT.md's images, which Quarto writes as `index_files/figure-commonmark/<label>-output-<n>.png`,
    moved to `figures/` under the names the harness's own renderer gives them (`<label>.png`, or
    `<label>-<k>.png` for a cell that draws several), REPORT.md's links rewritten to match."""
    found = list(dict.fromkeys(re.findall(r"[\w./-]*figure-commonmark/[\w.-]+\.png", md)))
    by_label: dict[str, list[str]] = {}
    for ref in found:
        label = re.sub(r"-output-\d+$", "", Path(ref).stem)
        by_label.setdefault(label, []).append(ref)
    figs: list[Path] = []
    for label, refs in by_label.items():
        for k, ref in enumerate(refs, start=1):
            src = built / ref
            if not src.is_file():
                raise RenderError(f"quarto render: REPORT.md links {ref}, which it did not write")
            dst = scratch / "figures" / (f"{label}.png" if len(refs) == 1 else f"{label}-{k}.png")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
            figs.append(dst)
            md = md.replace(ref, f"figures/{dst.name}")
    return md, figs


def render(study_dir: Path | str, out_dir: Path | str | None = None, *,
           strict_claims: Iterable[str] | str | bool | None = None, quarto: bool | None = None,
           qmd: Path = QMD, say: Callable[[str], None] = print, allow_reused: bool | None = None,
           allow_different_work: bool | None = None, replace: bool = False) -> RenderResult:
    """REPORT.md, index.html, figures, the dataset card README.md and the derived tables and export of
    a study folder, under `out_dir` (default `<study>/report/`). With `quarto` on PATH (and `quarto`
    not False) `quarto render` runs index.qmd with the study as a parameter; otherwise index.qmd's
    cells run through a Jupyter kernel here. Says on the console which path it took. Everything is
    built in a new folder beside the output and moved into place whole (schema.outdir): a failing
    claim or cell leaves the previous report in place, and an `out_dir` the harness did not write is
    refused, as is one an earlier render wrote unless `replace` (the default folder is rewritten).
    `allow_reused` / `allow_different_work` (None: as study.yaml declares) reach the cells and the
    derived tables alike, so the page and its tables select the same runs."""
    from harness.schema.outdir import output_dir  # lazily: the kernel imports this module and nothing heavy

    t0 = time.monotonic()
    root = _resolve(study_dir)
    if not root.is_dir():
        raise UserError(f"{study_dir}: no such study folder")
    if not (root / "study.yaml").exists() and not (root / "runs").is_dir():
        raise UserError(f"{study_dir}: not a study folder (neither study.yaml nor runs/ in it)")
    if not qmd.exists():
        raise UserError(f"{qmd}: the report's source is missing")
    out = Path(out_dir) if out_dir is not None else root / "report"
    exe = find_quarto() if quarto is not False else None
    if quarto is True and exe is None:
        raise UserError("quarto: command not found on PATH or in .cache/quarto (`make quarto` installs it; "
                        "drop --quarto to render through the Jupyter kernel)")
    allow = {"allow_reused": allow_reused, "allow_different_work": allow_different_work}
    params = _params(root, strict_claims, allow)
    with output_dir(out, verb="report", replace=replace, default=out_dir is None) as scratch:
        # The derived tables are built in a thread while the cells run: the kernel mostly waits. The
        # thread is waited for before the folder is kept or thrown away.
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            derived_job = pool.submit(_derive, root, scratch, allow)
            if exe:
                say(f"report: quarto found ({exe}): quarto render {qmd.name} -P study:{_rel(root)} "
                    "(on a private copy of the project)")
                md, figs = _render_quarto(exe, qmd, params, scratch)
                engine: Literal["quarto", "kernel"] = "quarto"
            else:
                say(f"report: quarto is not on PATH; executing {qmd.name}'s cells through the Jupyter kernel "
                    f"'{KERNEL}' (nbclient), HTML by python-markdown")
                md, figs = _render_kernel(qmd, params, scratch)
                engine = "kernel"
            canon, derived = derived_job.result()
        finally:
            pool.shutdown(wait=True)
        card = card_text(card_header(canon, scratch), md)
        (scratch / "README.md").write_text(card, encoding="utf-8")
    rel = {p.relative_to(scratch): p for p in figs}
    return RenderResult(engine=engine, out_dir=out, report=out / "REPORT.md", card=out / "README.md",
                        html=out / "index.html", figures=tuple(out / r for r in rel),
                        derived=tuple(out / p.relative_to(scratch) for p in derived),
                        seconds=time.monotonic() - t0)


def _derive(root: Path, scratch: Path, allow: dict[str, bool | None]) -> tuple[Any, list[Path]]:
    """CANONICAL.md, MANIFEST.md, tables/, compare/ and export/: what the card's configs point at."""
    from harness.analyze.derive import derive_into

    return derive_into(root, scratch, **allow)


def main_summary(res: RenderResult) -> str:
    """The CLI's closing line."""
    rel = os.path.relpath(res.out_dir)
    return (f"report ({res.engine}, {res.seconds:.1f} s): {rel}/REPORT.md, {rel}/index.html, {rel}/README.md "
            f"(dataset card), {len(res.figures)} figures, {len(res.derived)} derived files")
