"""Transcribe the published B200 study into run records: one `results.json` per published figure.

Reads the verbatim copies of the study's tables in `published/` beside this file and writes
`study.yaml` and `runs/<series>/<leg>/<model>/<workload>/<arm>/r<k>/results.json` under the output
folder (default: this folder). Every record is `provenance: transcribed` and names the table it
was read from; nothing here was measured by this harness.

The output depends only on the published files and the leg files, never on the clock: run ids and
fingerprints come from each record's key, so running this again changes nothing. Records this run
does not produce are removed from `runs/`, so a correction to a published file cannot leave a
stale record behind.

    python results/b200-reference/transcribe.py [--out DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the project root, when run as a plain script

from harness.measure.leg import LegSpec, load_leg  # noqa: E402
from harness.schema.record import Failure, Metrics, RunRecord, Source, Work, write  # noqa: E402

PUBLISHED = HERE / "published"
STUDY = "b200-reference"
DOCUMENT = "B200 study report (REPORT.md)"
LEGS = ("gpu-0.18.0", "gpu-0.26.0", "gpu-0.29.0")
# The study's runs were made by its own hand-run harness (bench_vllm.py), not by this package;
# the same value the v1 -> v2 migration gives that harness's records.
HARNESS_VERSION = "hand-run"
DEVICE = "8x NVIDIA B200"
MISSING = "—"
# How each series was run, as far as the report says: the main sweep and the repeats through its
# Ray harness; diag_silent4_018.sh "outside the harness"; the MoE-backend runs it does not say.
RUNNER = {"main": "ray", "rep235": "ray", "cutlass_falsification": "direct", "moe_backend": "unknown"}

# Section headings, as printed, of the tables each record is read from.
SECTION = {
    "throughput": "Full data / Throughput (tok/s, higher is better)",
    "latency": "Full data / Latency (ms/tok, lower is better)",
    "failures": "Failure attribution / Two root causes, not three",
    "falsification": "Failure attribution / The cutlass chain, end to end",
    "repeats": "Is the 0.26 regression on Qwen3-VL-235B-FP8 real? / Three repeats per leg: it holds",
    "moe": "Is the 0.26 regression on Qwen3-VL-235B-FP8 real? / The MoE kernel is not the explanation",
}

# Group A's model types, as "Group A: only one of the two is genuinely unsupported" names them;
# the failure-attribution table prints both in one cell.
MODEL_TYPE = {"GLM-5.2-NVFP4": "glm_moe_dsa", "gemma-4-26B-A4B-it": "gemma4"}

# "Ruled out so far": the work of the 235B runs on both legs compared there.
WORK_235B = {"text-only": Work(num_seqs=1000, output_tokens=417_061),
             "image": Work(num_seqs=1000, output_tokens=512_000),
             "video": Work(num_seqs=1000, output_tokens=512_000)}
MODEL_235B = "Qwen3-VL-235B-A22B-Instruct-FP8"

# The falsification matrix's columns are short names; the models are the main table's.
MATRIX_MODELS = {"whisper": "whisper-large-v3", "Qwen2-VL": "Qwen2-VL-7B-Instruct",
                 "Qwen3-VL-8B": "Qwen3-VL-8B-Instruct", "Omni": "Qwen2.5-Omni-7B"}
# The matrix does not say which workload diag_silent4_018.sh ran (the failure is at engine start);
# these are the workloads scenarios/b200-cutlass-falsification.yaml gives the same models.
MATRIX_WORKLOAD = {"whisper": "single-utterance"}
MATRIX_DEFAULT_WORKLOAD = "single-image"


@dataclass(frozen=True)
class ArmDef:
    """One published row of an arms table, as the arm this harness would run for it."""

    leg: str
    name: str
    engine_args: dict[str, Any]
    env: dict[str, str]
    pins: list[str]

    def spec(self, printed: str) -> dict[str, Any]:
        # The shape of scenario.Arm.model_dump(), with the printed row label as the description.
        return {"name": self.name, "description": printed, "engine_args": self.engine_args,
                "env": self.env, "pins": self.pins}


FALSIFICATION_ARMS = {
    "baseline (cutlass 4.8.0)": ArmDef("gpu-0.18.0", "baseline", {}, {}, []),
    "`--enforce-eager`": ArmDef("gpu-0.18.0", "enforce-eager", {"enforce_eager": True}, {}, []),
    "`VLLM_ATTENTION_BACKEND=TRITON_ATTN`": ArmDef(
        "gpu-0.18.0", "triton-attn", {}, {"VLLM_ATTENTION_BACKEND": "TRITON_ATTN"}, []),
    "`--gpu-memory-utilization 0.5`": ArmDef(
        "gpu-0.18.0", "gpu-mem-0.5", {"gpu_memory_utilization": 0.5}, {}, []),
    "cutlass-dsl 4.5.3": ArmDef("gpu-0.18.0", "cutlass-dsl-4.5.3", {}, {}, ["nvidia-cutlass-dsl==4.5.3"]),
    "0.26 control": ArmDef("gpu-0.26.0", "control-0.26", {}, {}, []),
}


def _moe_arm(leg: str, backend: str) -> ArmDef:
    return ArmDef(leg, backend, {"moe_backend": backend}, {}, [])


MOE_ARMS = {
    "0.18 auto": _moe_arm("gpu-0.18.0", "auto"),
    "0.26 auto (resolves to trtllm)": _moe_arm("gpu-0.26.0", "auto"),
    "0.26 `flashinfer_trtllm`": _moe_arm("gpu-0.26.0", "flashinfer_trtllm"),
    "0.26 `triton`": _moe_arm("gpu-0.26.0", "triton"),
    "0.26 `flashinfer_cutlass`": _moe_arm("gpu-0.26.0", "flashinfer_cutlass"),
    "0.26 `cutlass`": _moe_arm("gpu-0.26.0", "cutlass"),
}


# --- reading the published files -------------------------------------------------------------

def rows(name: str) -> tuple[list[str], list[list[str]]]:
    """A published table as printed: its header and its rows of cells."""
    lines = (PUBLISHED / name).read_text(encoding="utf-8").splitlines()
    table = [line.split("\t") for line in lines]
    for i, r in enumerate(table):
        if len(r) != len(table[0]):
            raise ValueError(f"{name} line {i + 1}: {len(r)} cells, header has {len(table[0])}")
    return table[0], table[1:]


def plain(cell: str) -> str:
    """The cell without the report's code markup."""
    return cell.replace("`", "").strip()


