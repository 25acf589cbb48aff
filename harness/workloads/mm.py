"""Multimodal inputs and prompts, shared by the image, video and audio modalities.

Standard library only at import time (the harness imports this module to validate scenarios); the
builders import numpy, PIL, jinja2 and tokenizers when called, inside the leg's venv, where vLLM
brings them.

Inputs are identical on every leg: synthetic ones are drawn from numpy's seeded generator (random
pixels and samples, as vLLM's own random multimodal dataset draws them), folder ones are read in
sorted order. Every input is hashed over its decoded pixels or samples (dtype, shape and bytes), so
the record proves that two legs were handed the same work, not just the same file names.

Prompts come from the model directory, never from a table of families: the chat template (the
processor's or the tokenizer's) is rendered with one content item per input and a marker where the
text goes, the text part is `input_len` seeded random token ids spliced in at the marker. A model
without a chat template gets its placeholder token (config.json's `<modality>_token_id` /
`_token_index`) once per input. An encoder-decoder model (Whisper-style) gets the audio as its
encoder prompt and, as decoder prompt, its generation config's task prefix (decoder start, language,
task, no-timestamps) followed by random ids up to `input_len`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from pathlib import Path
from typing import Any

IMAGE_EXT = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".gif", ".tif", ".tiff")
AUDIO_EXT = (".wav", ".flac")
VIDEO_EXT = (".mp4", ".avi", ".mkv", ".mov", ".webm")
_MARK = "\u2063HARNESS-TEXT\u2063"
_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


class InputError(RuntimeError):
    """An input or a prompt this model or leg cannot have: one line, the run fails with it."""


# --- hashing ----------------------------------------------------------------------------------------

def array_sha256(a: Any) -> str:
    import numpy as np

    a = np.ascontiguousarray(a)
    h = hashlib.sha256(f"{a.dtype.str}{list(a.shape)}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def item_array(item: Any) -> Any:
    """The pixels or samples of one input as a numpy array (PIL image, array, or (samples, rate))."""
    import numpy as np

    if isinstance(item, tuple):
        return np.asarray(item[0])
    return np.asarray(item)


def inputs_digest(items: list[Any]) -> dict[str, Any]:
    """One hash per input (16 hex digits each) and one over all of them, in order."""
    full = [array_sha256(item_array(x)) for x in items]
    return {"inputs_sha256": hashlib.sha256("".join(full).encode()).hexdigest(),
            "input_hashes": [h[:16] for h in full], "distinct_inputs": len(set(full))}


# --- synthetic inputs -------------------------------------------------------------------------------

def synthetic_images(n: int, width: int, height: int, seed: int) -> list[Any]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), "RGB") for _ in range(n)]


def synthetic_videos(n: int, frames: int, width: int, height: int, seed: int) -> list[Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (frames, height, width, 3), dtype=np.uint8) for _ in range(n)]


def synthetic_audio(n: int, duration_s: float, sample_rate: int, seed: int) -> list[tuple[Any, int]]:
    import numpy as np

    rng = np.random.default_rng(seed)
    length = int(round(duration_s * sample_rate))
    return [(np.clip(rng.standard_normal(length) * 0.1, -1, 1).astype(np.float32), sample_rate) for _ in range(n)]


# --- inputs from a local folder ---------------------------------------------------------------------

def expand_source(source: str) -> Path:
    path = Path(os.path.expanduser(_VAR.sub(lambda m: os.environ.get(m.group(1)) or (m.group(2) or ""), source)))
    if not path.is_dir():
        raise InputError(f"input folder {source!r} ({path}) does not exist or is not a folder")
    return path


def _files(root: Path, ext: tuple[str, ...]) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in ext)


def _pick(entries: list[Any], n: int, seed: int, what: str, root: Path) -> list[Any]:
    # Consecutive entries from `seed` on, wrapping around: seed 0 and n = len(entries) is the whole
    # folder once (LibriSpeech test.clean: 2,620 clips); a latency batch i starts at entry seed + i.
    if not entries:
        raise InputError(f"input folder {root} has no {what}")
    return [entries[(seed + j) % len(entries)] for j in range(n)]


def folder_images(source: str, n: int, seed: int) -> tuple[list[Any], list[str]]:
    from PIL import Image

    root = expand_source(source)
    picked = _pick(_files(root, IMAGE_EXT), n, seed, "image files (" + ", ".join(IMAGE_EXT) + ")", root)
    out = []
    for p in picked:
        with Image.open(p) as im:
            out.append(im.convert("RGB"))
    return out, [str(p.relative_to(root)) for p in picked]


def _video_entries(root: Path) -> list[Path]:
    dirs = sorted(d for d in root.iterdir() if d.is_dir() and _files(d, IMAGE_EXT))
    return dirs + _files(root, VIDEO_EXT)


def load_video(path: Path, max_frames: int | None) -> Any:
    import numpy as np

    if path.is_dir():
        from PIL import Image

        frames = []
        for f in _files(path, IMAGE_EXT)[:max_frames]:
            with Image.open(f) as im:
                frames.append(np.asarray(im.convert("RGB")))
        return np.stack(frames)
    try:
        import cv2
    except ImportError:
        raise InputError(f"{path}: decoding video files needs OpenCV (cv2), which this leg lacks; "
                         "give videos as folders of frames") from None
    cap = cv2.VideoCapture(str(path))
    frames = []
    while max_frames is None or len(frames) < max_frames:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    cap.release()
    if not frames:
        raise InputError(f"{path}: no frames could be decoded")
    return np.stack(frames)


def folder_videos(source: str, n: int, seed: int, max_frames: int | None) -> tuple[list[Any], list[str]]:
    root = expand_source(source)
    picked = _pick(_video_entries(root), n, seed, "videos (frame folders or video files)", root)
    return [load_video(p, max_frames) for p in picked], [str(p.relative_to(root)) for p in picked]


def read_wav(path: Path) -> tuple[Any, int]:
    """PCM wav (8/16/24/32-bit) as mono float32 in [-1, 1]: the standard library's wave module."""
    import wave

    import numpy as np

    with wave.open(str(path), "rb") as w:
        ch, width, rate, frames = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
        raw = w.readframes(frames)
    if width == 1:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128) / 128
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3)
        v = (b[:, 0].astype(np.int32) | (b[:, 1].astype(np.int32) << 8) | (b[:, 2].astype(np.int32) << 16))
        x = (np.where(v & 0x800000, v - (1 << 24), v) / float(1 << 23)).astype(np.float32)
    else:
        dt = {2: np.int16, 4: np.int32}[width]
        x = np.frombuffer(raw, dt).astype(np.float32) / float(np.iinfo(dt).max + 1)
    if ch > 1:
        x = x.reshape(-1, ch).mean(axis=1)
    return x.astype(np.float32), rate


