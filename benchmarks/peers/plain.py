"""The reference: a hand-written PyTorch loop doing exactly the work and nothing else."""

from __future__ import annotations

import torch
from torch import nn

from peers.workload import SideResult, Workload, build_optimizer, finish, loss_fn, measured


def run_plain(w: Workload, fused: bool | None = None) -> SideResult:
    """Train `w` in a plain loop; `fused` overrides the AdamW implementation."""
    model = w.prepare_model()
    optimizer, scheduler = build_optimizer(model, w, fused)
    params = [p for p in model.parameters() if p.requires_grad]
    forward = torch.compile(model) if w.compile else model
    loader = w.loader()
    non_blocking = w.device.type == "cuda"
    model.train()
    with measured(w) as (clock, memory):
        clock.attach(optimizer)
        while clock.steps < w.total_steps:
            for images, labels in loader:
                images = images.to(w.device, non_blocking=non_blocking)
                labels = labels.to(w.device, non_blocking=non_blocking)
                with w.autocast():
                    loss = loss_fn(forward(images), labels)
                loss.backward()
                nn.utils.clip_grad_norm_(params, w.max_grad_norm, foreach=True)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                if clock.steps >= w.total_steps:
                    break
    return finish(w, model, clock, memory)
