"""What a serve workload sends, per modality: seeded token-id prompts for text (`/v1/completions`),
OpenAI chat requests with image content for images (`/v1/chat/completions`).

An image request is one user message: `images_per_prompt` parts of type `image_url`, each a PNG as a
base64 data URL, then one text part of `input_len` seeded words. The images are the seeded synthetic
images (or a folder's files) of harness.workloads.mm, encoded here, in the harness's own
environment, so every leg receives the same bytes; the record keeps their sha256.
"""

from __future__ import annotations

import base64
import hashlib
import io
import random
from dataclasses import dataclass, field
from typing import Any

from harness.schema.serve import ServeInputs
from harness.workloads import mm

# Plain words the tiny models' byte-level tokenizers take as they are; seeded picks make the text.
_WORDS = ("the", "a", "of", "image", "shows", "red", "green", "blue", "light", "dark", "left", "right", "top",
          "bottom", "small", "large", "square", "round", "line", "edge", "corner", "pattern", "noise", "colour",
          "describe", "what", "is", "in", "this", "picture", "and", "how", "many", "parts", "are", "there")
ENCODING = "PNG (Pillow, compress_level 6) as a base64 data URL in an image_url part"


def words(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def png(image: Any) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


@dataclass(kw_only=True)
class ImageSet:
    """Every image a run sends, in the order first built: their PNG hashes make the record's one hash."""
    hashes: list[str] = field(default_factory=list)
    nbytes: int = 0

    def add(self, data: bytes) -> str:
        self.hashes.append(hashlib.sha256(data).hexdigest())
        self.nbytes += len(data)
        return base64.b64encode(data).decode("ascii")

    def record(self) -> ServeInputs:
        return ServeInputs(modality="image", images=len(set(self.hashes)),
                           images_sha256=hashlib.sha256("".join(self.hashes).encode()).hexdigest(),
                           image_bytes=self.nbytes, encoding=ENCODING)


def image_requests(work: dict[str, Any], n: int, seed: int, images: ImageSet) -> list[dict[str, Any]]:
    """`n` chat requests with images, seeded by `seed`: identical on every leg."""
    k = work.get("images_per_prompt", 1)
    if work.get("source"):
        items, _ = mm.folder_images(work["source"], n * k, seed)
    else:
        items = mm.synthetic_images(n * k, work["width"], work["height"], seed)
    out = []
    for i in range(n):
        parts: list[dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + images.add(png(img))}}
            for img in items[i * k:(i + 1) * k]]
        parts.append({"type": "text", "text": words(work["input_len"], seed * 7919 + i)})
        out.append({"messages": [{"role": "user", "content": parts}]})
    return out
