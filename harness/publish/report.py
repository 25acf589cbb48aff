"""The report and the dataset card of a study folder; every number in them is computed at render time.

This module is the face that `index.qmd` imports (`from harness.publish import report`): a parameters
cell (`study`, `strict_claims`), one import cell, and short cells that call the functions named here
and print markdown (`output: asis`) or show a figure. What they are made of:

- `harness.publish.study`: the `Study` the cells share (`load_study`), and `harness.publish.config`,
  the study.yaml `report:` block (strict claims, study-specific claim kinds, model classes, notebooks);
- `harness.publish.claims`: the claims engine and its registry of claim kinds (`findings`);
- `harness.publish.sections`: one module per part of the page, each computing data, then formatting it;
- `harness.publish.figure_cells`: the figures as cell outputs; `harness.publish.card`: the dataset card;
- `harness.publish.render`: `render(study_dir)` runs `quarto render` with the study as a parameter
  where the `quarto` command exists, and otherwise executes index.qmd's cells through a Jupyter
  kernel; either way it writes REPORT.md, the HTML page and the dataset card `README.md`, whose body
  is REPORT.md's text.
"""

from __future__ import annotations

from harness.publish.card import card_body, card_header, card_text
from harness.publish.claims import Claim, ClaimParams, Step, findings, steps
from harness.publish.figure_cells import (
    Note, Png, coverage_figure, dispersion_figure, ratio_figure, series_figures, show, show_all,
)
from harness.publish.render import QMD, RenderError, RenderResult, render
from harness.publish.sections.data import coverage_md, failures_md, latency_md, throughput_md
from harness.publish.sections.diagnostics import crosscheck_section_md, diagnostics_intro_md, side_records_md
from harness.publish.sections.headline import claims_md, headline_md
from harness.publish.sections.limitations import limitations_md, sources_md
from harness.publish.sections.overview import about_md, intro_md, title_md
from harness.publish.sections.supporting import stack_md, supporting_md
from harness.publish.strict import ClaimFailed
from harness.publish.study import Study, load_study, series_canons

__all__ = [
    "QMD", "Claim", "ClaimFailed", "ClaimParams", "Note", "Png", "RenderError", "RenderResult", "Step", "Study",
    "about_md", "card_body", "card_header", "card_text", "claims_md", "coverage_figure", "coverage_md",
    "crosscheck_section_md", "diagnostics_intro_md", "dispersion_figure", "failures_md", "findings", "headline_md",
    "intro_md", "latency_md", "limitations_md", "load_study", "ratio_figure", "render", "series_canons",
    "series_figures", "show", "show_all", "side_records_md", "sources_md", "stack_md", "steps", "supporting_md",
    "throughput_md", "title_md",
]