def number(cell: str) -> float:
    return float(cell.replace(",", ""))


def project(req: str) -> str:
    return re.split(r"[<>=!~ ]", req, maxsplit=1)[0].lower().replace("_", "-")


def pinned_version(req: str) -> str:
    return req.split("==", 1)[1]


# --- runtime stacks ----------------------------------------------------------------------------

MANIFEST_KEY = {"nvidia-cutlass-dsl": "nvidia_cutlass_dsl", "transformers": "transformers"}


def runtime_stacks(legs: dict[str, LegSpec]) -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """Per leg: (the stack most models ran under, the versions its pinned models ran under).

    A cell "4.8.0 → 4.5.3 (6 models)" is the leg's resolved version, then the pinned one; which
    models were pinned is the leg file's `model_pins`, checked here against the printed version.
    """
    header, body = rows("runtime-stack.tsv")
    by_label = {spec.label: name for name, spec in legs.items()}
    stacks: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
    for row in body:
        cells = dict(zip(header, row))
        leg = by_label[cells["leg"]]
        base = {"vllm": cells["vllm"], "torch": cells["torch"], "torch_cuda": cells["CUDA"]}
        pinned: dict[str, str] = {}
        for column, key in (("transformers", "transformers"), ("nvidia-cutlass-dsl", "nvidia_cutlass_dsl")):
            value = cells[column]
            if value == "not recorded":
                continue  # leave the key absent rather than guess
            resolved, _, rest = value.partition(" → ")
            base[key] = resolved
            if rest:
                pinned[key] = rest.split(" (", 1)[0]
        pins = {(MANIFEST_KEY[project(p)], pinned_version(p))
                for ps in legs[leg].model_pins.values() for p in ps}
        if set(pinned.items()) != pins:
            raise ValueError(f"runtime-stack.tsv: {leg} prints pinned {sorted(pinned.items())}, "
                             f"its leg file pins {sorted(pins)}")
        stacks[leg] = (base, pinned)
    return stacks


