"""vllm-harness: serial, isolated, recorded benchmark sweeps of vLLM runtime stacks."""

__version__ = "0.1.0"
