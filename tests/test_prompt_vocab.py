"""The prompt id range comes from the model's files, so every leg draws the same prompts."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_under_test", ROOT / "harness/measure/worker/bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _model(d: Path, vocab: int | None, tok_ids: int | None, *, nested: bool = False) -> Path:
    d.mkdir(parents=True)
    if vocab is not None:
        cfg = {"text_config": {"vocab_size": vocab}} if nested else {"vocab_size": vocab}
        (d / "config.json").write_text(json.dumps(cfg))
    if tok_ids is not None:
        vocab_map = {f"t{i}": i for i in range(tok_ids - 2)}
        added = [{"id": tok_ids - 2, "content": "<s>"}, {"id": tok_ids - 1, "content": "</s>"}]
        (d / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab_map}, "added_tokens": added}))
    return d


def test_the_smaller_of_model_and_tokenizer_file(tmp_path):
    b = _bench()
    assert b.prompt_vocab(str(_model(tmp_path / "big", 128256, 300)), None) == (300, "config.json vocab_size and tokenizer.json ids")
    assert b.prompt_vocab(str(_model(tmp_path / "vl", 2048, None, nested=True)), None)[0] == 2048
    tok = _model(tmp_path / "tok", None, 100)
    assert b.prompt_vocab(str(_model(tmp_path / "m", 5000, None)), str(tok))[0] == 100


def test_no_files_leaves_it_to_the_engine(tmp_path):
    assert _bench().prompt_vocab(str(tmp_path / "absent"), None) == (None, "")


def test_the_shipped_tiny_model_keeps_its_range():
    # The CPU studies' prompts were drawn below 2048 on both legs (their prompts_sha256 agree);
    # the file-based range must give the same, so those prompts stay what they were.
    d = ROOT / ".cache/models/tiny-llama-v1"
    if not (d / "config.json").exists():
        pytest.skip("the tiny model is not built here (harness tiny-model)")
    assert _bench().prompt_vocab(str(d), None)[0] == 2048