def manifest(stack: dict[str, str], pins: list[str], extra: dict[str, str] | None = None) -> dict[str, str]:
    m = dict(stack)
    for pin in pins:
        m[MANIFEST_KEY[project(pin)]] = pinned_version(pin)
    return m | {"device": DEVICE} | (extra or {})


# --- records -----------------------------------------------------------------------------------

@dataclass
class Transcriber:
    legs: dict[str, LegSpec]
    stacks: dict[str, tuple[dict[str, str], dict[str, str]]]
    records: list[RunRecord]

    def add(self, *, series: str, leg: str, model: str, tp: int, workload: str, table: str, note: str,
            status: str, arm: ArmDef | None = None, arm_label: str = "", repeat: int = 1,
            metrics: Metrics | None = None, work: Work | None = None, failure: Failure | None = None,
            extra_manifest: dict[str, str] | None = None) -> None:
        arm_name = arm.name if arm else "default"
        key = {"study": STUDY, "series": series, "leg": leg, "model": model, "workload": workload,
               "arm": arm_name, "repeat": repeat}
        for part in (model, workload, arm_name):
            if not re.fullmatch(r"[A-Za-z0-9._-]+", part):
                raise ValueError(f"{part!r} is not safe as a path component")
        pins = list(self.legs[leg].model_pins.get(model, [])) + (arm.pins if arm else [])
        self.records.append(RunRecord(
            provenance="transcribed", source=Source(document=DOCUMENT, table=table, note=note),
            study=STUDY, series=series,
            run_id="/".join([series, leg, model, workload, arm_name, f"r{repeat}"]),
            fingerprint=hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16],
            harness_version=HARNESS_VERSION, runner=RUNNER[series], leg=leg, leg_label=self.legs[leg].label,
            pins=pins, model=model, tp=tp, workload=workload,
            arm=arm_name, arm_spec=arm.spec(arm_label) if arm else {},
            engine_args=dict(arm.engine_args) if arm else {}, repeat=repeat, status=status,
            metrics=metrics or Metrics(), work=work or Work(),
            manifest=manifest(self.stacks[leg][0], pins, extra_manifest), failure=failure,
        ))


def main_tables(t: Transcriber) -> dict[str, int]:
    """Throughput and latency tables; a "—" on 0.18 is a failed run, transcribed from
    "Failure attribution", one per workload the model has."""
    _, coverage = rows("coverage.tsv")
    failing = [plain(name) for name in coverage[0][2].split(",")]
    _, attribution = rows("failure-attribution.tsv")
    group_a = attribution[0][2]
    tps: dict[str, int] = {}
    for kind, file, metric in (("throughput", "throughput.tsv", "throughput_tok_s"),
                               ("latency", "latency.tsv", "ms_per_token")):
        header, body = rows(file)
        for row in body:
            model, tp, workload = plain(row[0]), int(row[1]), row[2]
            tps[model] = tp
            for label, cell in zip(header[3:6], row[3:6]):
                leg = next(n for n, s in t.legs.items() if s.label == label)
                where = f"row {model} / {workload}, column {label} (published/{file})"
                work = WORK_235B.get(workload) if (model == MODEL_235B and kind == "throughput"
                                                   and leg != "gpu-0.29.0") else None
                if cell != MISSING:
                    t.add(series="main", leg=leg, model=model, tp=tp, workload=workload,
                          table=SECTION[kind], note=where, status="ok",
                          metrics=Metrics(**{metric: number(cell)}), work=work)
                    continue
                if not any(model.startswith(f) for f in failing) or model not in MODEL_TYPE:
                    raise ValueError(f"{file}: {where} is missing but Coverage does not list it failing")
                if f"`{MODEL_TYPE[model]}`" not in group_a:
                    raise ValueError(f"failure-attribution.tsv: no model type {MODEL_TYPE[model]!r}")
                reason = re.sub(r"`[^`]+` / `[^`]+`", MODEL_TYPE[model], group_a)
                t.add(series="main", leg=leg, model=model, tp=tp, workload=workload,
                      table=SECTION["failures"], status="failed",
                      note=(f"root cause A; {where} prints {MISSING} and Coverage lists the model as "
                            f"failing. The report prints a description, not the exception's own line, "
                            f"and no exit status."),
                      failure=Failure(reason=plain(reason)))
    return tps


