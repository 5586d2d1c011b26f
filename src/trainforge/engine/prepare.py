"""Model preparation: everything done to a task's model before the first step.

It owns the order of the steps and the one place each is done: the device, cuDNN's
benchmark mode, channels-last weights, gradient checkpointing, the data-parallel wrapping
(FSDP2 `fully_shard` per block of every ModuleList then the whole model, or DDP) and
`torch.compile`. The trainer calls `prepare_model`; the batch probe calls it with
`wrap=False` (one process, no compile) to get the same model the run trains.

Library considered: accelerate's `Accelerator.prepare` does the device, DDP/FSDP and
compile steps, but it also owns the loaders, the optimizer and mixed precision, which the
trainer keeps (exact resume depends on their exact order), and it brings its own config.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from trainforge import parallel

if TYPE_CHECKING:
    from trainforge.config.schema import RunConfig


@dataclass
class PreparedModel:
    model: nn.Module  # the model itself, on the device (sharded in place under FSDP)
    forward: nn.Module  # what the loop calls: the model, or DDP and/or compile around it
    sharded: bool  # FSDP: parameters are DTensor shards

    def no_sync(self, skip_reduce: bool) -> Any:
        """DDP/FSDP: a context in which backward does not reduce gradients across ranks
        when `skip_reduce` (reduce once per optimizer step, not once per micro-batch)."""
        if self.sharded:
            self.model.set_requires_gradient_sync(not skip_reduce)
            return contextlib.nullcontext()
        if not skip_reduce:  # the micro-batch that closes a window reduces as usual
            return contextlib.nullcontext()
        from torch.nn.parallel import DistributedDataParallel

        ddp = getattr(self.forward, "_orig_mod", self.forward)  # under torch.compile
        return (
            ddp.no_sync() if isinstance(ddp, DistributedDataParallel) else contextlib.nullcontext()
        )


def prepare_model(
    model: nn.Module, config: RunConfig, device: torch.device, *, wrap: bool = True
) -> PreparedModel:
    """`model` ready to train under `config.training` on `device`. `wrap`: also shard or
    wrap it for data parallelism (`hardware.data_parallel`, when torch.distributed runs)
    and compile it (`training.compile`)."""
    t = config.training
    model = model.to(device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = t.cudnn_benchmark
        # fp32 means IEEE fp32 on every device: cuDNN would run fp32 convolutions (the ViT's
        # patch embedding) in TF32 by default on Ampere and newer, a 10-bit mantissa that
        # changes what the run computes. Half-precision runs are unaffected.
        torch.backends.cudnn.allow_tf32 = False
    if t.channels_last:  # 4-D weights (convolutions) only; inputs follow in the task
        model = model.to(memory_format=torch.channels_last)
    if t.gradient_checkpointing:  # a ViT of ours or a Hugging Face model
        from trainforge.models.hf import enable_checkpointing

        enable_checkpointing(model)
    if not wrap:
        return PreparedModel(model, model, sharded=False)
    dist = parallel.context()
    sharded = dist.enabled and config.hardware.data_parallel == "fsdp"
    wrapped: nn.Module = model
    if sharded:
        from torch.distributed.fsdp import fully_shard

        # One FSDP unit per block of every ModuleList (transformer layers), then the rest.
        for module in list(model.modules()):
            if isinstance(module, nn.ModuleList):
                for block in module:
                    fully_shard(block)
        fully_shard(model)
    elif dist.enabled:
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        wrapped = DistributedDataParallel(model, device_ids=ids)
    forward = torch.compile(wrapped) if t.compile else wrapped
    return PreparedModel(model, forward, sharded)
