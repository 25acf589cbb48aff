"""Study notes: the reasoning a study's records cannot carry (why a failure is a version window and
not missing support, what was ruled out, what a number does not mean), authored as markdown files
under `<study>/notes/*.md` and shown in the section of the page they belong to.

Each note opens with a small YAML front matter (`NoteMeta`): its title, the section it belongs to,
and its provenance: `study` (the study's own finding, restated in this project's words, with its
source named) or `analysis` (this project's own reasoning). A note never types a number that the
records hold: every such number is a placeholder computed at render time, with the value the author
read (`expect=`), and a note whose computed number no longer matches fails the render, as a strict
claim does. A number only the source holds is marked as quoted, and shown as such.

Placeholders (`{{ kind: key=value, ..., expect=TEXT }}`; values without commas, or quoted with "...";
`expect=` last, taking the rest of the placeholder):
  {{ value: model=M, workload=W, leg=LABEL, expect=7,004 }}    a canonical figure (the cell's median)
  {{ ratio: model=M, workload=W, step=0.18->0.26, expect=0.70x }}  ratio of medians, as the tables
      orient it; `ci=yes` adds the 95% interval ("0.70x [0.69, 0.73]"), `rounding=yes` the
      interval the printed rounding allows
  {{ samples: model=M, workload=W, leg=LABEL, expect="7,030 / 6,985 / 6,948" }}  every repeat
  {{ spread: model=M, workload=W, leg=LABEL, expect=1.2% }}    (max - min) / median of the repeats
  {{ count: what=passing|pinned|failing|full, leg=LABEL, expect=13 }}  models (full: on every leg)
  {{ NAME: key=value, ..., expect=TEXT }}  a number from a side-experiment's records of the study, for
      every experiment of harness.experiments with a `quote` (its docstring names the keys), e.g.
      {{ bisect: version=0.32.0, stat=median, expect=10,791.69 }}  a step of the study's bisect record
      (stat=median, n, spread, or ratio: its speed against the good leg with the interval; model= and
      workload= pick one record where the study has several)
      {{ crosscheck: leg=NAME, model=M, workload=W, stat=harness, expect=12,682 }}  crosscheck median
  {{ printed: model=M, workload=W, step=0.26->0.29, study=h200-reference, expect=1.17x }}  a ratio the
      study's source printed without its figures (`printed.yaml`), or the outcome it printed instead
  {{ transfer: model=M, workload=W, step=0.18->0.26, study=h200-reference, expect=transfers }}  the
      `compare-studies` verdict for the cell, this study as A
  {{ quoted: 0.71x }}                                          a number from the source, shown with †
Any computed kind takes `series=S` (another series of the study) and `study=NAME` (another study
under results/, e.g. the H200 companion), both optional.

Format history of the front matter:
  1 - title, section, provenance (study | analysis), source, order; section `about` (shown under "About
      this dataset") added later, a widening: every earlier note reads as before.
Migration: a later version adds `schema_version`; a note without it is version 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import ValidationError, model_validator

from harness import workloads
from harness.analyze.canonical import Canonical, canonicalize
from harness.analyze.dataset import load
from harness.analyze.verdicts import study_verdicts
from harness.analyze.tables import _legs
from harness import experiments
from harness.core.errors import InvalidFileError, UserError
from harness.core.yamlio import describe
from harness.analyze.strict import ClaimFailed
from harness.publish.study import Study
from harness.schema.base import Frozen

NOTE_SCHEMA = 1
Section = Literal["answer", "coverage", "headline", "failures", "supporting", "diagnostics", "stack",
                  "limitations", "defects", "about"]
QUOTED_MARK = "†"


class NoteMeta(Frozen):
    title: str
    section: Section
    provenance: Literal["study", "analysis"]
    source: str | None = None    # the document a `study` note restates
    order: int = 0

    @model_validator(mode="after")
    def _source_named(self) -> NoteMeta:
        if self.provenance == "study" and not (self.source or "").strip():
            raise ValueError("source: a note of provenance `study` names the document it restates")
        return self


@dataclass(frozen=True, kw_only=True)
class Note:
    path: Path
    meta: NoteMeta
    body: str          # as written, placeholders unresolved


_FRONT = re.compile(r"\A---\n(.*?)\n---\n", re.S)
_PLACE = re.compile(r"\{\{\s*([a-z]+)\s*:\s*(.*?)\s*\}\}", re.S)
_KV = re.compile(r'\s*([a-z_]+)\s*=\s*("([^"]*)"|[^,]*)\s*(?:,|$)')


def read_note(path: Path) -> Note:
    text = path.read_text(encoding="utf-8")
    m = _FRONT.match(text)
    if not m:
        raise InvalidFileError(path, "a note opens with a YAML front matter between --- lines")
    try:
        raw = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError as e:
        raise InvalidFileError(path, f"front matter is not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise InvalidFileError(path, "front matter: expected a mapping")
    try:
        meta = NoteMeta.model_validate(raw)
    except ValidationError as e:
        raise InvalidFileError(path, describe(e)) from None
    return Note(path=path, meta=meta, body=text[m.end():].strip("\n"))


def study_notes(root: Path) -> list[Note]:
    folder = root / "notes"
    if not folder.is_dir():
        return []
    notes = [read_note(p) for p in sorted(folder.glob("*.md"))]
    return sorted(notes, key=lambda n: (n.meta.order, n.path.name))


def _args(text: str, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = _KV.match(text, pos)
        if not m or m.end() == pos:
            raise UserError(f"{where}: cannot read the placeholder's arguments {text!r} (key=value, ...)")
        out[m.group(1)] = m.group(3) if m.group(3) is not None else m.group(2).strip()
        pos = m.end()
    return out


@lru_cache(maxsize=8)
def _other_canon(name: str, series: str | None) -> Canonical:
    from harness.core import paths

    root = paths.PROJ_ROOT / "results" / name
    if not (root / "study.yaml").is_file():
        raise UserError(f"study={name}: no study folder results/{name}")
    ds = load(root)
    return canonicalize(ds, series=series or ds.study.main_series)


def _canon(st: Study, a: dict[str, str]) -> Canonical:
    series = a.get("series")
    if a.get("study"):
        return _other_canon(a["study"], series)
    if series is None:
        return st.canon
    if series not in st.series:
        raise UserError(f"series={series}: no such series in {st.canon.study.name} (has: {', '.join(st.series)})")
    return st.series[series]


def _leg(canon: Canonical, label: str) -> str:
    for name, lb in _legs(canon):
        if label in (name, lb):
            return name
    raise UserError(f"leg={label}: no such leg in {canon.study.name} (has: "
                    f"{', '.join(lb for _, lb in _legs(canon))})")


def _cell(canon: Canonical, a: dict[str, str], leg: str) -> dict:
    c = canon.cells
    hit = c[(c["leg"] == _leg(canon, leg)) & (c["model"] == a.get("model")) & (c["workload"] == a.get("workload"))]
    if not len(hit):
        raise UserError(f"no canonical cell {a.get('model')} {a.get('workload')} on {leg} in {canon.study.name}")
    return hit.iloc[0].to_dict()


def compute(st: Study, kind: str, a: dict[str, str]) -> str:
    """The placeholder's text, computed from the data."""
    if kind == "value":
        c = _cell(_canon(st, a), a, a.get("leg", ""))
        return str(workloads.metric_of(c["kind"]).fmt(float(c["value"])))
    if kind == "samples":
        c = _cell(_canon(st, a), a, a.get("leg", ""))
        m = workloads.metric_of(c["kind"])
        return " / ".join(m.fmt(float(v)) for v in c["samples"])
    if kind == "spread":
        c = _cell(_canon(st, a), a, a.get("leg", ""))
        sp = c["spread"]
        return "—" if sp is None or sp != sp else f"{sp:.1%}"   # None or NaN: one repeat, no spread
    if kind == "ratio":
        canon = _canon(st, a)
        old, _, new = a.get("step", "").partition("->")
        co, cn = _cell(canon, a, old.strip()), _cell(canon, a, new.strip())
        # The study's verdict object for the cell (harness.analyze.verdicts): the ratio and interval its
        # tables print; for transcribed figures the ratio of the rounded figures, as the notes cite them.
        v = study_verdicts(canon).get(co["kind"], co["model"], co["workload"], co["leg"], cn["leg"])
        if v is None or v.ratio is None:
            return "—"
        value = v.recomputed if v.recomputed is not None else v.ratio
        s = f"{value:.2f}x"
        if v.low is not None and v.high is not None and (
                (a.get("ci") == "yes" and v.interval != "rounding") or (a.get("rounding") == "yes" and v.interval == "rounding")):
            s += f" [{v.low:.2f}, {v.high:.2f}]"
        return s
    if kind == "count":
        return str(_count(_canon(st, a), a))
    if kind == "printed":
        return _printed(st, a)
    if kind == "transfer":
        return _transfer(st, a)
    quoting = experiments.quoting()
    if kind in quoting:
        exp = quoting[kind]
        legs = {n for n, _ in _legs(st.canon)}
        models = set(st.canon.cells["model"]) if len(st.canon.cells) else set()
        return exp.quote(exp.study_records(st.root, legs, models), a)
    raise UserError(f"unknown placeholder kind {kind!r} (value, ratio, samples, spread, count, printed, transfer, "
                    f"{', '.join(quoting)}, quoted)")


