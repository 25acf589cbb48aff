"""The report and the dataset card of a study folder; every number in them is computed at render time.

This module is the face that `index.qmd` imports (`from harness.publish import report`): a parameters
cell (`study`, `strict_claims`), one import cell, and short cells that call the functions named here
and print markdown (`output: asis`) or show a figure. What they are made of:

- `harness.publish.study`: the `Study` the cells share (`load_study`), and `harness.schema.report_config`,
  the study.yaml `report:` block (strict claims, study-specific claim kinds, model classes, notebooks);
- `harness.analyze.claims`: the claims engine and its registry of claim kinds (`findings`);
- `harness.publish.sections`: one module per part of the page, each computing data, then formatting it
  (`answer` first: the verdict table); `harness.publish.notes`: the study's authored notes, every number
  in them computed at render time or marked as quoted;
- `harness.publish.figure_cells`: the figures as cell outputs; `harness.publish.card`: the dataset card;
- `harness.publish.render`: `render(study_dir)` runs `quarto render` with the study as a parameter
  where the `quarto` command exists, and otherwise executes index.qmd's cells through a Jupyter
  kernel; either way it writes REPORT.md, the HTML page and the dataset card `README.md`, whose body
  is REPORT.md's text.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from harness.publish.card import card_body, card_header, card_text
from harness.analyze.claims import Claim, ClaimParams, Step, findings, steps
from harness.publish.figure_cells import (
    Note, Png, answer_figure, coverage_figure, dispersion_figure, drift_figure, ratio_caption_md, ratio_figure, series_figures, show,
    show_all,
)
from harness.publish.mdtable import align_tables
from harness.publish.notes import notes_md
from harness.publish.render import QMD, RenderError, RenderResult, render
from harness.publish.sections import answer as _answer
from harness.publish.sections import capacity as _capacity
from harness.publish.sections import coldstart as _cold
from harness.publish.sections import data as _data
from harness.publish.sections import diagnostics as _diag
from harness.publish.sections import halfpass as _halfpass
from harness.publish.sections import headline as _headline
from harness.publish.sections import history as _history
from harness.publish.sections import limitations as _limits
from harness.publish.sections import navigate as _nav
from harness.publish.sections import overview as _overview
from harness.publish.sections import serving as _serving
from harness.publish.sections import profile as _profile
from harness.publish.sections import supporting as _supporting
from harness.publish.sections import sweeptime as _sweeptime
from harness.analyze.strict import ClaimFailed
from harness.publish.study import Study, load_study, series_canons, tristate


def _aligned(f: Callable[[Study], str]) -> Callable[[Study], str]:
    """A section's markdown with the numeric columns of its tables right-aligned."""
    @wraps(f)
    def g(st: Study) -> str:
        return align_tables(f(st))
    return g


def answer_md(st: Study) -> str:
    """The answer: its summary, the study's notes for it (context), then the verdict table."""
    return align_tables(_answer.answer_md(st, between=notes_md(st, "answer")))



def about_md(st: Study) -> str:
    """"About this dataset": what the report folder holds, then the study's notes for it (for a
    transcribed study, what the source itself shipped)."""
    notes = notes_md(st, "about")
    return align_tables(_overview.about_md(st) + "\n" + _overview.workloads_md(st)
                        + ("\n" + notes if notes.strip() else ""))


def steps_md(st: Study) -> str:
    """One sentence per step (how many cells are faster, slower, …), the first lines under the title."""
    return "\n\n".join(_answer.step_lines(_answer.answer(st))) + "\n"


title_md, intro_md = _overview.title_md, _aligned(_overview.intro_md)
coverage_md, failures_md = _aligned(_data.coverage_md), _aligned(_data.failures_md)
throughput_md, latency_md = _aligned(_data.throughput_md), _aligned(_data.latency_md)
crosscheck_section_md = _aligned(_diag.crosscheck_section_md)
diagnostics_intro_md, side_records_md = _diag.diagnostics_intro_md, _aligned(_diag.side_records_md)
claims_md, headline_md = _aligned(_headline.claims_md), _headline.headline_md
limitations_md, sources_md = _limits.limitations_md, _limits.sources_md
stack_md, supporting_md = _aligned(_supporting.stack_md), _aligned(_supporting.supporting_md)
links_md, citation_md = _nav.links_md, _nav.citation_md
serving_md, serving_figures = _aligned(_serving.serving_md), _serving.serving_figures
capacity_md, capacity_figures = _aligned(_capacity.capacity_md), _capacity.capacity_figures
half_pass_md, half_pass_figures = _aligned(_halfpass.half_pass_md), _halfpass.half_pass_figures
profile_md = _aligned(_profile.profile_md)
coldstart_md = _aligned(_cold.coldstart_md)
sweeptime_md = _aligned(_sweeptime.sweeptime_md)
history_md, history_figures = _aligned(_history.history_md), _history.history_figures

__all__ = [
    "QMD", "Claim", "ClaimFailed", "ClaimParams", "Note", "Png", "RenderError", "RenderResult", "Step", "Study",
    "about_md", "answer_figure", "answer_md", "capacity_figures", "capacity_md", "citation_md", "links_md", "notes_md", "ratio_caption_md", "card_body", "card_header", "card_text", "claims_md", "coldstart_md", "sweeptime_md", "coverage_figure", "coverage_md",
    "crosscheck_section_md", "diagnostics_intro_md", "dispersion_figure", "drift_figure", "failures_md", "findings", "half_pass_figures", "half_pass_md", "headline_md", "history_figures", "history_md",
    "intro_md", "latency_md", "profile_md", "limitations_md", "load_study", "ratio_figure", "render", "series_canons",
    "series_figures", "show", "show_all", "side_records_md", "sources_md", "stack_md", "steps", "steps_md", "supporting_md",
    "throughput_md", "title_md", "tristate",
]
