"""Image inputs: synthetic (seeded random pixels of a given size) or the image files of a local folder,
`images_per_prompt` per prompt, in the model's own prompt format (harness.workloads.mm)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.workloads import limits, mm
from harness.workloads.base import NotComparable

NAME = "image"
SUPPORTED = True


@dataclass(frozen=True, kw_only=True)
class Params:
    images_per_prompt: int = 1
    width: int = 224            # synthetic images only
    height: int = 224
    source: str | None = None   # a folder of image files (${VAR} expanded on the measuring node)

    def __post_init__(self) -> None:
        for name in ("images_per_prompt", "width", "height"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: should be greater than 0")
        limits.at_most("images_per_prompt", self.images_per_prompt, limits.MAX_ITEMS_PER_PROMPT, "images")
        limits.side("width", self.width)
        limits.side("height", self.height)


def preflight(work: dict[str, Any], ctx: dict[str, Any]) -> None:
    mm.require_torchvision(NAME)


def build(n: int, seed: int, work: dict[str, Any], ctx: dict[str, Any]) -> list[dict[str, Any]]:
    k = work["images_per_prompt"]
    meta: dict[int, dict[str, Any]] = {}
    if work.get("source"):
        items, files = mm.folder_images(work["source"], n * k, seed)
        meta = {i: {"files": files[i * k:(i + 1) * k]} for i in range(n)}
    else:
        items = mm.synthetic_images(n * k, work["width"], work["height"], seed)
    return mm.make_prompts(NAME, items, k, work["input_len"], seed, meta, ctx)


def describe(prompts: list[dict[str, Any]], ctx: dict[str, Any]) -> dict[str, Any]:
    return mm.describe(NAME, prompts, ctx, "images")


def vllm_dataset(work: dict[str, Any], path: str) -> list[str]:
    """vLLM's `random-mm` with the workload's image size, count and lengths (mm.random_mm_args)."""
    try:
        return mm.random_mm_args(work, path, NAME, work["images_per_prompt"], 1)
    except ValueError as e:
        raise NotComparable(str(e)) from None
