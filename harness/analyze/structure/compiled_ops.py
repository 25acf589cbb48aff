"""Compiled ops missing: a NameError or AttributeError raised in `vllm/_custom_ops.py` itself, the
thin layer over the compiled `_C` ops. When the compiled module did not load (a build for another
device, such as a CPU build without the ops, or a binary for another torch), the Python side still
imports and fails only where it first calls an op."""

from harness.analyze.structure import rule

RULE = rule(
    "compiled-ops-missing", "dependency-abi",
    "vLLM's compiled ops did not load: the Python side calls an op module that is not there",
    "reinstall or rebuild vLLM for this device and torch (its compiled _C must import)",
    exception=r"^(?:\w+\.)*(?:NameError|AttributeError)\b",
    frames=r"/_custom_ops\.py:",
    depth=1,
)
