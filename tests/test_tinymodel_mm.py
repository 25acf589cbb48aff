"""The tiny multimodal models: same bytes on every build, the families' special tokens and processor
configs in place, weights under the original checkpoints' names."""

from __future__ import annotations

import hashlib
import json

import pytest
from safetensors.numpy import load_file

from harness.measure.tinymm import FAMILIES, QWEN2_VL_SPECIALS, WHISPER_SPECIALS, build_tiny_mm_model


def _digest(d):
    # The model's files; the harness's output marker (.harness-output.json: who wrote it, when) is not the model.
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.name != ".harness-output.json"}


@pytest.mark.parametrize("family", FAMILIES)
def test_builds_are_byte_identical(tmp_path, family):
    assert _digest(build_tiny_mm_model(family, tmp_path / "a")) == _digest(build_tiny_mm_model(family, tmp_path / "b"))


def test_qwen2_vl_files(tmp_path):
    d = build_tiny_mm_model("qwen2-vl", tmp_path / "q")
    cfg = json.loads((d / "config.json").read_text())
    tok = json.loads((d / "tokenizer.json").read_text())
    ids = {a["content"]: a["id"] for a in tok["added_tokens"]}
    assert set(QWEN2_VL_SPECIALS) <= set(ids)
    assert cfg["image_token_id"] == ids["<|image_pad|>"] and cfg["video_token_id"] == ids["<|video_pad|>"]
    head = cfg["hidden_size"] // cfg["num_attention_heads"]
    assert sum(cfg["rope_scaling"]["mrope_section"]) == head // 2
    assert json.loads((d / "preprocessor_config.json").read_text())["image_processor_type"] == "Qwen2VLImageProcessor"
    assert "<|image_pad|>" in json.loads((d / "chat_template.json").read_text())["chat_template"]
    w = load_file(str(d / "model.safetensors"))
    assert w["visual.patch_embed.proj.weight"].shape == (64, 3, 2, 14, 14)
    assert w["visual.merger.mlp.2.weight"].shape == (cfg["hidden_size"], 64 * 4)
    assert max(ids.values()) < cfg["vocab_size"]


def test_whisper_files(tmp_path):
    d = build_tiny_mm_model("whisper", tmp_path / "w")
    cfg = json.loads((d / "config.json").read_text())
    gen = json.loads((d / "generation_config.json").read_text())
    tok = json.loads((d / "tokenizer.json").read_text())
    ids = {a["content"]: a["id"] for a in tok["added_tokens"]}
    assert set(WHISPER_SPECIALS) <= set(ids)
    assert cfg["decoder_start_token_id"] == ids["<|startoftranscript|>"] == gen["decoder_start_token_id"]
    fe = json.loads((d / "preprocessor_config.json").read_text())
    # 30 s of 16 kHz audio in 10 ms hops, halved by the encoder's second conv: its positions.
    assert fe["nb_max_frames"] // 2 == cfg["max_source_positions"]
    w = load_file(str(d / "model.safetensors"))
    assert w["model.encoder.conv1.weight"].shape == (cfg["d_model"], cfg["num_mel_bins"], 3)
    assert "model.encoder.layers.0.self_attn.k_proj.bias" not in w  # as in the real checkpoints


def test_unknown_family(tmp_path):
    with pytest.raises(ValueError, match="unknown tiny model family"):
        build_tiny_mm_model("llava", tmp_path / "x")
