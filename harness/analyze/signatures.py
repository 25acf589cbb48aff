"""The catalogue of failure signatures: one `_sig(...)` entry per recurring cause of a failed vLLM run.

Each signature is a regular expression over one line of a failed run's text, the root cause it
stands for, its class (the fixed vocabulary `FAILURE_CLASSES` of harness.schema.record), whether it is
fixable and how, and for a dependency problem the `harness search window` command that would test it. The
order matters: within a line, the first signature that matches decides. How lines are read and which
line decides is harness.analyze.failure's business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from harness.schema.record import FAILURE_CLASSES, FailureClass

Fixable = Literal["yes", "no", "unknown"]


@dataclass(frozen=True, kw_only=True)
class Signature:
    id: str
    klass: FailureClass
    pattern: re.Pattern[str]
    root_cause: str
    error: str                 # how the table states the error; {name} takes the pattern's named groups
    fixable: Fixable
    fix: str
    # A run that passes with a pin of this distribution was recovered by this signature's fix.
    fix_distribution: str | None = None
    # `harness search window …` that would test the fix; {name} takes the pattern's named groups.
    window: str | None = None
    # Must match within the few lines before the matching one (the same traceback), e.g. the frame
    # that makes a bare KeyError a config lookup.
    context: re.Pattern[str] | None = None
    weak: bool = False         # decides only when no strong signature matches anywhere


def _sig(id: str, klass: FailureClass, pattern: str, root_cause: str, error: str, fixable: Fixable, fix: str,
         fix_distribution: str | None = None, *, window: str | None = None, context: str | None = None,
         weak: bool = False) -> Signature:
    return Signature(id=id, klass=klass, pattern=re.compile(pattern), root_cause=root_cause, error=error,
                     fixable=fixable, fix=fix, fix_distribution=fix_distribution, window=window,
                     context=re.compile(context) if context else None, weak=weak)


# Order matters only within one line: a line that names two causes is the earlier entry's. The
# study's ids (config-model-type … timeout) keep their meaning: records, tables and reports use them.
CATALOGUE: tuple[Signature, ...] = (
    # --- the model's architecture or config ---
    _sig("config-model-type", "config-unparseable",
         # transformers' own words, and the shorter form a report quotes them in
         r"model type `?(?P<model_type>[\w.-]+)`? (?:but Transformers does not recognize this architecture"
         r"|not recognized)",
         "config not parseable by this leg's transformers",
         "pydantic `ValidationError` while constructing `ModelConfig`: model type {model_type} not recognized",
         "no", "not by a pin unless the leg's declared transformers range admits a release that knows the "
               "model type"),
    _sig("config-class-unrecognized", "config-unparseable",
         r"Unrecognized configuration class <class '(?P<config_class>[\w.]+)'>",
         "the config class is unknown to this leg's transformers auto classes",
         "`Unrecognized configuration class` {config_class}",
         "no", "a transformers release that maps the config class, within the leg's declared range"),
    _sig("config-mapping-keyerror", "config-unparseable",
         r"^KeyError: '(?P<model_type>[\w.-]+)'$",
         "the checkpoint's model_type is missing from transformers' CONFIG_MAPPING",
         "`KeyError` {model_type} in transformers' `CONFIG_MAPPING`",
         "no", "a transformers release that knows the model type", context=r"CONFIG_MAPPING|configuration_auto\.py"),
    _sig("arch-not-supported", "unsupported-architecture",
         r"Model architectures? \[(?P<architecture>[^\]]{0,200}?)\] (?:are|is) not supported",
         "the model's architecture is not in this vLLM's model registry",
         "`Model architectures [{architecture}] are not supported`",
         "no", "a vLLM release that registers the architecture (or a model-registry plugin)"),
    _sig("registry-inspect-failed", "unsupported-architecture",
         r"Error in inspecting model architecture '(?P<architecture>[\w.]+)'",
         "vLLM's model registry could not inspect the architecture (its model module failed to import)",
         "`Error in inspecting model architecture` {architecture}",
         "unknown", "read the registry subprocess's own error; often a broken compiled extension"),
    # --- transformers API drift ---
    _sig("transformers-per-layer-attribute", "transformers-api-drift",
         r"AmbiguousGlobalPerLayerAttributeError(?::\s*'(?P<attribute>\w+)')?",
         "transformers' per-layer attribute access, which this vLLM does not follow",
         "`AmbiguousGlobalPerLayerAttributeError`: a per-layer config attribute read as a global one",
         "yes", "pin `transformers==5.14.1`", "transformers"),
    _sig("transformers-config-attribute", "transformers-api-drift",
         r"'(?P<config_class>\w*Config)' object has no attribute '(?P<attribute>\w+)'",
         "a config attribute vLLM or the model code reads is absent (removed or renamed in transformers)",
         "`AttributeError`: `{config_class}` has no attribute {attribute}",
         "yes", "a transformers release that still has the attribute, or a vLLM that reads the new name",
         "transformers"),
    _sig("transformers-import-name", "transformers-api-drift",
         r"cannot import name '(?P<name>\w+)' from '(?P<module>transformers[\w.]*)'",
         "a name imported from transformers was removed or moved",
         "`ImportError: cannot import name` {name} from {module}",
         "yes", "a transformers release that still exports the name", "transformers",
         window='harness search window transformers --probe "from {module} import {name}"'),
    # --- compiled extensions ---
    _sig("undefined-symbol", "dependency-abi",
         r"(?P<so>[^\s'\"(]+\.so)[^\n]{0,40}?(?:undefined symbol|Symbol not found)|undefined symbol:|Symbol not found:",
         "a compiled extension does not match the library it is loaded against (ABI)",
         "`undefined symbol` in a compiled extension",
         "yes", "rebuild the extension against the installed torch, or pin the torch it was built for", "torch",
         window='harness search window torch --probe "import {module}"'),
    _sig("missing-compiled-op", "dependency-abi",
         r"'_OpNamespace' '(?P<namespace>\w+)' object has no attribute '(?P<op>\w+)'",
         "a compiled op namespace lacks an op the Python side calls (binary from another build)",
         "`_OpNamespace` {namespace} has no op {op}",
         "yes", "install the matching binary build (same vLLM commit for its Python and compiled parts)"),
    _sig("extension-import-error", "dependency-abi",
         r"ImportError: (?:\S*/)?(?P<so>[\w.-]+\.so)\b",
         "a compiled extension failed to load",
         "`ImportError` of a compiled extension",
         "yes", "rebuild or reinstall the extension for the installed stack"),
    # --- dependency version windows ---
    _sig("cutlass-thrmma", "dependency-window",
         r"module 'cutlass\.cute\.core' has no attribute 'ThrMma'",
         "cutlass `ThrMma` relocation (nvidia-cutlass-dsl >= 4.6.0 moved it out of `cute.core`)",
         "`AttributeError: module 'cutlass.cute.core' has no attribute 'ThrMma'`",
         "yes", "pin `nvidia-cutlass-dsl==4.5.3`", "nvidia-cutlass-dsl",
         window='harness search window nvidia-cutlass-dsl --probe "import cutlass.cute.core as c; c.ThrMma"'),
    _sig("flashinfer-ipcsocket", "distributed-init",
         r"module 'flashinfer\.comm\.mnnvl' has no attribute 'IpcSocket'",
         "flashinfer `IpcSocket` missing from `flashinfer.comm.mnnvl` (tp > 1)",
         "`AttributeError: module 'flashinfer.comm.mnnvl' has no attribute 'IpcSocket'`",
         "yes", "guard the `IpcSocket` access in the bench worker",
         window='harness search window flashinfer-python --probe "import flashinfer.comm.mnnvl as m; m.IpcSocket"'),
    _sig("flashinfer-missing-attribute", "dependency-window",
         r"module '(?P<module>flashinfer[\w.]*)' has no attribute '(?P<attribute>\w+)'",
         "flashinfer lacks a name this vLLM calls: its version is outside the window this vLLM works with",
         "`AttributeError`: {module} has no attribute {attribute}",
         "yes", "pin the flashinfer release this vLLM was built against", "flashinfer-python",
         window='harness search window flashinfer-python --probe "import {module} as m; m.{attribute}"'),
    _sig("package-version-mismatch", "dependency-window",
         r"(?P<package>[\w.-]+) version \((?P<have>[^)]+)\) does not match (?P<other>[\w.-]+) version \((?P<want>[^)]+)\)",
         "two packages that must be released together are installed at different versions",
         "{package} version does not match {other}",
         "yes", "install both at the same version",
         window='harness search window {package} --release {want} --probe "import {other_module}"'),
    _sig("requires-but-you-have", "dependency-window",
         r"(?P<dependent>[\w.-]+) [\w.+-]+ requires (?P<package>[\w.-]+)[^,]*(?:,[^,]*)*?, but you have "
         r"(?P=package) (?P<have>[\w.+-]+) which is incompatible",
         "an installed version is outside the range a package declares",
         "{dependent} requires {package} in another range than the installed {have}",
         "yes", "install a release inside the declared range",
         window='harness search window {package} --probe "import {package_module}"'),
    # --- build steps ---
    _sig("ninja-build-failed", "jit-build",
         r"ninja: build stopped|Command '\['ninja'[^\]]*\]' returned non-zero|Error building extension",
         "a ninja build (JIT kernel or source build) failed",
         "`ninja: build stopped: subcommand failed`",
         "unknown", "read the compiler error above it; check CUDA_HOME, the compiler and TORCH_CUDA_ARCH_LIST"),
    _sig("nvcc-failed", "jit-build",
         r"\S*nvcc(?: --| -)[\w-]|nvcc fatal|nvcc error",
         "an nvcc compile step (JIT kernel build) failed",
         "`nvcc` compile step failed",
         "unknown", "check CUDA_HOME and the nvcc on PATH; clear the kernel cache"),
    # --- memory ---
    _sig("cuda-oom", "out-of-memory",
         r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError: CUDA|CUBLAS_STATUS_ALLOC_FAILED",
         "CUDA out of memory",
         "`torch.OutOfMemoryError: CUDA out of memory`",
         "yes", "lower gpu_memory_utilization / max_model_len or raise tp"),
    _sig("no-cache-blocks", "out-of-memory",
         r"No available memory for the cache blocks|Available KV cache memory: -\d"
         r"|Insufficient memory for KV cache|not enough KV cache",
         "no memory left for the KV cache after the model was loaded",
         "`No available memory for the cache blocks` / negative `Available KV cache memory`",
         "yes", "raise gpu_memory_utilization, lower max_model_len or raise tp"),
    _sig("kv-cache-too-small", "out-of-memory",
         r"larger than the maximum number of tokens that can be stored in KV cache"
         r"|KV cache is needed, which is larger than the available KV cache memory"
         r"|available_size\(\)=[\d.]+ < need_size=[\d.]+",
         "the KV cache cannot hold what the run needs",
         "KV cache smaller than the model's max length needs",
         "yes", "lower max_model_len or max_num_seqs, or give the KV cache more memory"),
    _sig("cpu-memory-utilization", "out-of-memory",
         r"Available memory on node \S+ .*?is less than desired CPU memory utilization",
         "CPU backend: free host memory below the requested share (`--gpu-memory-utilization`)",
         "`Available memory on node ... is less than desired CPU memory utilization`",
         "yes", "lower `gpu_memory_utilization` or free host memory"),
    # --- distributed ---
    _sig("nccl-watchdog", "distributed-init",
         r"Watchdog caught collective operation timeout",
         "an NCCL collective never completed (NCCL watchdog)",
         "`Watchdog caught collective operation timeout`",
         "unknown", "check the interconnect (NCCL_P2P_DISABLE, NCCL_DEBUG=INFO), tp size and driver"),
    _sig("nccl-error", "distributed-init",
         r"NCCL error|ncclCommInitRank failed|nccl(?:Internal|UnhandledCuda|System|Invalid)\w*Error",
         "NCCL communicator setup or a collective failed",
         "`NCCL error`",
         "unknown", "run with NCCL_DEBUG=INFO; check the GPUs' peer access and the NCCL version"),
    _sig("torch-distributed-init", "distributed-init",
         r"DistStoreError|DistNetworkError|The server socket has failed to listen|TCPStore\w* .*(?:failed|timed out)"
         r"|Default process group has not been initialized",
         "torch.distributed's process group could not be set up",
         "`torch.distributed` init failed",
         "unknown", "check the master address/port and that no stale process holds it"),
    # --- inputs ---
    _sig("whisper-inconsistent-shapes", "input-shape",
         r"input_features(?:\[[^\]]*\])? contains inconsistent shapes",
         "audio longer than Whisper's 30 s window is not truncated to 3000 mel frames",
         "`input_features contains inconsistent shapes`",
         "yes", "clamp audio to 30 s in the workload"),
    _sig("mm-input-shape", "input-shape",
         r"(?:pixel[ _]values|image_embeds|image_grid_thw|video|audio|input_features)\S* (?:dim\[\d+\] expected"
         r"|should be \d+D|should have shape|has shape .* expected|contains inconsistent shapes)"
         r"|TensorSchema.*(?:mismatch|expected)|(?:Expected|expected) shape .* (?:but )?got",
         "a multimodal input's tensor shape or schema was rejected",
         "multimodal input shape rejected",
         "yes", "make the workload's inputs match the model's processor (size, frames, dims)"),
    # --- quantization ---
    _sig("moe-quant-scheme-refused", "quantization-refused",
         r"does not support quantization scheme",
         "the forced MoE backend does not support the model's quantization scheme (a legitimate refusal)",
         "backend refuses the quantization scheme",
         "no", "choose a backend that supports the scheme"),
    _sig("quant-gpu-capability", "quantization-refused",
         r"quantization method (?P<method>\w+) is not supported for the current GPU",
         "the GPU is below the quantization method's minimum compute capability",
         "`The quantization method {method} is not supported for the current GPU`",
         "no", "a GPU with the required capability, or a checkpoint in another scheme"),
    _sig("quant-unsupported", "quantization-refused",
         r"Unknown quantization method|quantization (?:method|scheme) \S+ is not supported"
         r"|does not support (?:the )?quantization",
         "this backend does not support the checkpoint's quantization",
         "quantization not supported by this backend",
         "no", "a backend or release that supports the scheme"),
    # --- waits ---
    _sig("engine-timeout", "timeout",
         r"^(?:\w+\.)*TimeoutError(?::.*)?$|Timed out waiting for engine|ENGINE_ITERATION_TIMEOUT",
         "a vLLM-level wait ran out (engine startup or an engine iteration)",
         "`TimeoutError`",
         "unknown", "raise vLLM's timeout (VLLM_ENGINE_ITERATION_TIMEOUT_S) or find what hangs"),
    _sig("timeout", "timeout",
         r"^timed out after \d+",
         "the run exceeded its timeout",
         "timed out",
         "unknown", "raise the timeout, or find what hangs", weak=True),
    # --- signals ---
    _sig("killed", "killed",
         r"^Killed$|killed by signal (?P<signal>9|15)\b|Killed process \d+|oom-kill|died, exit code: -9\b",
         "the process was killed by a signal (often the host's OOM killer)",
         "killed by a signal",
         "unknown", "check the host's memory (dmesg: oom-kill) and the run's limits", weak=True),
    _sig("signal", "killed",
         r"killed by signal (?P<signal>\d+)",
         "the process ended on a signal",
         "killed by signal {signal}",
         "unknown", "look for a crash (core dump, dmesg) or an outside kill", weak=True),
)

UNKNOWN = "unknown"
_BY_ID = {s.id: s for s in CATALOGUE}
assert all(s.klass in FAILURE_CLASSES for s in CATALOGUE)


def signature(sig_id: str) -> Signature | None:
    return _BY_ID.get(sig_id)


def failure_class(sig_id: str | None) -> str:
    """The class of a signature id ("unknown" for unknown or missing ids)."""
    sig = _BY_ID.get(sig_id or "")
    return sig.klass if sig else UNKNOWN
