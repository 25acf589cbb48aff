"""Build a tiny random-weight Llama locally: config, safetensors weights and a trained tokenizer.

No hub and no torch: weights are written with numpy through safetensors, the tokenizer is trained
with `tokenizers` on a small generated corpus. The result loads in vLLM (real engine, real kernels)
and in transformers, which is all a harness test needs; its outputs are meaningless by design.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from harness.core import paths

# '1' - first layout: LlamaForCausalLM, byte-level BPE tokenizer, fp32 safetensors.
TINY_MODEL_FORMAT = "1"


@dataclass(frozen=True, kw_only=True)
class TinyLlamaShape:
    vocab_size: int = 2048
    hidden_size: int = 256
    intermediate_size: int = 512
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 2048
    seed: int = 0


def default_dir() -> Path:
    return paths.cache_dir() / "models" / f"tiny-llama-v{TINY_MODEL_FORMAT}"


def _corpus(rng: random.Random, lines: int = 4000) -> list[str]:
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        for _ in range(3000)
    ]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 30))) for _ in range(lines)]


def _train_tokenizer(out: Path, shape: TinyLlamaShape) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=shape.vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(random.Random(shape.seed)), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "model_max_length": shape.max_position_embeddings,
                "clean_up_tokenization_spaces": False,
            },
            indent=2,
        )
    )
    (out / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))


def _config(shape: TinyLlamaShape) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": shape.vocab_size,
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "head_dim": shape.hidden_size // shape.num_attention_heads,
        "max_position_embeddings": shape.max_position_embeddings,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "torch_dtype": "float32",
        "harness_tiny_model": {"format": TINY_MODEL_FORMAT, **asdict(shape)},
    }


def _weights(shape: TinyLlamaShape) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(shape.seed)
    h, i, v = shape.hidden_size, shape.intermediate_size, shape.vocab_size
    hd = h // shape.num_attention_heads
    kv = shape.num_key_value_heads * hd

    def w(*dims: int) -> np.ndarray:
        return (rng.standard_normal(dims) * 0.02).astype(np.float32)

    tensors = {"model.embed_tokens.weight": w(v, h), "lm_head.weight": w(v, h),
               "model.norm.weight": np.ones(h, np.float32)}
    for n in range(shape.num_hidden_layers):
        p = f"model.layers.{n}."
        tensors |= {
            p + "self_attn.q_proj.weight": w(h, h),
            p + "self_attn.k_proj.weight": w(kv, h),
            p + "self_attn.v_proj.weight": w(kv, h),
            p + "self_attn.o_proj.weight": w(h, h),
            p + "mlp.gate_proj.weight": w(i, h),
            p + "mlp.up_proj.weight": w(i, h),
            p + "mlp.down_proj.weight": w(h, i),
            p + "input_layernorm.weight": np.ones(h, np.float32),
            p + "post_attention_layernorm.weight": np.ones(h, np.float32),
        }
    return tensors


def build_tiny_model(dest: Path | None = None, shape: TinyLlamaShape = TinyLlamaShape(),
                     *, force: bool = False) -> Path:
    """Build (or reuse) the tiny model at `dest`; returns its directory.

    Written to a temporary sibling and renamed, so an interrupted build never leaves a directory
    that looks complete (schema.outdir): an existing `dest` the harness did not write is refused, and
    one it wrote is rebuilt only with `force` (the default cache folder's own rebuild included).
    """
    from safetensors.numpy import save_file

    from harness.schema.outdir import output_dir

    default = dest is None
    dest = Path(dest) if dest else default_dir()
    if (dest / "config.json").exists() and not force:
        return dest
    # The cache's own copy is built once when two processes want it at once; the other waits, reuses it.
    with paths.build_lock(dest) if default else contextlib.nullcontext():
        if (dest / "config.json").exists() and not force:
            return dest
        with output_dir(dest, verb="tiny-model", replace=force, default=default) as tmp:
            _train_tokenizer(tmp, shape)
            save_file(_weights(shape), str(tmp / "model.safetensors"), metadata={"format": "pt"})
            (tmp / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}))
            (tmp / "config.json").write_text(json.dumps(_config(shape), indent=2))
    return dest


def materialize_architecture(config_path: Path) -> Path:
    """A model directory for `load_format=dummy`: the real architecture's config.json plus the tiny
    tokenizer (prompts are token ids, so the tokenizer only has to load, not to match the vocab)."""
    config_path = Path(config_path)
    text = config_path.read_text(encoding="utf-8")
    tag = hashlib.sha256(text.encode()).hexdigest()[:12]
    dest = paths.cache_dir() / "models" / f"dummy-{config_path.stem}-{tag}"
    if (dest / "config.json").exists():
        return dest
    tiny = build_tiny_model()
    from harness.schema.outdir import output_dir

    # The cache's own folder: one without config.json (a build cut short) is rewritten if the harness made it.
    with output_dir(dest, verb="tiny-model", default=True) as tmp:
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(tiny / name, tmp / name)
        (tmp / "config.json").write_text(text)
    return dest
