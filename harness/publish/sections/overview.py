"""The top of the page: title, where the numbers come from, what the report folder holds."""

from __future__ import annotations

import pandas as pd

from harness.analyze.canonical import Canonical
from harness.analyze.stats import ALPHA, METHOD
from harness.analyze.tables import _legs, markdown_table, ticked
from harness.analyze import wording as w
from harness.core.locate import rel
from harness.publish.study import Study


TITLE_LEGS = 3  # more legs than this: the title names the first and the last and counts them


def short_title(st: Study) -> str:
    """The page's title: the study's name and its legs ("cpu-tiny: 0.27 → 0.32"); study.yaml's title,
    a sentence, is the subtitle under it."""
    labels = [lb for _, lb in _legs(st.canon)]
    if len(labels) > TITLE_LEGS:
        # A release history's seven legs filled a phone's first screen; the legs are listed under it.
        return f"{st.canon.study.name}: {labels[0]} → {labels[-1]} ({len(labels)} legs)"
    return f"{st.canon.study.name}: {' → '.join(labels)}" if labels else st.canon.study.name


def title_md(st: Study) -> str:
    """The short title as the page's one level-1 heading, then study.yaml's title in italics (Quarto's
    filter makes it the subtitle)."""
    s = st.canon.study
    short = short_title(st)
    long = s.title.strip() if s.title else ""
    return f"# {short}\n" + (f"\n_{long}_\n" if long and long != short else "")


def devices(canon: Canonical) -> list[str]:
    return list(dict.fromkeys(str(d) for d in canon.cells["device"].dropna())) if len(canon.cells) else []


def other_repeats(st: Study) -> str:
    """Repeated measurements in series other than the main one, by series and model."""
    parts = []
    for name, c in st.series.items():
        if name == st.canon.series or not len(c.cells):
            continue
        r = c.cells[c.cells["n"] >= 2]
        if len(r):
            parts.append(f"series `{name}` ({', '.join(map(ticked, dict.fromkeys(r['model'])))}, n={w.span(r['n'])})")
    return "; ".join(parts)


def repeat_summary(st: Study) -> str:
    """How often each canonical figure was measured, and where else repeats exist."""
    cells = st.canon.cells
    if not len(cells):
        return "No run of the main series has a canonical measurement."
    single = cells[cells["n"] == 1]
    rep = cells[cells["n"] >= 2]
    if not len(single):
        text = (f"Every canonical figure is the median of {w.span(cells['n'])} repeats, with the significance "
                f"rule's 95% interval on every ratio ({METHOD}, α={ALPHA:g}; docs/statistics.md).")
    elif not len(rep):
        models = list(dict.fromkeys(cells["model"]))
        text = (f"Every canonical figure is a single timed pass ({len(cells)} figures, {w.n(len(models), 'model')}): "
                f"no ratio in the tables has an interval.")
    else:
        text = (f"{len(rep)} of the {len(cells)} canonical figures are medians of {w.span(rep['n'])} repeats; "
                f"{len(single)} {w.v(len(single), 'is', 'are')} a single timed pass ("
                + ", ".join(f"{ticked(m)} {wl} on {lb}" for m, wl, lb in
                            list(zip(single["model"], single["workload"], single["leg_label"]))[:6])
                + (" …" if len(single) > 6 else "") + ").")
    extra = other_repeats(st)
    if extra:
        text += f" Further repeated measurements: {extra}."
    if len(single):
        text += " See \"Known limitations\"."
    return text


def _reused(runs: pd.DataFrame) -> pd.Series:
    """Which runs a later invocation reused: its sweep index names another invocation than the
    record's, or lists the run as reused."""
    later = runs["reused_by"].notna() & (runs["reused_by"] != runs["invocation_id"])
    return later | runs["reused"].map(lambda v: v is True or v == True)  # noqa: E712


