"""Video inputs: synthetic (seeded random frames: a frame count and size) or a local folder of videos
(each a folder of frame images, or a video file where OpenCV is installed), `videos_per_prompt` per
prompt, in the model's own prompt format (harness.workloads.mm)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.workloads import limits, mm
from harness.workloads.base import NotComparable

NAME = "video"
SUPPORTED = True


@dataclass(frozen=True, kw_only=True)
class Params:
    videos_per_prompt: int = 1
    num_frames: int = 8         # synthetic: frames per video; a folder's videos: at most this many
    width: int = 224            # synthetic videos only
    height: int = 224
    source: str | None = None

    def __post_init__(self) -> None:
        for name in ("videos_per_prompt", "num_frames", "width", "height"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: should be greater than 0")
        limits.at_most("videos_per_prompt", self.videos_per_prompt, limits.MAX_ITEMS_PER_PROMPT, "videos")
        limits.at_most("num_frames", self.num_frames, limits.MAX_FRAMES, "frames")
        limits.side("width", self.width)
        limits.side("height", self.height)
        if self.source is None:
            limits.item_bytes("num_frames", self.num_frames, self.width, self.height)


def preflight(work: dict[str, Any], ctx: dict[str, Any]) -> None:
    mm.require_torchvision(NAME)


def build(n: int, seed: int, work: dict[str, Any], ctx: dict[str, Any]) -> list[dict[str, Any]]:
    k = work["videos_per_prompt"]
    meta: dict[int, dict[str, Any]] = {}
    if work.get("source"):
        items, files = mm.folder_videos(work["source"], n * k, seed, work["num_frames"])
        meta = {i: {"files": files[i * k:(i + 1) * k]} for i in range(n)}
    else:
        items = mm.synthetic_videos(n * k, work["num_frames"], work["width"], work["height"], seed)
    return mm.make_prompts(NAME, items, k, work["input_len"], seed, meta, ctx)


def describe(prompts: list[dict[str, Any]], ctx: dict[str, Any]) -> dict[str, Any]:
    return mm.describe(NAME, prompts, ctx, "videos")


def vllm_dataset(work: dict[str, Any], path: str) -> list[str]:
    """vLLM's `random-mm` with the workload's video size, frames, count and lengths (mm.random_mm_args)."""
    try:
        return mm.random_mm_args(work, path, NAME, work["videos_per_prompt"], work["num_frames"])
    except ValueError as e:
        raise NotComparable(str(e)) from None