def repeats(t: Transcriber, tps: dict[str, int]) -> None:
    header, body = rows("repeat-235b.tsv")
    for row in body:
        workload = row[0]
        for label, column in (("0.18", 1), ("0.26", 3)):
            if header[column] != f"{label} (3 reps)":
                raise ValueError(f"repeat-235b.tsv: unexpected column {header[column]!r}")
            leg = next(n for n, s in t.legs.items() if s.label == label)
            for k, cell in enumerate(row[column].split(" / "), start=1):
                t.add(series="rep235", leg=leg, model=MODEL_235B, tp=tps[MODEL_235B], workload=workload,
                      repeat=k, table=SECTION["repeats"], status="ok",
                      note=(f"row {workload}, column {header[column]}, figure {k} of 3 "
                            f"(published/repeat-235b.tsv); repeats numbered in printed order"),
                      metrics=Metrics(throughput_tok_s=number(cell)), work=WORK_235B[workload])


def moe_backends(t: Transcriber, tps: dict[str, int]) -> None:
    _, body = rows("moe-arms.tsv")
    refusal_text = (PUBLISHED / "moe-refusal.txt").read_text(encoding="utf-8")
    found = re.search(r"— (does not support quantization scheme [^ ]+) —", refusal_text)
    if not found:
        raise ValueError("moe-refusal.txt: no refusal reason")
    for row in body:
        label, value, prepare, split = row
        arm = MOE_ARMS[label]
        where = f"row {label} (published/moe-arms.tsv)"
        if value == "refused":
            t.add(series="moe_backend", leg=arm.leg, model=MODEL_235B, tp=tps[MODEL_235B], workload="image",
                  arm=arm, arm_label=label, table=SECTION["moe"], status="failed",
                  note=f"{where}; the reason as the report words it (published/moe-refusal.txt), "
                       f"no exit status printed",
                  failure=Failure(reason=found.group(1)))
            continue
        t.add(series="moe_backend", leg=arm.leg, model=MODEL_235B, tp=tps[MODEL_235B], workload="image",
              arm=arm, arm_label=label, table=SECTION["moe"], status="ok", note=where,
              metrics=Metrics(throughput_tok_s=number(value)),
              extra_manifest={"moe_prepare_finalize": prepare, "moe_sm_split": split})


def falsification(t: Transcriber, tps: dict[str, int]) -> None:
    header, body = rows("cutlass-falsification.tsv")
    exceptions = (PUBLISHED / "diag-traceback.txt").read_text(encoding="utf-8").splitlines()
    for row in body:
        arm = FALSIFICATION_ARMS[row[0]]
        for column, cell in zip(header[1:], row[1:]):
            where = f"row {row[0]}, column {column} (published/cutlass-falsification.tsv)"
            common = dict(series="cutlass_falsification", leg=arm.leg, model=column,
                          tp=tps[MATRIX_MODELS[column]],
                          workload=MATRIX_WORKLOAD.get(column, MATRIX_DEFAULT_WORKLOAD), arm=arm,
                          arm_label=row[0], table=SECTION["falsification"])
            # The matrix records only exit status, and names no workload.
            unnamed = "; the workload is the falsification scenario's, the matrix names none"
            if cell == "rc=0":
                t.add(**common, status="ok", note=f"{where}: rc=0, no figures recorded{unnamed}")
            elif cell == "rc=1":
                t.add(**common, status="failed",
                      note=(f"{where}: rc=1; the exceptions are those diag_silent4_018.sh surfaced "
                            f"(published/diag-traceback.txt){unnamed}"),
                      failure=Failure(exit_code=1, reason=exceptions[0], exceptions=exceptions))
            else:
                raise ValueError(f"cutlass-falsification.tsv: {where}: unexpected cell {cell!r}")


