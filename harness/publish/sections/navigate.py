"""Finding one's way: links to the study's derived files beside the report, and the citation block a
dataset card expects (title, version, date, source)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from harness.analyze.tables import _legs
from harness.core.locate import rel
from harness.publish.study import Study


def files(st: Study) -> list[tuple[str, str]]:
    """(label, link relative to the report folder) of the files the render writes beside the page;
    compare/ only where there is a pair of legs to compare."""
    out = [("CANONICAL.md", "CANONICAL.md"), ("MANIFEST.md", "MANIFEST.md"), ("tables/", "tables/")]
    if len(_legs(st.canon)) >= 2:
        out.append(("compare/", "compare/"))
    out.append(("export/", "export/"))
    return out


def links_md(st: Study) -> str:
    return "**This study's files:** " + " · ".join(f"[{a}]({b})" for a, b in files(st)) + "\n"


@dataclass(frozen=True, kw_only=True)
class Citation:
    key: str
    title: str
    version: str
    date: str
    source: str
    publisher: str
    author: str        # who made the data, as a reader should read it
    bib_author: str | None   # the same as a BibTeX name, where there is one to give
    url: str           # an address, or the study folder's path in this repository
    licence: str


def data_version(st: Study) -> str:
    """A content hash of the canonical cells (leg, model, workload, samples): the same records give
    the same version, any change to a figure a new one."""
    c = st.canon.cells
    rows = sorted((str(r["leg"]), str(r["model"]), str(r["workload"]), [float(v) for v in r["samples"]])
                  for r in c.to_dict("records")) if len(c) else []
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:12]


def citation(st: Study) -> Citation:
    from harness import __version__

    s = st.canon.study
    cfg = st.config.citation
    runs = st.canon.runs
    # The data's date is its last run's: when it finished, or, for records that keep only the start, started.
    col = "finished_at" if "finished_at" in runs else "started_at"
    dates = sorted(str(d)[:10] for d in runs.get(col, []) if isinstance(d, str) and d) if len(runs) else []
    date = (cfg.date if cfg and cfg.date else None) or (dates[-1] if dates else "not recorded")
    if st.transcribed:
        docs = sorted({str(d) for d in st.ds.records["source_document"].dropna()}) or ["a published document"]
        source = (cfg.source if cfg and cfg.source else None) or ("transcribed from " + "; ".join(docs))
    else:
        source = (cfg.source if cfg and cfg.source else None) or f"measured by vllm-harness {__version__}, records " \
                                                                 f"under {rel(st.root)}/runs/"
    publisher = cfg.publisher if cfg and cfg.publisher else "vllm-harness"
    if st.transcribed:
        bib = cfg.author if cfg and cfg.author else None
        author = bib or "the source study's authors (its report names none)"
        licence = "the source's (the figures are a third party's, transcribed)"
    else:
        bib = (cfg.author if cfg and cfg.author else None) or f"{{{publisher}}}"   # braced: an organisation
        author = (cfg.author if cfg and cfg.author else None) or f"{publisher} (measured with the harness)"
        licence = str(s.extra.get("license", "apache-2.0"))
    url = (cfg.url if cfg and cfg.url else None) or f"{rel(st.root)}/ in the vllm-harness repository"
    return Citation(key=f"vllm-harness-{s.name}", title=s.title or s.name,
                    version=f"{__version__}+data.{data_version(st)}", date=date, source=source,
                    publisher=publisher, author=author, bib_author=bib, url=url, licence=licence)


def citation_md(st: Study) -> str:
    c = citation(st)
    year = c.date[:4] if c.date[:4].isdigit() else None   # no date recorded: no year, rather than "n.d."
    return "\n".join([
        "| field | value |", "|---|---|",
        f"| title | {c.title} |", f"| author | {c.author} |", f"| version | `{c.version}` |",
        f"| date | {c.date} |", f"| source | {c.source} |", f"| where | {c.url} |", f"| licence | {c.licence} |",
        "",
        "```bibtex",
        f"@misc{{{c.key},",
        f"  title     = {{{{{c.title}}}}},",
        *([f"  author    = {{{c.bib_author}}},"] if c.bib_author else []),
        f"  version   = {{{c.version}}},",
        *([f"  year      = {{{year}}},", f"  date      = {{{c.date}}},"] if year else []),
        f"  publisher = {{{c.publisher}}},",
        f"  howpublished = {{{c.url}}},",
        f"  note      = {{{c.source}}}",
        "}",
        "```",
        "",
        "_The version is the harness's and a hash of the canonical figures: a re-render of the same records keeps it; "
        "any changed figure changes it._",
    ]) + "\n"