def intro(st: Study) -> list[str]:
    """Where the numbers come from, said first: transcribed or measured, and how often (paragraphs)."""
    canon, ds = st.canon, st.ds
    recs = ds.records
    lines = []
    if st.transcribed:
        tr = recs[recs["provenance"] == "transcribed"]
        docs = sorted({str(d) for d in tr["source_document"].dropna()}) or ["a published document"]
        lines.append(f"**Transcribed, not measured.** Every figure in this report is transcribed from "
                     f"{w.names(docs)}: "
                     f"{len(tr)} run records, one per printed figure or printed failure, each with "
                     f"`provenance: transcribed` and the table it was read from. None was measured by this harness. "
                     f"The tables below are rebuilt from those records and every ratio is recomputed from them. Only "
                     f"what the source's tables hold is reproduced as records; its reasoning is restated, in this "
                     f"project's words, only in the study notes, each labelled with its source, every number in them "
                     f"either computed from the records at render time or marked as quoted (†). Every other "
                     f"sentence is built from the records.")
        if (recs["provenance"] == "measured").any():
            n_meas = int((recs["provenance"] == "measured").sum())
            lines[-1] += f" {n_meas} further records are measured; the tables say which."
    else:
        invs = sorted(set(recs["invocation_id"].dropna()))
        used = canon.runs
        reused = used[_reused(used)]
        # Counted over every record too: reused runs the tables leave out (a study that does not
        # declare allow_reused) were still reused, and "none was reused" would say otherwise.
        reused_all = int(_reused(recs).sum())
        dev = w.names(devices(canon)) or "an unrecorded device"
        lines.append(f"**Every number in this report was measured by this harness** on {dev}: {len(recs)} run "
                     f"records (`provenance: measured`) from {w.n(len(invs), 'sweep invocation')}.")
        if len(reused):
            by = sorted(set(reused["invocation_id"]))
            lines[-1] += (f" {len(reused)} of the {len(used)} runs behind the tables were measured by an earlier "
                          f"invocation ({', '.join(f'`{b}`' for b in by)}) and reused by `--resume` in a later one; "
                          f"each was measured once, by the invocation its record names and this study's sweep "
                          f"index lists, so these too are measured numbers.")
        elif reused_all:
            why = ("" if "allow_reused=True" in st.canon.rule else
                   " (reused runs count only where the study declares `allow_reused`)")
            lines[-1] += (f" {reused_all} of the {len(recs)} run records {'was' if reused_all == 1 else 'were'} "
                          f"reused by `--resume` in a later invocation; none of the {len(used)} runs behind the "
                          f"tables is one of them{why}.")
        elif len(used):
            lines[-1] += f" None of the {len(used)} runs behind the tables was reused by `--resume`."
    lines.append(repeat_summary(st))
    return lines


def intro_md(st: Study) -> str:
    *head, summary = intro(st)
    return "\n".join([*head, "", summary]) + "\n"


def about(st: Study) -> pd.DataFrame:
    """What the report folder holds, with counts from the data: (path, what it is)."""
    canon, root = st.canon, st.root
    n_pairs = len(_legs(canon)) * (len(_legs(canon)) - 1) // 2
    runs = root / "runs"
    count = {name: sum(1 for _ in runs.rglob(name)) if runs.is_dir() else 0
             for name in ("results.json", "run.jsonl", "run.log")}
    sweeps = len(list((root / "sweeps").glob("*.json"))) if (root / "sweeps").is_dir() else 0
    excluded = (f"{w.n(len(canon.exclusions), 'run')} excluded, with reasons" if len(canon.exclusions)
                else "no run excluded")
    rows = [
        ("`README.md`", "this dataset card: a Hugging Face YAML header, then the text of `REPORT.md`, unchanged"),
        ("`REPORT.md`", "the analysis below, as a file"),
        ("`index.html`", "the same report as a web page"),
        ("`CANONICAL.md`", f"the rule, and which run is canonical for each of the {len(canon.cells)} "
                           f"(leg, model, workload) cells; {excluded}"),
        ("`MANIFEST.md`", "runtime stack per leg as the runs recorded it, devices, pins"),
        ("`tables/`", "coverage, throughput, latency and failure attribution as markdown, CSV and Parquet"),
        *([("`compare/`", f"pairwise comparison tables for every pair of legs ({n_pairs}), from the same canonical "
                          f"runs")] if n_pairs else []),
        ("`export/`", f"`canonical.parquet` and `canonical.csv`: the {len(canon.cells)} canonical cells, one row each "
                      f"(this card's default configuration), with `DATA_DICTIONARY.md`"),
        ("figures", "the report's figures, as PNG files beside the report"),
        (f"`{rel(root)}/runs/`", "the run records: " + ", ".join(
            f"{count[k]} `{k}`{what}" for k, what in (("results.json", ""), ("run.jsonl", " event streams"),
                                                     ("run.log", " (all output)")) if count[k])),
    ]
    if sweeps:
        rows.append((f"`{rel(root)}/sweeps/`", f"{w.n(sweeps, 'sweep index', 'sweep indexes')}: which invocation "
                                               f"measured or reused each run"))
    return pd.DataFrame(rows, columns=["path", "what it is"])


