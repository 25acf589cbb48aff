"""Audio inputs: synthetic (seeded noise of a given duration and sample rate) or the wav/flac clips of a
local folder (e.g. a LibriSpeech test.clean copy), each clamped to `max_audio_s` with the clamped ones
counted; `clips_per_prompt` per prompt. A Whisper-style encoder-decoder model gets the clip as its
encoder prompt; a decoder-only audio model its chat template's placeholder (harness.workloads.mm)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.workloads import limits, mm
from harness.workloads.base import NotComparable

NAME = "audio"
SUPPORTED = True


@dataclass(frozen=True, kw_only=True)
class Params:
    clips_per_prompt: int = 1
    duration_s: float = 10.0    # synthetic clips only
    sample_rate: int = 16000
    source: str | None = None   # a folder of wav/flac files (${VAR} expanded on the measuring node)
    max_audio_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("clips_per_prompt", "duration_s", "sample_rate"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: should be greater than 0")
        if self.max_audio_s is not None and not self.max_audio_s > 0:
            raise ValueError("max_audio_s: should be greater than 0")
        limits.at_most("clips_per_prompt", self.clips_per_prompt, limits.MAX_ITEMS_PER_PROMPT, "clips")
        limits.at_most("duration_s", self.duration_s, limits.MAX_AUDIO_S, "s (an hour)")
        limits.at_most("sample_rate", self.sample_rate, limits.MAX_SAMPLE_RATE, "Hz")
        if self.max_audio_s is not None:
            limits.at_most("max_audio_s", self.max_audio_s, limits.MAX_AUDIO_S, "s (an hour)")


def build(n: int, seed: int, work: dict[str, Any], ctx: dict[str, Any]) -> list[dict[str, Any]]:
    k = work["clips_per_prompt"]
    meta: dict[int, dict[str, Any]] = {}
    cap = work.get("max_audio_s")
    if work.get("source"):
        items, files, cut = mm.folder_audio(work["source"], n * k, seed, cap)
        # Clamped clips are counted per prompt, so a latency batch's count is its own.
        meta = {i: {"files": files[i * k:(i + 1) * k], "clamped": sum(cut[i * k:(i + 1) * k])} for i in range(n)}
    else:
        duration = min(work["duration_s"], cap) if cap is not None else work["duration_s"]
        items = mm.synthetic_audio(n * k, duration, work["sample_rate"], seed)
    return mm.make_prompts(NAME, items, k, work["input_len"], seed, meta, ctx)


def describe(prompts: list[dict[str, Any]], ctx: dict[str, Any]) -> dict[str, Any]:
    return mm.describe(NAME, prompts, ctx, "clips")


def vllm_dataset(work: dict[str, Any], path: str) -> list[str]:
    """Refused: vLLM's throughput benchmark has no synthetic audio (random-mm draws images and videos
    only); its audio datasets (custom_audio from 0.27, the ASR sets) read recorded clips from files,
    each with a text prompt of its own, which is other work than these seeded clips under a decoder
    prompt of `input_len` tokens."""
    raise NotComparable("audio: vLLM's throughput benchmark has no synthetic audio dataset (random-mm draws "
                        "images and videos only) and its file-based audio datasets use prompts of their own")