def read_audio(path: Path) -> tuple[Any, int]:
    if path.suffix.lower() == ".wav":
        return read_wav(path)
    try:
        import soundfile
    except ImportError:
        raise InputError(f"{path}: reading {path.suffix} needs the soundfile package, which this leg lacks "
                         "(wav needs nothing)") from None
    data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    return data.mean(axis=1).astype("float32"), int(rate)


def folder_audio(source: str, n: int, seed: int,
                 max_audio_s: float | None) -> tuple[list[Any], list[str], list[bool]]:
    """Clips from a folder (wav, flac), each clamped to `max_audio_s`; and which ones were clamped."""
    root = expand_source(source)
    picked = _pick(_files(root, AUDIO_EXT), n, seed, "audio files (wav, flac)", root)
    cache: dict[Path, tuple[Any, int]] = {}
    out, clamped = [], []
    for p in picked:
        if p not in cache:
            cache[p] = read_audio(p)
        x, rate = cache[p]
        cut = max_audio_s is not None and len(x) > int(max_audio_s * rate)
        out.append((x[: int(max_audio_s * rate)] if cut else x, rate))
        clamped.append(cut)
    return out, [str(p.relative_to(root)) for p in picked], clamped


# --- the model's own prompt format ------------------------------------------------------------------

def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def model_info(model_path: str, ctx: dict[str, Any]) -> dict[str, Any]:
    """What the prompt builders need from the model directory, read once per run (kept in ctx)."""
    if "mm_model" in ctx:
        return ctx["mm_model"]
    d = Path(model_path)
    cfg, gen, tok_cfg = _json(d / "config.json"), _json(d / "generation_config.json"), _json(d / "tokenizer_config.json")
    template, template_source = None, None
    for name, get in (("chat_template.jinja", lambda p: p.read_text(encoding="utf-8") if p.exists() else None),
                      ("chat_template.json", lambda p: _json(p).get("chat_template")),
                      ("processor_config.json", lambda p: _json(p).get("chat_template")),
                      ("tokenizer_config.json", lambda p: tok_cfg.get("chat_template"))):
        t = get(d / name)
        if isinstance(t, list):  # named templates: the default one
            t = next((x.get("template") for x in t if x.get("name") == "default"), None)
        if isinstance(t, str) and t:
            template, template_source = t, name
            break
    tj = _json(d / "tokenizer.json")
    added = {int(a["id"]): a["content"] for a in tj.get("added_tokens") or [] if "id" in a}
    info = {"config": cfg, "generation_config": gen, "chat_template": template,
            "chat_template_source": template_source, "added_tokens": added,
            "encoder_decoder": bool(cfg.get("is_encoder_decoder")),
            "has_tokenizer_json": bool(tj)}
    ctx["mm_model"] = info
    return info