def about_md(st: Study) -> str:
    """"About this dataset": the study's own description, then what the report folder holds."""
    desc = str(st.canon.study.extra.get("description") or "").strip()
    return "\n".join([
        *([f"> {desc}", ">", "> — the study's own description (`study.yaml`)", ""] if desc else []),
        "This page is the report. `README.md`, `REPORT.md` and `index.html` are one render of `index.qmd` over "
        "the study folder, so the three always say the same.",
        "",
        markdown_table(about(st)),
        "",
        f"Every number below is computed from the run records under `{rel(st.root)}/` when the report is rendered; "
        "none is typed. If the tables, " + ("`compare/` " if len(_legs(st.canon)) >= 2 else "") +
        "and the records ever disagree, that is a bug.",
    ]) + "\n"


# Media parameters of a workload spec, as (keys, how they read): the first key present names the count.
_MEDIA: tuple[tuple[str, str], ...] = (
    ("images_per_prompt", "image"), ("videos_per_prompt", "video"), ("clips_per_prompt", "audio clip"),
)


def _media(spec: dict) -> str:
    parts = []
    for key, noun in _MEDIA:
        n = spec.get(key)
        if n is None:
            continue
        what = f"{n} {noun}{'s' if n != 1 else ''} per prompt"
        if spec.get("source"):
            what += f", from `{spec['source']}`"
        elif spec.get("width") and spec.get("height"):
            what += f", {spec['width']}×{spec['height']} px"
        if spec.get("num_frames"):
            what += f", {spec['num_frames']} frames"
        if spec.get("duration_s") and not spec.get("source"):
            what += f", {spec['duration_s']:g} s"
        parts.append(what)
    return "; ".join(parts) or "—"


def workloads_table(st: Study) -> pd.DataFrame:
    """One row per workload of the main series, from the workload spec its canonical runs recorded
    (the first run's; a workload's spec is the same across legs by the same-work check)."""
    from harness import workloads as wl

    runs = st.canon.runs
    rows: dict[str, dict[str, str]] = {}
    for d in (runs["run_dir"] if len(runs) and "run_dir" in runs else []):
        rec = st.canon.dataset.record(str(d))
        spec = dict(rec.workload_spec or {})
        if rec.workload in rows or not spec:
            continue
        kind = str(spec.get("kind") or rec.workload)
        server = wl.known(kind) and wl.traits_of(kind).server

        def val(key: str) -> str:
            v = spec.get(key)
            return "—" if v is None else f"{v:,}" if isinstance(v, int) else str(v)
        rows[rec.workload] = {
            "workload": rec.workload, "kind": kind, "modality": str(spec.get("modality") or "—"),
            "prompts": "—" if server else val("num_prompts"),
            "input / output tokens": f"{val('input_len')} / {val('output_len')}",
            "batch": val("batch_size"), "media": _media(spec),
            "requests per point": val("num_prompts") if server else "—",
        }
    return pd.DataFrame(list(rows.values()))


def workloads_md(st: Study) -> str:
    """"Workloads": what each workload sends, as its runs recorded it; a study whose records keep no
    workload spec (a transcribed one) says so."""
    t = workloads_table(st)
    if not len(t):
        return ("### Workloads\n\nThe records keep no workload specification (prompts, lengths, batch, media), "
                + ("as the source's tables do not print one: the workloads are known here by their names only.\n"
                   if st.transcribed else "so this page cannot say what each workload sent.\n"))
    cols = [c for c in t.columns if c in ("workload", "kind", "modality") or (t[c] != "—").any()]
    return ("### Workloads\n\nWhat each workload sends, from the specification its runs recorded (`workload_spec` in "
            "each `results.json`): prompts per timed pass, input and output length in tokens, requests per timed "
            "batch, media per prompt and, for a server, requests per load point.\n\n"
            + markdown_table(t[cols]) + "\n")
