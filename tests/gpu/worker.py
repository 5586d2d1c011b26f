"""Runs `trainforge ARGS` after process-wide CUDA settings a test needs first.

    python worker.py [--deterministic] [--memory-fraction F] [--fsdp-one-rank] -- ARGS

--deterministic: `torch.use_deterministic_algorithms(True)` (cuBLAS needs
  CUBLAS_WORKSPACE_CONFIG, which the caller sets), as a bitwise comparison on a GPU needs.
--memory-fraction F: the caching allocator refuses past F of the device memory, so a batch
  that does not fit raises a real CUDA out-of-memory error.
--fsdp-one-rank: a real one-rank NCCL process group that the run treats as distributed, so
  `hardware.data_parallel=fsdp` shards with FSDP2 `fully_shard` and checkpoints through
  torch.distributed.checkpoint on one GPU (a single process never joins a group otherwise).
"""

from __future__ import annotations

import os
import runpy
import socket
import sys


def one_rank_fsdp() -> None:
    import torch
    import torch.distributed as dist

    from trainforge import parallel

    class OneRank(parallel.DistContext):
        @property
        def enabled(self) -> bool:
            return True

    def setup(backend_option: str, device_type: str, timeout_s: float = 600.0):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        torch.cuda.set_device(0)
        dist.init_process_group(backend=parallel.group_backend("nccl"), rank=0, world_size=1)
        parallel._CONTEXT = OneRank(0, 1, 0, "nccl")
        parallel._CONTROL = dist.new_group(backend="gloo")
        return parallel._CONTEXT

    parallel.setup = setup


def main() -> None:
    split = sys.argv.index("--")
    options, args = sys.argv[1:split], sys.argv[split + 1 :]
    import torch

    if "--deterministic" in options:
        torch.use_deterministic_algorithms(True)
    if "--memory-fraction" in options:
        fraction = float(options[options.index("--memory-fraction") + 1])
        torch.cuda.set_per_process_memory_fraction(fraction, 0)
    if "--fsdp-one-rank" in options:
        one_rank_fsdp()
    sys.argv = ["trainforge", *args]
    runpy.run_module("trainforge", run_name="__main__")


if __name__ == "__main__":
    main()
