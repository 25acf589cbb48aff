"""Build scenarios/architectures/qwen2-vl-7b/: Qwen2-VL-7B-Instruct's published config.json and
processor settings, for `load_format: dummy`, with a small locally trained tokenizer whose special
tokens carry the real ids (151643...), so the processor's placeholder ids and config.json's
`image_token_id` / `video_token_id` agree. Built from the harness's tiny Qwen2-VL-style model (its
tokenizer, chat template and processor configs); the weights are not copied (vLLM draws them).

Run from the project root: .venv/bin/python environment/device/make_qwen2_vl_7b.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from harness.measure.tinymm import CLIP_MEAN, CLIP_STD, QWEN2_VL_CHAT_TEMPLATE, build_tiny  # noqa: E402

OUT = Path("scenarios/architectures/qwen2-vl-7b")

# Qwen2's special tokens and their ids in the released tokenizer (after its 151,643 BPE tokens).
SPECIAL_IDS = {
    "<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
    "<|object_ref_start|>": 151646, "<|object_ref_end|>": 151647, "<|box_start|>": 151648,
    "<|box_end|>": 151649, "<|quad_start|>": 151650, "<|quad_end|>": 151651,
    "<|vision_start|>": 151652, "<|vision_end|>": 151653, "<|vision_pad|>": 151654,
    "<|image_pad|>": 151655, "<|video_pad|>": 151656,
}

# Qwen2-VL-7B-Instruct's config.json as published (rope_scaling also names rope_type, as the tiny
# model's does, which is the form this image's transformers reads for mrope).
CONFIG = {
    "architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645,
    "vision_start_token_id": 151652, "vision_end_token_id": 151653, "vision_token_id": 151654,
    "image_token_id": 151655, "video_token_id": 151656, "hidden_act": "silu", "hidden_size": 3584,
    "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 32768,
    "max_window_layers": 28, "num_attention_heads": 28, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
    "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
                      "hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2,
                      "temporal_patch_size": 2},
    "rope_scaling": {"type": "mrope", "rope_type": "default", "mrope_section": [16, 24, 24]},
    "vocab_size": 152064,
}

# Qwen2-VL-7B-Instruct's preprocessor_config.json values (pixel budget 3,136 .. 12,845,056).
IMAGE_PROC = {
    "processor_class": "Qwen2VLProcessor", "do_resize": True, "do_rescale": True, "do_normalize": True,
    "do_convert_rgb": True, "resample": 3, "rescale_factor": 1 / 255, "image_mean": CLIP_MEAN,
    "image_std": CLIP_STD, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
    "min_pixels": 3136, "max_pixels": 12845056,
    "size": {"shortest_edge": 3136, "longest_edge": 12845056},
}


def dump(name: str, obj: dict) -> None:
    (OUT / name).write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def main() -> None:
    tiny = build_tiny("tiny-qwen2-vl")
    tok = json.loads((tiny / "tokenizer.json").read_text())
    vocab: dict[str, int] = tok["model"]["vocab"]
    # Ordinary tokens keep their order, packed from 0; the special tokens move to their real ids.
    plain = sorted((i, t) for t, i in vocab.items() if t not in SPECIAL_IDS)
    new_vocab = {t: n for n, (_, t) in enumerate(plain)}
    new_vocab |= SPECIAL_IDS
    tok["model"]["vocab"] = new_vocab
    tok["added_tokens"] = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                            "normalized": False, "special": True} for t, i in SPECIAL_IDS.items()]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False) + "\n")
    dump("tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "bos_token": None, "model_max_length": 32768, "clean_up_tokenization_spaces": False,
        "chat_template": QWEN2_VL_CHAT_TEMPLATE,
    })
    dump("special_tokens_map.json", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                                     "additional_special_tokens": [t for t in SPECIAL_IDS if t != "<|endoftext|>"]})
    dump("chat_template.json", {"chat_template": QWEN2_VL_CHAT_TEMPLATE})
    dump("preprocessor_config.json", IMAGE_PROC | {"image_processor_type": "Qwen2VLImageProcessor"})
    dump("video_preprocessor_config.json", IMAGE_PROC | {"video_processor_type": "Qwen2VLVideoProcessor",
                                                         "do_sample_frames": False})
    dump("generation_config.json", {"bos_token_id": 151643, "eos_token_id": 151645, "pad_token_id": 151643})
    dump("config.json", CONFIG)


if __name__ == "__main__":
    main()
