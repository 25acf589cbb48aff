"""Transcribe the H200 companion figures that the published B200 study quotes into a small study.

The B200 study annotates each headline with its H200 counterpart, measured on 8x H200 with the same
scenario table, tensor-parallel degrees and runtime stacks. It quotes a few absolute figures (one
record each, `provenance: transcribed`) and, more often, only a ratio: those go to `printed.yaml`
(`harness.schema.printed`), labelled as printed ratios wherever they are shown, because no record
can hold a ratio without its figures. The verbatim list of quoted figures is `published/quoted.tsv`.

    python results/h200-reference/transcribe.py
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the project root, when run as a plain script

from harness.schema.record import Metrics, RunRecord, Source, write  # noqa: E402

STUDY = "h200-reference"
DOCUMENT = "B200 study report (REPORT.md), H200 annotations of \"Headline findings\""
LEGS = {"0.18": "gpu-0.18.0", "0.26": "gpu-0.26.0", "0.29": "gpu-0.29.0"}
DEVICE = "8x NVIDIA H200"


def rows() -> list[dict[str, str]]:
    with (HERE / "published" / "quoted.tsv").open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def records() -> list[RunRecord]:
    out = []
    for r in rows():
        if r["kind"] != "throughput":
            continue
        leg = LEGS[r["leg"]]
        key = {"study": STUDY, "leg": leg, "model": r["model"], "workload": r["workload"]}
        out.append(RunRecord(
            provenance="transcribed",
            source=Source(document=DOCUMENT, table=r["annotates (B200 headline)"],
                          note=f"{r['model']} {r['workload']} on {r['leg']} (published/quoted.tsv)"),
            study=STUDY, series="main", run_id="/".join(["main", leg, r["model"], r["workload"], "default", "r1"]),
            fingerprint=hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16],
            harness_version="hand-run", runner="ray", leg=leg, leg_label=r["leg"], pins=[], model=r["model"],
            tp=int(r["tp"]), workload=r["workload"], arm="default", arm_spec={}, engine_args={}, repeat=1,
            status="ok", metrics=Metrics(throughput_tok_s=float(r["figure"].replace(",", ""))),
            manifest={"vllm": leg.removeprefix("gpu-"), "device": DEVICE},
        ))
    return out


def printed() -> dict:
    ratios = []
    for r in rows():
        if r["kind"] not in ("ratio", "outcome"):
            continue
        old, new = r["leg"].split("→")
        entry = {"model": r["model"], "workload": r["workload"], "old": old, "new": new,
                 "where": f"annotation of \"{r['annotates (B200 headline)']}\" (published/quoted.tsv)"}
        if r["kind"] == "ratio":
            entry["ratio"] = float(r["figure"].rstrip("x"))
        else:
            entry["outcome"] = r["figure"]
        ratios.append(entry)
    return {"schema_version": 1, "source": DOCUMENT, "ratios": ratios}


def study_meta() -> dict:
    return {
        "name": STUDY,
        "title": "H200 companion figures, as the published B200 study quotes them",
        "provenance": "transcribed",
        "main_series": "main",
        "legs": [{"name": n, "label": lb} for lb, n in LEGS.items()],
        "model_order": list(dict.fromkeys(r["model"] for r in rows())),
        "description": ("The H200 (Hopper) counterparts the B200 study quotes beside its headlines: a few absolute "
                        "figures as run records, and ratios printed without their figures in printed.yaml. "
                        "Transcribed, not measured by this harness. Regenerate with "
                        "`python results/h200-reference/transcribe.py`."),
        "report": {"citation": {"source": DOCUMENT}},
    }


def main() -> int:
    (HERE / "study.yaml").write_text(yaml.safe_dump(study_meta(), sort_keys=False, width=100, allow_unicode=True),
                                     encoding="utf-8")
    (HERE / "printed.yaml").write_text(yaml.safe_dump(printed(), sort_keys=False, width=100, allow_unicode=True),
                                       encoding="utf-8")
    written = [write(r, HERE / "runs" / r.run_id) for r in records()]
    print(f"{len(written)} records, {len(printed()['ratios'])} printed ratios under {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
