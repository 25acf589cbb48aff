"""The diagnostics section's text: the notebooks the study points to, the cross-check against
vLLM's own benchmark, and the bisect / dependency-window records of the study's legs."""

from __future__ import annotations

from harness.analyze.tables import _legs, ticked
from harness.core.errors import UserError
from harness.publish.study import Study


def notebooks(st: Study) -> list[str]:
    """The diagnostic notebooks the study lists (study.yaml `report.notebooks`), as paths."""
    return [f"notebooks/{nb}" for nb in st.config.notebooks]


def diagnostics_intro_md(st: Study) -> str:
    nbs = notebooks(st)
    steps = len(_legs(st.canon)) >= 2
    text = ("The figures here are drawn from the same canonical runs as the tables: "
            + ("the ratio of each step with its 95% interval, " if steps else "")
            + "the coverage of every (model, leg), the dispersion of every repeated measurement, and each "
              "repeated run's speed against the time it ran (did the machine drift, and did a slow spell "
              "strike the legs of a repeat alike).")
    if nbs:
        text += (" The diagnostic notebooks (" + ", ".join(f"`{p}`" for p in nbs)
                 + ") take the study as a parameter and go further.")
    return text + "\n"


def crosscheck_section_md(st: Study) -> str:
    from harness.experiments.crosscheck_md import band_verdict, crosscheck_md, interval_text
    from harness.experiments.crosscheck import load as load_crosscheck

    summary = load_crosscheck(st.root)
    if not summary or not summary.get("rows"):
        return ""
    rows = summary["rows"]
    band = st.ds.study.extra.get("crosscheck_band")
    lead = []
    for r in rows:
        if r["ratio"] is None:
            continue
        ci = interval_text(r)
        one = " (one engine)" if r.get("design") == "one engine" else ""
        lead.append(f"{ticked(r['model'])} {r['workload']}{one} on {st.canon.study.label(r['leg'])}: harness ÷ vLLM = "
                    f"{r['ratio']:.3f}{ci}, "
                    f"{r['verdict']}" + (f"; against the target 1 ± {band:g}: {band_verdict(r, band)}" if band else ""))
    return ("### Cross-check against vLLM's own throughput benchmark\n\n"
            "Each harness run had a run of vLLM's own throughput benchmark beside it, in the same leg env, on the "
            "same workload, repetition outermost, the pair's order alternating with the repeat"
            + ("; rows marked (one engine) timed both tools on one engine per block, their passes alternating"
               if any(r.get("design") == "one engine" for r in rows) else "")
            + ". " + "; ".join(lead) + ".\n\n" + crosscheck_md(summary, band))


def side_records_md(st: Study) -> str:
    """The side-experiments' records of this study that the report shows beside its tables
    (harness.experiments.side_sections: bisects of its own scenario on its legs and models); another
    study's records on the same legs are that study's diagnostics, not this one's."""
    from harness.experiments import side_sections

    legs = [n for n, _ in _legs(st.canon)]
    models = list(st.canon.cells["model"]) if len(st.canon.cells) else []
    try:
        return "\n".join(side_sections(st.root, legs, models, study=st.canon.study.name))
    except UserError as e:
        return f"_A bisect or window record could not be read: {e}_\n"
