"""What vLLM's multimodal benchmark pays that the harness does not: its inputs travel as base64 data
URLs (JPEG images, MP4 videos) that its chat path decodes inside the timed region, where the harness
hands the engine in-memory arrays. That cost cannot be aligned between the two, so it is measured on
its own, in the leg's venv, with vLLM's own code: the dataset's item generator makes the same kind of
items (RandomMultiModalDataset.generate_mm_item, same size and frames) and vLLM's media loader
(vllm.multimodal.utils.fetch_image / fetch_video, what the chat path calls) decodes them, one at a time.
Runs after the benchmark, with its engine gone, so it times the decoding alone on an idle process.

Usage: by vllm_bench.py, `measure(workload, dataset_args)`.
"""

from __future__ import annotations

import ast
import statistics
import time
from typing import Any

# Items decoded per measurement (at most): enough for a stable median on a busy host, cheap beside a run.
MAX_ITEMS = 32


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def measure(wl: dict[str, Any], dataset_args: list[str]) -> dict[str, Any]:
    """Seconds per item to decode one of vLLM's data URLs, the items per request, and so the seconds
    per request the vLLM side spends on transport the harness side does not."""
    from vllm.benchmarks.datasets import RandomMultiModalDataset
    from vllm.multimodal import utils

    bucket = ast.literal_eval(_arg(dataset_args, "--random-mm-bucket-config"))
    (h, w, frames), = bucket.keys()
    per_request = int(_arg(dataset_args, "--random-mm-base-items-per-request"))
    gen = RandomMultiModalDataset(random_seed=wl["seed"] + 7)
    n = min(MAX_ITEMS, wl["num_prompts"] * per_request)
    items = [gen.generate_mm_item((h, w, frames)) for _ in range(n)]
    urls = [next(v["url"] for k, v in it.items() if isinstance(v, dict) and "url" in v) for it in items]
    fetch = utils.fetch_image if frames == 1 else utils.fetch_video
    seconds: list[float] = []
    decoded_frames: list[int] = []
    for url in urls:
        t0 = time.perf_counter()
        out = fetch(url)
        seconds.append(time.perf_counter() - t0)
        if frames > 1:
            arr = out[0] if isinstance(out, tuple) else getattr(out, "media", out)[0]
            decoded_frames.append(int(len(arr)))
    per_item = statistics.median(seconds)
    res: dict[str, Any] = {
        "what": f"{'JPEG image' if frames == 1 else 'MP4 video'} data URL decoded by vLLM's "
                f"{fetch.__module__}.{fetch.__name__}",
        "items_timed": n, "url_bytes_median": int(statistics.median(len(u) for u in urls)),
        "s_per_item_median": per_item, "s_per_item": seconds,
        "items_per_request": per_request, "s_per_request": per_item * per_request,
    }
    if decoded_frames:
        res["frames_asked"] = frames
        res["frames_decoded"] = sorted(set(decoded_frames))
    return res