def _count(canon: Canonical, a: dict[str, str]) -> int:
    from harness.analyze.failure import attributions_by_model
    from harness.analyze.claims.base import models, passes

    what = a.get("what")
    if what == "full":
        return sum(all(passes(canon, lg, m) for lg, _ in _legs(canon)) for m in models(canon))
    leg = _leg(canon, a.get("leg", ""))
    if what == "passing":
        return sum(passes(canon, leg, m) for m in models(canon))
    att = attributions_by_model(canon.dataset, series=canon.series)
    att = att[att["leg"] == leg]
    if what == "pinned":
        return int((att["status"] == "passes only pinned").sum())
    if what == "failing":
        return int((att["status"] == "missing").sum())
    raise UserError(f"count: what={what!r} (passing, pinned, failing, full)")


def _study_root(st: Study, a: dict[str, str]) -> Path:
    from harness.core import paths

    return paths.PROJ_ROOT / "results" / a["study"] if a.get("study") else st.root


def _printed(st: Study, a: dict[str, str]) -> str:
    from harness.schema.printed import read_printed

    p = read_printed(_study_root(st, a))
    old, _, new = a.get("step", "").partition("->")
    e = p.get(a.get("model", ""), a.get("workload", ""), old.strip(), new.strip()) if p else None
    if e is None:
        raise UserError(f"printed: no printed ratio for {a.get('model')} {a.get('workload')} {a.get('step')}")
    return f"{e.ratio:.2f}x" if e.ratio is not None else str(e.outcome)


