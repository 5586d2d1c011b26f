"""Mixed precision: resolve `auto|fp32|fp16|bf16` for a device; autocast and loss scaling.

fp16 on CUDA uses a GradScaler (its state is checkpointed); bf16 needs none; CPU runs fp32
under `auto` because CPU autocast rarely pays off for training. `PrecisionPlan` is what a
run does with the config's `training.precision` (a `Literal` in the schema) on its device.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
_FP32 = contextlib.nullcontext()


def resolve_precision(requested: str, device: torch.device) -> str:
    if requested != "auto":
        return requested
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "fp32"


@dataclass
class PrecisionPlan:
    """The resolved precision of a run on its device: its autocast and its loss scaler."""

    name: str
    device: torch.device
    scaler: torch.amp.GradScaler | None

    @classmethod
    def create(cls, requested: str, device: torch.device) -> PrecisionPlan:
        name = resolve_precision(requested, device)
        scaler = torch.amp.GradScaler("cuda") if name == "fp16" and device.type == "cuda" else None
        return cls(name=name, device=device, scaler=scaler)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.name == "fp32":
            return _FP32
        return torch.autocast(device_type=self.device.type, dtype=DTYPES[self.name])
