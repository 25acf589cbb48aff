"""Multimodal input shape: a shape, size or broadcast error raised while a multimodal model parses,
processes or merges its inputs (`_process_*_input`, `_parse_and_validate_*_input`, the processors,
the embedding merge)."""

from harness.analyze.structure import rule

RULE = rule(
    "multimodal-input-shape", "input-shape",
    "a multimodal input's shape does not fit what the model's input processing expects",
    "make the workload's inputs match the model's processor (size, frames, length)",
    exception=r"^(?:\w+\.)*(?:RuntimeError|ValueError|AssertionError|IndexError)\b.*"
              r"(?:shape|size|broadcast|[Dd]imension|do not match|does not match|must match|mismatch"
              r"|multimodal tokens to \d+ placeholders)",
    frames=r"_process_\w*_input|_parse_and_validate_\w*_input|multimodal_embeddings|/multimodal/"
           r"|_call_hf_processor|processing_\w+\.py|feature_extraction_\w+\.py|image_processing_\w+\.py",
)
