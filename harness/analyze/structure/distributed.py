"""Distributed start-up: a traceback whose innermost frames are torch.distributed, NCCL or vLLM's
process-group setup (`GroupCoordinator`, pynccl, the custom all-reduce). Read even when the
exception line is cut: the frames alone say where the process died."""

from harness.analyze.structure import rule

RULE = rule(
    "distributed-startup", "distributed-init",
    "process-group or communicator setup failed (torch.distributed / NCCL frames)",
    "run with NCCL_DEBUG=INFO; check peer access between the GPUs, the NCCL version and the master port",
    frames=r"torch/distributed/|/distributed/parallel_state\.py:(?:__init__|init_\w+|initialize_\w+|ensure_\w+)"
           r"|GroupCoordinator|pynccl|/device_communicators/|ncclCommInitRank|init_process_group",
    depth=4, cut=True,
)