def transcribe(legs: dict[str, LegSpec]) -> list[RunRecord]:
    t = Transcriber(legs=legs, stacks=runtime_stacks(legs), records=[])
    tps = main_tables(t)
    repeats(t, tps)
    moe_backends(t, tps)
    falsification(t, tps)
    ids = [r.run_id for r in t.records]
    if len(set(ids)) != len(ids):
        raise ValueError("two published figures map to the same run")
    return t.records


def printed_order() -> tuple[list[str], list[str]]:
    """The main tables' row order: models as first printed, and one workload order that agrees
    with every model's printed order (throughput table first, then latency)."""
    models: list[str] = []
    sequences: list[list[str]] = []
    for file in ("throughput.tsv", "latency.tsv"):
        by_model: dict[str, list[str]] = {}
        for row in rows(file)[1]:
            by_model.setdefault(plain(row[0]), []).append(row[2])
        models += [m for m in by_model if m not in models]
        sequences += list(by_model.values())
    first = list(dict.fromkeys(w for seq in sequences for w in seq))
    after = {w: set() for w in first}
    for seq in sequences:
        for a, b in zip(seq, seq[1:]):
            after[b].add(a)
    order: list[str] = []
    while len(order) < len(first):
        ready = [w for w in first if w not in order and after[w] <= set(order)]
        if not ready:
            raise ValueError("the published tables order their workloads inconsistently")
        order.append(ready[0])
    return models, order


def study_meta(legs: dict[str, LegSpec]) -> dict[str, Any]:
    models, workloads = printed_order()
    return {
        "name": STUDY,
        "title": "vLLM 0.18 / 0.26 / 0.29 on 8x B200: the published study",
        "provenance": "transcribed",
        "main_series": "main",
        "legs": [{"name": name, "label": spec.label} for name, spec in legs.items()],
        # No sweep of this harness ran these, so the tables' row order is given here.
        "model_order": models,
        "workload_order": workloads,
        "description": (
            "These figures are transcribed from the published B200 study report (REPORT.md), not "
            "measured by this harness: one record per printed figure, copied exactly, from the "
            "verbatim tables in published/. Failed runs are the ones the report prints as failing; "
            "the cutlass falsification runs carry exit status only. Regenerate with "
            "`python results/b200-reference/transcribe.py`."),
    }


def _authored_report_block() -> str:
    """The shipped study.yaml's `report:` block (with the comments above it), verbatim: it is written
    for this study by hand, not transcribed, so regeneration keeps it as it stands."""
    path = HERE / "study.yaml"
    if not path.exists():
        return ""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith("report:")), None)
    if start is None:
        return ""
    while start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    return "".join(lines[start:])


def write_all(out: Path) -> list[Path]:
    legs = {name: load_leg(name) for name in LEGS}
    records = transcribe(legs)
    out.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(study_meta(legs), sort_keys=False, width=100)
    (out / "study.yaml").write_text(text + _authored_report_block(), encoding="utf-8")
    runs = out / "runs"
    written = [write(r, runs / r.run_id) for r in records]
    keep = set(written)
    for stale in runs.rglob("results.json"):
        if stale not in keep:
            stale.unlink()
    for d in sorted((p for p in runs.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=HERE, help="where study.yaml and runs/ go (default: here)")
    args = p.parse_args(argv)
    written = write_all(args.out)
    print(f"{len(written)} records under {args.out / 'runs'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
