"""Tiny random-weight multimodal models, built locally like the tiny Llama (no hub, no torch).

- `qwen2-vl`: a Qwen2-VL-style vision-language model (image and video), the family's special
  tokens, chat template and image/video processor configs.
- `whisper`: a Whisper-style encoder-decoder speech model (audio), the family's special tokens and
  feature-extractor config (80 mel bins, 16 kHz, 30 s windows: what the real checkpoints use).

Weights are seeded numpy arrays written through safetensors, tokenizers are trained with
`tokenizers` on a generated corpus: the same bytes on every build. The names of the weights are
the original checkpoints' (not vLLM's), so vLLM's own name mapping and its strict loader check
them: a missing or misnamed tensor fails the load instead of being left random.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from harness.core import paths
from harness.measure.tinymodel import _corpus, build_tiny_model

# '1' - first layout: Qwen2VLForConditionalGeneration and WhisperForConditionalGeneration, byte-level
#       BPE tokenizers with the families' special tokens first, fp32 safetensors.
TINY_MM_FORMAT = "1"

FAMILIES = ("qwen2-vl", "whisper")

QWEN2_VL_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                     "<|image_pad|>", "<|video_pad|>"]
WHISPER_SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|translate|>",
                    "<|notimestamps|>", "<|nospeech|>", "<|startofprev|>", "<|startoflm|>"]

# Qwen2-VL's own chat template: one <|vision_start|><|image_pad|><|vision_end|> per image, which the
# processor then expands to the image's patch count.
QWEN2_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


@dataclass(frozen=True, kw_only=True)
class TinyQwen2VLShape:
    vocab_size: int = 2048
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096
    vision_depth: int = 2
    vision_embed_dim: int = 64
    vision_num_heads: int = 2
    vision_mlp_ratio: int = 2
    patch_size: int = 14
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    # The processor's pixel budget: a 224x224 image is 16x16 patches, 64 placeholder tokens.
    min_pixels: int = 56 * 56
    max_pixels: int = 448 * 448
    seed: int = 0


@dataclass(frozen=True, kw_only=True)
class TinyWhisperShape:
    vocab_size: int = 2048
    d_model: int = 64
    encoder_layers: int = 2
    decoder_layers: int = 2
    attention_heads: int = 2
    ffn_dim: int = 128
    num_mel_bins: int = 80
    # 30 s windows of 16 kHz audio: 3000 mel frames, halved by the second conv to 1500 encoder
    # positions (the real models' numbers, which the feature extractor's padding assumes).
    max_source_positions: int = 1500
    max_target_positions: int = 448
    seed: int = 0


def default_dir(family: str) -> Path:
    return paths.cache_dir() / "models" / f"tiny-{family}-v{TINY_MM_FORMAT}"


def _train_tokenizer(out: Path, vocab_size: int, specials: list[str], seed: int) -> dict[str, int]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(random.Random(seed)), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    return {s: tok.token_to_id(s) for s in specials}


def _dump(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _normal(rng: np.random.Generator) -> Callable[..., np.ndarray]:
    def w(*dims: int) -> np.ndarray:
        return (rng.standard_normal(dims) * 0.02).astype(np.float32)
    return w


# --- Qwen2-VL-style -------------------------------------------------------------------------------

def _qwen2_vl_files(out: Path, s: TinyQwen2VLShape) -> dict[str, np.ndarray]:
    ids = _train_tokenizer(out, s.vocab_size, QWEN2_VL_SPECIALS, s.seed)
    head_dim = s.hidden_size // s.num_attention_heads
    # mrope splits the rotary half-dimension into temporal, height and width sections.
    half = head_dim // 2
    section = [half - 2 * (half * 3 // 8), half * 3 // 8, half * 3 // 8]
    _dump(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "bos_token": None, "model_max_length": s.max_position_embeddings, "clean_up_tokenization_spaces": False,
        "chat_template": QWEN2_VL_CHAT_TEMPLATE,
    })
    _dump(out / "special_tokens_map.json", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                                            "additional_special_tokens": QWEN2_VL_SPECIALS[1:]})
    (out / "chat_template.json").write_text(json.dumps({"chat_template": QWEN2_VL_CHAT_TEMPLATE}, indent=2) + "\n")
    image_proc = {
        "processor_class": "Qwen2VLProcessor", "do_resize": True, "do_rescale": True, "do_normalize": True,
        "do_convert_rgb": True, "resample": 3, "rescale_factor": 1 / 255, "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD, "patch_size": s.patch_size, "temporal_patch_size": s.temporal_patch_size,
        "merge_size": s.spatial_merge_size, "min_pixels": s.min_pixels, "max_pixels": s.max_pixels,
        "size": {"shortest_edge": s.min_pixels, "longest_edge": s.max_pixels},
    }
    _dump(out / "preprocessor_config.json", image_proc | {"image_processor_type": "Qwen2VLImageProcessor"})
    _dump(out / "video_preprocessor_config.json", image_proc | {"video_processor_type": "Qwen2VLVideoProcessor",
                                                                "do_sample_frames": False})
    _dump(out / "generation_config.json", {"eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"]})
    _dump(out / "config.json", {
        "architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
        "vocab_size": s.vocab_size, "hidden_size": s.hidden_size, "intermediate_size": s.intermediate_size,
        "num_hidden_layers": s.num_hidden_layers, "num_attention_heads": s.num_attention_heads,
        "num_key_value_heads": s.num_key_value_heads, "max_position_embeddings": s.max_position_embeddings,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "rope_type": "default", "mrope_section": section},
        "tie_word_embeddings": False, "torch_dtype": "float32", "use_sliding_window": False,
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
        "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"],
        "vision_token_id": ids["<|image_pad|>"],
        "vision_config": {
            "depth": s.vision_depth, "embed_dim": s.vision_embed_dim, "hidden_size": s.hidden_size,
            "hidden_act": "quick_gelu", "mlp_ratio": s.vision_mlp_ratio, "num_heads": s.vision_num_heads,
            "in_channels": 3, "in_chans": 3, "patch_size": s.patch_size,
            "spatial_merge_size": s.spatial_merge_size, "temporal_patch_size": s.temporal_patch_size,
        },
        "harness_tiny_model": {"format": TINY_MM_FORMAT, "family": "qwen2-vl", **asdict(s)},
    })
    w = _normal(np.random.default_rng(s.seed))
    h, i, v = s.hidden_size, s.intermediate_size, s.vocab_size
    kv = s.num_key_value_heads * head_dim
    t: dict[str, np.ndarray] = {"model.embed_tokens.weight": w(v, h), "lm_head.weight": w(v, h),
                                "model.norm.weight": np.ones(h, np.float32)}
    for n in range(s.num_hidden_layers):
        p = f"model.layers.{n}."
        t |= {p + "self_attn.q_proj.weight": w(h, h), p + "self_attn.q_proj.bias": w(h),
              p + "self_attn.k_proj.weight": w(kv, h), p + "self_attn.k_proj.bias": w(kv),
              p + "self_attn.v_proj.weight": w(kv, h), p + "self_attn.v_proj.bias": w(kv),
              p + "self_attn.o_proj.weight": w(h, h),
              p + "mlp.gate_proj.weight": w(i, h), p + "mlp.up_proj.weight": w(i, h),
              p + "mlp.down_proj.weight": w(h, i),
              p + "input_layernorm.weight": np.ones(h, np.float32),
              p + "post_attention_layernorm.weight": np.ones(h, np.float32)}
    e, ps = s.vision_embed_dim, s.patch_size
    m = e * s.vision_mlp_ratio
    merged = e * s.spatial_merge_size ** 2
    t["visual.patch_embed.proj.weight"] = w(e, 3, s.temporal_patch_size, ps, ps)
    for n in range(s.vision_depth):
        p = f"visual.blocks.{n}."
        t |= {p + "norm1.weight": np.ones(e, np.float32), p + "norm1.bias": np.zeros(e, np.float32),
              p + "norm2.weight": np.ones(e, np.float32), p + "norm2.bias": np.zeros(e, np.float32),
              p + "attn.qkv.weight": w(3 * e, e), p + "attn.qkv.bias": w(3 * e),
              p + "attn.proj.weight": w(e, e), p + "attn.proj.bias": w(e),
              p + "mlp.fc1.weight": w(m, e), p + "mlp.fc1.bias": w(m),
              p + "mlp.fc2.weight": w(e, m), p + "mlp.fc2.bias": w(e)}
    t |= {"visual.merger.ln_q.weight": np.ones(e, np.float32), "visual.merger.ln_q.bias": np.zeros(e, np.float32),
          "visual.merger.mlp.0.weight": w(merged, merged), "visual.merger.mlp.0.bias": w(merged),
          "visual.merger.mlp.2.weight": w(h, merged), "visual.merger.mlp.2.bias": w(h)}
    return t


# --- Whisper-style --------------------------------------------------------------------------------

def _sinusoids(length: int, channels: int) -> np.ndarray:
    """Whisper's fixed encoder position table (the real checkpoints store exactly this)."""
    inc = math.log(10000) / (channels // 2 - 1)
    inv = np.exp(-inc * np.arange(channels // 2))
    scaled = np.arange(length)[:, None] * inv[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1).astype(np.float32)


def _whisper_files(out: Path, s: TinyWhisperShape) -> dict[str, np.ndarray]:
    ids = _train_tokenizer(out, s.vocab_size, WHISPER_SPECIALS, s.seed)
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    _dump(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "model_max_length": s.max_target_positions,
        "clean_up_tokenization_spaces": False,
    })
    _dump(out / "special_tokens_map.json", {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                                            "pad_token": "<|endoftext|>",
                                            "additional_special_tokens": WHISPER_SPECIALS[1:]})
    sr, hop, chunk = 16000, 160, 30
    _dump(out / "preprocessor_config.json", {
        "feature_extractor_type": "WhisperFeatureExtractor", "processor_class": "WhisperProcessor",
        "feature_size": s.num_mel_bins, "sampling_rate": sr, "hop_length": hop, "chunk_length": chunk,
        "n_fft": 400, "n_samples": sr * chunk, "nb_max_frames": sr * chunk // hop, "padding_side": "right",
        "padding_value": 0.0, "return_attention_mask": False,
    })
    # The real checkpoints' generation config names the task prefix's tokens; prompts read them here.
    _dump(out / "generation_config.json", {"decoder_start_token_id": sot, "eos_token_id": eot,
                                           "pad_token_id": eot, "bos_token_id": eot,
                                           "lang_to_id": {"<|en|>": ids["<|en|>"]},
                                           "task_to_id": {"transcribe": ids["<|transcribe|>"],
                                                          "translate": ids["<|translate|>"]},
                                           "no_timestamps_token_id": ids["<|notimestamps|>"],
                                           "is_multilingual": True})
    _dump(out / "config.json", {
        "architectures": ["WhisperForConditionalGeneration"], "model_type": "whisper",
        "vocab_size": s.vocab_size, "num_mel_bins": s.num_mel_bins, "d_model": s.d_model,
        "encoder_layers": s.encoder_layers, "decoder_layers": s.decoder_layers,
        "encoder_attention_heads": s.attention_heads, "decoder_attention_heads": s.attention_heads,
        "encoder_ffn_dim": s.ffn_dim, "decoder_ffn_dim": s.ffn_dim,
        "max_source_positions": s.max_source_positions, "max_target_positions": s.max_target_positions,
        "activation_function": "gelu", "scale_embedding": False, "tie_word_embeddings": True,
        "is_encoder_decoder": True, "torch_dtype": "float32", "use_cache": True,
        "bos_token_id": eot, "eos_token_id": eot, "pad_token_id": eot, "decoder_start_token_id": sot,
        "begin_suppress_tokens": None, "suppress_tokens": None,
        "harness_tiny_model": {"format": TINY_MM_FORMAT, "family": "whisper", **asdict(s)},
    })
    w = _normal(np.random.default_rng(s.seed))
    d, f, v = s.d_model, s.ffn_dim, s.vocab_size

    def ln(prefix: str) -> dict[str, np.ndarray]:
        return {prefix + ".weight": np.ones(d, np.float32), prefix + ".bias": np.zeros(d, np.float32)}

    def attn(prefix: str) -> dict[str, np.ndarray]:
        # Whisper's k_proj has no bias (vLLM adds a zero one on load).
        return {prefix + ".q_proj.weight": w(d, d), prefix + ".q_proj.bias": w(d),
                prefix + ".k_proj.weight": w(d, d),
                prefix + ".v_proj.weight": w(d, d), prefix + ".v_proj.bias": w(d),
                prefix + ".out_proj.weight": w(d, d), prefix + ".out_proj.bias": w(d)}

    def ffn(prefix: str) -> dict[str, np.ndarray]:
        return {prefix + "fc1.weight": w(f, d), prefix + "fc1.bias": w(f),
                prefix + "fc2.weight": w(d, f), prefix + "fc2.bias": w(d)}

    t: dict[str, np.ndarray] = {
        "model.encoder.conv1.weight": w(d, s.num_mel_bins, 3), "model.encoder.conv1.bias": w(d),
        "model.encoder.conv2.weight": w(d, d, 3), "model.encoder.conv2.bias": w(d),
        "model.encoder.embed_positions.weight": _sinusoids(s.max_source_positions, d),
        "model.decoder.embed_tokens.weight": w(v, d),
        "model.decoder.embed_positions.weight": w(s.max_target_positions, d),
        **ln("model.encoder.layer_norm"), **ln("model.decoder.layer_norm"),
    }
    for n in range(s.encoder_layers):
        p = f"model.encoder.layers.{n}."
        t |= attn(p + "self_attn") | ln(p + "self_attn_layer_norm") | ffn(p) | ln(p + "final_layer_norm")
    for n in range(s.decoder_layers):
        p = f"model.decoder.layers.{n}."
        t |= (attn(p + "self_attn") | ln(p + "self_attn_layer_norm") | attn(p + "encoder_attn")
              | ln(p + "encoder_attn_layer_norm") | ffn(p) | ln(p + "final_layer_norm"))
    return t


def build_tiny_mm_model(family: str, dest: Path | None = None, *, force: bool = False,
                        shape: TinyQwen2VLShape | TinyWhisperShape | None = None) -> Path:
    """Build (or reuse) a tiny multimodal model of `family` at `dest`; returns its directory.

    Like the tiny Llama: written to a temporary sibling and renamed, never half-complete, and an
    existing `dest` the harness did not write refused (schema.outdir); `force` rebuilds one it wrote.
    """
    from safetensors.numpy import save_file

    from harness.schema.outdir import output_dir

    if family not in FAMILIES:
        raise ValueError(f"unknown tiny model family {family!r} (known: {', '.join(FAMILIES)})")
    default = dest is None
    dest = Path(dest) if dest else default_dir(family)
    if (dest / "config.json").exists() and not force:
        return dest
    # The cache's own copy is built once when two processes want it at once; the other waits, reuses it.
    with paths.build_lock(dest) if default else contextlib.nullcontext():
        if (dest / "config.json").exists() and not force:
            return dest
        with output_dir(dest, verb="tiny-model", replace=force, default=default) as tmp:
            if family == "qwen2-vl":
                tensors = _qwen2_vl_files(tmp, shape if isinstance(shape, TinyQwen2VLShape) else TinyQwen2VLShape())
            else:
                tensors = _whisper_files(tmp, shape if isinstance(shape, TinyWhisperShape) else TinyWhisperShape())
            save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    return dest


# What a scenario's model `path` may name to get a locally built tiny model.
TINY_MODELS = {"tiny": "llama", "tiny-qwen2-vl": "qwen2-vl", "tiny-whisper": "whisper"}


def build_tiny(name: str) -> Path:
    """The tiny model a scenario names (`tiny`, `tiny-qwen2-vl`, `tiny-whisper`), built if missing."""
    family = TINY_MODELS[name]
    if family == "llama":
        return build_tiny_model()
    return build_tiny_mm_model(family)
