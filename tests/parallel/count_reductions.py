"""A torchrun worker for tests/parallel/test_ddp.py: `trainforge train ARGS`, unchanged,
with DDP's gradient reductions counted.

Every DistributedDataParallel the trainer builds gets a comm hook that counts each
gradient bucket it all-reduces (then does DDP's own averaging all-reduce), tagged with the
training forward pass (micro-batch) it belongs to; an optimizer step hook counts steps. At
exit each rank writes {"micro_batches", "reduced_in", "optimizer_steps"} as JSON to
$COUNT_DIR/rank-RANK.json. Usage: torchrun ... count_reductions.py train CONFIG --set ...
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.parallel
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.optim.optimizer import register_optimizer_step_post_hook

COUNTS = {"micro_batches": 0, "reduced_in": [], "optimizer_steps": 0}


def counting_hook(state, bucket):
    COUNTS["reduced_in"].append(COUNTS["micro_batches"])  # the micro-batch being reduced
    return allreduce_hook(state, bucket)


class CountingDDP(torch.nn.parallel.DistributedDataParallel):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.register_comm_hook(None, counting_hook)

    def forward(self, *args, **kwargs):
        if self.training:
            COUNTS["micro_batches"] += 1
        return super().forward(*args, **kwargs)


def count_step(optimizer, args, kwargs) -> None:
    COUNTS["optimizer_steps"] += 1


def main() -> None:
    # The trainer imports DistributedDataParallel from torch.nn.parallel when it wraps.
    torch.nn.parallel.DistributedDataParallel = CountingDDP
    register_optimizer_step_post_hook(count_step)
    sys.argv = ["trainforge", *sys.argv[1:]]
    try:
        from trainforge.cli import main as trainforge_main

        trainforge_main()
    finally:
        out = Path(os.environ["COUNT_DIR"]) / f"rank-{os.environ['RANK']}.json"
        out.write_text(json.dumps(COUNTS))


if __name__ == "__main__":
    main()
