"""What vLLM's throughput benchmark times and the harness does not: encoding a workload's prompts as
text with the leg's tokenizer (`harness check crosscheck --tokenization`), beside vLLM's own timed
region from the study's crosscheck records. No engine is started."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness import workloads
from harness.core.errors import UserError
from harness.measure import leg as legmod
from harness.measure.run import WORKER
from harness.measure.sweep import SweepArgs, plan
from harness.schema.run_files import read_tokenize_cost


TOKENIZE_COST = WORKER.parent / "tokenize_cost.py"


@dataclass(frozen=True)
class TokenizationCost:
    """`check crosscheck --tokenization`'s rows (tokenization_cost): measured, shown, written nowhere."""
    rows: list[dict]


def tokenization_cost(args: SweepArgs, *, crosscheck_rows: Callable[[Path], list[dict]],
                      repeats: int = 5) -> list[dict]:
    """Per (leg, model, throughput workload) of the plan: the seconds the leg's tokenizer takes to
    encode the workload's prompts as text, one by one, and that time as a share of vLLM's own timed
    region in the study's crosscheck records. It measures the one piece of work vLLM's benchmark
    times and the harness does not; no engine is started. `crosscheck_rows`: the study's crosscheck rows
    (harness.experiments.crosscheck reads them; passed in, as that module runs this one)."""
    import subprocess
    import tempfile

    sc, study_dir, planned = plan(dataclasses.replace(args, repeats=1))
    vllm_s = {(r["leg"], r["model"], r["workload"]): r for r in crosscheck_rows(study_dir)}
    out, seen = [], set()
    for p in planned:
        wl = p.spec.workload
        key = (p.spec.leg_env.leg.name, p.spec.model.name, wl.name)
        if not workloads.traits_of(wl.kind).vllm_throughput_bench or key in seen:
            continue
        seen.add(key)
        legmod.ensure(p.spec.leg_env)  # built if missing, as a sweep would
        with tempfile.TemporaryDirectory() as tmp:
            spec = {"model_path": p.spec.model_path, "tokenizer": p.spec.model.tokenizer, "seed": wl.seed,
                    "num_prompts": wl.work["num_prompts"], "input_len": wl.input_len, "repeats": repeats,
                    "vocab": _vocab(p.spec.model_path)}
            (Path(tmp) / "spec.json").write_text(json.dumps(spec))
            res = subprocess.run([str(p.spec.leg_env.python), str(TOKENIZE_COST), str(Path(tmp) / "spec.json"),
                                  str(Path(tmp) / "out.json")], env=p.spec.leg_env.environ(), capture_output=True,
                                 text=True, timeout=600)
            if res.returncode != 0:
                raise UserError(f"{p.spec.leg_env.leg.name}: tokenization probe failed: "
                                f"{(res.stderr.strip().splitlines() or ['no output'])[-1]}")
            got = read_tokenize_cost(Path(tmp) / "out.json")
            if got is None:
                raise UserError(f"{p.spec.leg_env.leg.name}: tokenization probe exited 0 without its answer "
                                f"(seconds, median_s, prompts, tokens)")
        # vLLM's timed region, from its recorded tok/s and the workload's tokens (its median run).
        total_tokens = wl.work["num_prompts"] * (wl.input_len + wl.output_len)
        rates = (vllm_s.get(key) or {}).get("vllm_tok_s", [])
        vllm_timed = statistics.median(total_tokens / v for v in rates if v) if rates else None
        out.append({"leg": key[0], "model": key[1], "workload": key[2], "tokenize_s": got.median_s,
                    "tokenize_s_all": got.seconds, "text_prompt_tokens": got.tokens,
                    "vllm_timed_s": vllm_timed, "share": got.median_s / vllm_timed if vllm_timed else None})
    return out


def _vocab(model_path: str) -> int:
    cfg = Path(model_path) / "config.json"
    try:
        return int(json.loads(cfg.read_text()).get("vocab_size", 32000))
    except (OSError, ValueError):
        return 32000


def tokenization_md(rows: list[dict]) -> str:
    lines = ["| leg | model | workload | encode text prompts (s, median) | vLLM benchmark timed region (s) | share |",
             "|---|---|---|---:|---:|---:|"]
    for r in rows:
        vt = "—" if r["vllm_timed_s"] is None else f"{r['vllm_timed_s']:.3f}"
        sh = "—" if r["share"] is None else f"{r['share']:.1%}"
        lines.append(f"| {r['leg']} | `{r['model']}` | {r['workload']} | {r['tokenize_s']:.3f} | {vt} | {sh} |")
    return "\n".join(lines) + "\n"