def placeholder_id(cfg: dict[str, Any], modality: str) -> int | None:
    """The model's placeholder token for `modality`, from config.json (top level or one level down)."""
    keys = (f"{modality}_token_id", f"{modality}_token_index")
    for scope in [cfg, *(v for v in cfg.values() if isinstance(v, dict))]:
        for k in keys:
            if isinstance(scope.get(k), int):
                return scope[k]
    return None


def _tokenizer(model_path: str, ctx: dict[str, Any]) -> Any:
    if "mm_tokenizer" not in ctx:
        from tokenizers import Tokenizer

        path = Path(ctx.get("tokenizer_path") or model_path) / "tokenizer.json"
        if not path.exists():
            raise InputError(f"{path}: multimodal prompts are built from the model's tokenizer.json, which is missing")
        ctx["mm_tokenizer"] = Tokenizer.from_file(str(path))
    return ctx["mm_tokenizer"]


def _text_ids(n: int, vocab: int, special: set[int], seed: int) -> list[int]:
    # Seeded ids below the vocabulary, never a special or added token (a random <|image_pad|>
    # would be read as one more placeholder).
    rng = random.Random(seed)
    lo, hi = min(10, vocab // 4), vocab - 1
    out = []
    while len(out) < n:
        t = rng.randrange(lo, hi)
        if t not in special:
            out.append(t)
    return out


def render_template(template: str, content: list[dict[str, Any]]) -> str:
    """The chat template rendered as transformers renders it (sandboxed jinja, trimmed blocks)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg: str) -> None:
        raise InputError(f"the model's chat template refused the prompt: {msg}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=[{"role": "user", "content": content}],
                                            add_generation_prompt=True, bos_token="", eos_token="")


def prompt_ids(modality: str, per_prompt: int, text_len: int, seed: int, ctx: dict[str, Any]) -> tuple[list[int], str]:
    """Token ids of one decoder-only prompt with `per_prompt` inputs of `modality`; and how it was built."""
    model_path = ctx["model_path"]
    info = model_info(model_path, ctx)
    special = set(info["added_tokens"])
    text = _text_ids(text_len, ctx["vocab"], special, seed)
    if info["chat_template"]:
        rendered = render_template(info["chat_template"],
                                   [{"type": modality} for _ in range(per_prompt)] + [{"type": "text", "text": _MARK}])
        if _MARK not in rendered:
            raise InputError(f"{model_path}: the chat template ({info['chat_template_source']}) drops the text part")
        before, after = rendered.split(_MARK, 1)
        tok = _tokenizer(model_path, ctx)
        ids = (tok.encode(before, add_special_tokens=False).ids + text
               + tok.encode(after, add_special_tokens=False).ids)
        how = f"chat template from {info['chat_template_source']}"
    else:
        pid = placeholder_id(info["config"], modality)
        if pid is None:
            raise InputError(f"{model_path}: no chat template and no {modality}_token_id/{modality}_token_index in "
                             f"config.json: this model does not take {modality} inputs")
        ids = [pid] * per_prompt + text
        how = f"placeholder {modality}_token id {pid} from config.json"
    return ids, how


def decoder_prefix(info: dict[str, Any], model_path: str) -> list[int]:
    """An encoder-decoder speech model's task prefix, from its generation config (Whisper's keys:
    decoder start, language, task, no timestamps), else the decoder start token alone."""
    cfg, gen = info["config"], info["generation_config"]
    start = gen.get("decoder_start_token_id", cfg.get("decoder_start_token_id"))
    if not isinstance(start, int):
        raise InputError(f"{model_path}: encoder-decoder model without decoder_start_token_id in config.json "
                         "or generation_config.json")
    prefix = [start]
    lang = (gen.get("lang_to_id") or {}).get("<|en|>")
    task = (gen.get("task_to_id") or {}).get("transcribe")
    for t in (lang, task, gen.get("no_timestamps_token_id")):
        if isinstance(t, int):
            prefix.append(t)
    return prefix


# --- what the engine processed ----------------------------------------------------------------------

def engine_counts(outputs: list[Any], placeholder: int | None) -> dict[str, int | None]:
    """Prompt tokens as the engine processed them: RequestOutput.prompt_token_ids after vLLM expanded
    each placeholder to the input's token count, plus the encoder prompt of an encoder-decoder model
    (RequestOutput.encoder_prompt_token_ids: Whisper's 1,500 audio positions per clip)."""
    dec = sum(len(o.prompt_token_ids or []) for o in outputs)
    enc = sum(len(getattr(o, "encoder_prompt_token_ids", None) or []) for o in outputs)
    mm = None
    if placeholder is not None:
        mm = sum(sum(1 for t in (o.prompt_token_ids or []) if t == placeholder) for o in outputs)
    return {"decoder_prompt_tokens": dec, "encoder_prompt_tokens": enc, "placeholder_tokens": mm}


# --- one modality's build/describe, shared ------------------------------------------------------------

def require_torchvision(modality: str) -> None:
    """Image and video processors of current transformers import torchvision: a leg without a working
    one cannot process these inputs, and says so before the engine starts."""
    try:
        import torchvision  # noqa: F401
    except Exception as e:  # noqa: BLE001 - ImportError, or a CUDA build failing on a CPU torch
        raise InputError(f"this leg cannot process {modality} inputs: torchvision does not import "
                         f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); declare it in the leg "
                         "spec (extra, and patches where the index has no build for this torch)") from None


