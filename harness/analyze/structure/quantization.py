"""Quantisation kernels: an error raised in a quantisation method or its kernels (Marlin, GPTQ, AWQ,
FP8 repacking) while weights are prepared or applied: the kernel refuses the checkpoint's layout
(a dimension it cannot tile, a dtype it does not take) on this GPU or tensor-parallel split."""

from harness.analyze.structure import rule

RULE = rule(
    "quantization-kernel", "quantization-refused",
    "a quantisation kernel refuses the checkpoint's weights on this GPU or split",
    "another tp size, quantisation backend or checkpoint; check the kernel's size and dtype limits",
    exception=r"^(?:\w+\.)*(?:RuntimeError|ValueError|AssertionError|NotImplementedError)\b",
    frames=r"/layers/quantization/|marlin|_custom_ops\.py:\w*(?:gptq|awq|marlin|fp8|cutlass)",
    depth=3,
)
