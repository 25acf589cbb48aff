"""How long turning text prompts into token ids takes with a leg's tokenizer: the work vLLM's own
throughput benchmark leaves inside its timed region (its random dataset hands generate() text,
which generate() tokenizes), and the harness does not (it hands token ids).

Usage (by the harness, with the leg's Python): python tokenize_cost.py SPEC.json OUT.json
SPEC: {"model_path", "tokenizer", "num_prompts", "input_len", "seed", "vocab", "repeats"}
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path


def main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(spec.get("tokenizer") or spec["model_path"])
    rng = random.Random(spec["seed"])
    lo, hi = min(10, spec["vocab"] // 4), spec["vocab"] - 1
    ids = [[rng.randrange(lo, hi) for _ in range(spec["input_len"])] for _ in range(spec["num_prompts"])]
    texts = [tok.decode(x) for x in ids]
    times, tokens = [], 0
    for _ in range(spec["repeats"]):
        t0 = time.perf_counter()
        tokens = sum(len(tok(t).input_ids) for t in texts)  # one prompt at a time, as generate() does
        times.append(time.perf_counter() - t0)
    Path(out_path).write_text(json.dumps({"seconds": times, "median_s": statistics.median(times),
                                          "prompts": len(texts), "tokens": tokens}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