def make_prompts(modality: str, items: list[Any], per_prompt: int, text_len: int, seed: int,
                 meta: dict[str, Any], ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """vLLM prompts, `per_prompt` consecutive items each; `meta` (files, clamped) kept for describe."""
    info = model_info(ctx["model_path"], ctx)
    prompts = []
    for i in range(len(items) // per_prompt):
        chunk = items[i * per_prompt:(i + 1) * per_prompt]
        data = {modality: chunk[0] if per_prompt == 1 else chunk}
        if info["encoder_decoder"]:
            prefix = decoder_prefix(info, ctx["model_path"])
            extra = _text_ids(max(0, text_len - len(prefix)), ctx["vocab"], set(info["added_tokens"]), seed + i)
            dec = (prefix + extra)[:text_len]
            p: dict[str, Any] = {"encoder_prompt": {"prompt": "", "multi_modal_data": data},
                                 "decoder_prompt": {"prompt_token_ids": dec}}
            how = "encoder-decoder: audio as encoder prompt, decoder prefix from generation_config.json"
        else:
            ids, how = prompt_ids(modality, per_prompt, text_len, seed + i, ctx)
            p = {"prompt_token_ids": ids, "multi_modal_data": data}
        prompts.append(p)
        ctx.setdefault("mm_meta", {})[id(p)] = {"items": chunk, "how": how, **meta.get(i, {})}
    return prompts


def describe(modality: str, prompts: list[dict[str, Any]], ctx: dict[str, Any], unit: str) -> dict[str, Any]:
    """What the record keeps about multimodal prompts: input hashes and counts, the prompt format, the
    token counts the engine processed (see engine_counts), and the processor cache setting."""
    meta = [ctx.get("mm_meta", {}).get(id(p), {}) for p in prompts]
    items = [x for m in meta for x in m.get("items", [])]
    text_ids = [p.get("prompt_token_ids") or p.get("decoder_prompt", {}).get("prompt_token_ids") or [] for p in prompts]
    digest = inputs_digest(items)
    info = model_info(ctx["model_path"], ctx)
    pid = placeholder_id(info["config"], modality)
    out: dict[str, Any] = {
        "prompts_sha256": hashlib.sha256(json.dumps([text_ids, digest["inputs_sha256"]]).encode()).hexdigest(),
        **digest, f"num_{unit}": len(items),
        "prompt_format": sorted({m.get("how", "") for m in meta}),
        "text_prompt_tokens": sum(len(t) for t in text_ids),
        "mm_processor_cache_gb": (ctx.get("engine_args") or {}).get("mm_processor_cache_gb"),
    }
    if modality == "video":
        out["num_frames"] = int(sum(item_array(x).shape[0] for x in items))
    if modality == "audio":
        out["audio_seconds"] = float(sum(len(x[0]) / x[1] for x in items))
        out["clamped_clips"] = sum(m.get("clamped", 0) for m in meta)
    files = [f for m in meta for f in m.get("files", [])]
    if files:
        out["source_files"] = files
    outputs = ctx.get("outputs")
    if outputs is not None:
        counts = engine_counts(outputs, None if info["encoder_decoder"] else pid)
        if info["encoder_decoder"]:
            # vLLM pads every clip to the encoder's window (Whisper: max_source_positions, 1,500), but
            # not every release returns the encoder prompt (0.27.1 hands back none): counted from
            # config.json on every leg, so legs stay comparable; what the engine returned is kept.
            counts["engine_encoder_prompt_tokens"] = counts["encoder_prompt_tokens"]
            per_clip = info["config"].get("max_source_positions")
            if isinstance(per_clip, int):
                counts["encoder_prompt_tokens"] = per_clip * len(items)
            counts["placeholder_tokens"] = counts["encoder_prompt_tokens"]
        out |= counts
        # Total tok/s counts what the engine processed: the prompt after placeholder expansion plus
        # an encoder-decoder model's encoder positions.
        out["prompt_tokens"] = counts["decoder_prompt_tokens"] + counts["encoder_prompt_tokens"]
    else:
        out["prompt_tokens"] = out["text_prompt_tokens"]
    # The record's work keeps the counts every modality has at its top level, the rest under `inputs`.
    top = ("prompt_tokens", "prompts_sha256")
    return {k: out[k] for k in top} | {"inputs": {k: v for k, v in out.items() if k not in top}}


# --- vLLM's own benchmark doing the same work (the crosscheck's vLLM side) --------------------------

def random_mm_args(work: dict[str, Any], path: str, modality: str, per_prompt: int, frames: int) -> list[str]:
    """vLLM's `random-mm` dataset drawing `per_prompt` synthetic items of the workload's size (a
    bucket (height, width, frames): one frame is an image, more a video) on a text part of
    `input_len` tokens, through its chat backend (the one that puts the items in the prompt and counts
    their placeholder tokens), exactly `per_prompt` items per request.

    `--dataset-path` is set although random-mm never reads it: without one, vLLM 0.24.0 to 0.32.0
    silently run the text-only `random` dataset instead (docs/defects.md)."""
    if work.get("source"):
        raise ValueError(f"{modality}s from a folder ({work['source']}): vLLM's random-mm draws synthetic "
                         f"{modality}s of its own, not these")
    limit = {"image": per_prompt if modality == "image" else 0, "video": per_prompt if modality == "video" else 0}
    bucket = f"{{({work['height']}, {work['width']}, {frames}): 1.0}}"
    return ["--backend", "vllm-chat", "--dataset-name", "random-mm", "--dataset-path", path,
            "--random-input-len", str(work["input_len"]), "--random-output-len", str(work["output_len"]),
            "--random-range-ratio", "0.0",
            "--random-mm-base-items-per-request", str(per_prompt), "--random-mm-num-mm-items-range-ratio", "0.0",
            "--random-mm-limit-mm-per-prompt", json.dumps(limit), "--random-mm-bucket-config", bucket]