def _transfer(st: Study, a: dict[str, str]) -> str:
    """The compare-studies verdict for one cell, this study as A and `study=` as B."""
    from harness.analyze.compare_studies import find

    other = _study_root(st, a)
    c = _comparison(str(st.root), str(other))
    row = find(c, a.get("model", ""), a.get("workload", ""), a.get("step", ""))
    if row is None:
        raise UserError(f"transfer: no cell {a.get('model')} {a.get('workload')} {a.get('step')} in either study")
    return row.verdict.split(" (")[0]


@lru_cache(maxsize=4)
def _comparison(a: str, b: str):  # noqa: ANN202
    from harness.analyze.compare_studies import compare_studies

    return compare_studies(a, b)


def resolve(st: Study, note: Note) -> tuple[str, bool]:
    """The note's body with every placeholder replaced; whether any number in it is quoted. A
    computed number that differs from its `expect=` raises ClaimFailed (the render fails)."""
    quoted = False
    where = str(note.path)

    def sub(m: re.Match[str]) -> str:
        nonlocal quoted
        kind, rest = m.group(1), m.group(2)
        if kind == "quoted":
            quoted = True
            return f"{rest.strip().strip(chr(34))}{QUOTED_MARK}"
        # `expect=` comes last and takes the rest, commas included ("7,004", "0.70x [0.69, 0.73]").
        head, sep, tail = rest.rpartition("expect=")
        a = _args(head.rstrip().rstrip(",") if sep else rest, where)
        expect = tail.strip().strip('"') if sep else None
        if expect is None:
            raise UserError(f"{where}: {{{{ {kind}: {rest} }}}} has no expect= (the number the note was written "
                            f"against)")
        try:
            got = compute(st, kind, a)
        except UserError as e:
            raise UserError(f"{where}: {{{{ {kind}: {rest} }}}}: {e}") from None
        if got != expect:
            raise ClaimFailed(f"note {where}: {{{{ {kind}: {rest} }}}} computes {got} from the data, the note says "
                              f"{expect}; the note no longer matches the data")
        return got

    return _PLACE.sub(sub, note.body), quoted


def provenance_line(meta: NoteMeta) -> str:
    if meta.provenance == "study":
        return f"_The study's own finding, restated in this project's words; source: {meta.source}._"
    return "_This project's analysis of the records._"


def notes_md(st: Study, section: str) -> str:
    """Every note of the study that belongs to `section`, resolved."""
    out = []
    for note in study_notes(st.root):
        if note.meta.section != section:
            continue
        body, quoted = resolve(st, note)
        out += [f"#### {note.meta.title}", "", provenance_line(note.meta), "", body, ""]
        if quoted:
            out += [f"_{QUOTED_MARK} quoted from {note.meta.source or 'the source'}, not computed from these "
                    f"records._", ""]
    return "\n".join(out)


def check_notes(st: Study) -> list[str]:
    """Resolve every note (the render does the same): the titles of the notes that hold."""
    return [n.meta.title for n in study_notes(st.root) if resolve(st, n)]
