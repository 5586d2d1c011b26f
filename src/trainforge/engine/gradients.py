"""The gradients of an accumulation window, made into the optimizer step's gradients.

It owns the one division of the summed gradients by the window's item count (over every
rank under torch.distributed), clipping and the gradient norm the non-finite guard reads.
Micro-batch losses were weighted by their item counts on the way in, so a window of any
shape gives the update of one batch holding the same samples.

Library considered: torch's `clip_grad_norm_` and `get_total_norm` (foreach) do the
clipping and the norm; only the weighting by a global item count, which DDP's mean over
ranks does not know, is written here.
"""

from __future__ import annotations

import torch
from torch import nn

from trainforge import parallel
from trainforge.engine.meters import AccumulationSums


def finish_gradients(
    params: list[nn.Parameter],
    sums: AccumulationSums,
    *,
    mean_backward: bool,
    sharded: bool,
    max_grad_norm: float | None,
    want_norm: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scale the summed gradients of `params` to the window's mean and clip them to
    `max_grad_norm`; (the step's mean loss, the gradient norm: from clipping, or computed
    when `want_norm`, else None). `mean_backward`: the window was one micro-batch on one
    process whose mean loss went backward, so the gradients are already the mean."""
    if mean_backward:  # one micro-batch on one process: nothing to weight or reduce
        return sums.loss_sum, _clip(params, max_grad_norm, want_norm, sharded)  # type: ignore[return-value]
    grads = [p.grad for p in params if p.grad is not None]
    loss_sum = sums.loss_sum
    if not isinstance(loss_sum, torch.Tensor):
        loss_sum = torch.tensor(float(loss_sum), device=sums.device)
    dist = parallel.context()
    if dist.enabled:
        # DDP averaged the summed gradients over ranks; weight by the global item count.
        totals = torch.stack([loss_sum.reshape(()), loss_sum.new_tensor(float(sums.weight))])
        parallel.all_reduce_sum(totals)
        loss_sum, weight = totals[0], totals[1]
        if grads and sharded:  # DTensor gradients take a plain number
            torch._foreach_mul_(grads, float(dist.world_size / weight))
        elif grads:
            torch._foreach_mul_(grads, dist.world_size / weight)
    else:
        weight = max(1, sums.weight)
        if grads:
            torch._foreach_mul_(grads, 1.0 / weight)
    return loss_sum / weight, _clip(params, max_grad_norm, want_norm, sharded)


def _clip(
    params: list[nn.Parameter], max_grad_norm: float | None, want_norm: bool, sharded: bool
) -> torch.Tensor | None:
    """Clip to `max_grad_norm`; the gradient norm (from clipping, or computed when
    `want_norm`), else None."""
    norm = None
    if max_grad_norm is not None:
        norm = nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=True)
    elif want_norm:
        grads = [p.grad for p in params if p.grad is not None]
        norm = nn.utils.get_total_norm(grads, foreach=True) if grads else None
    if sharded and norm is not None and hasattr(norm, "full_tensor"):  # a DTensor
        norm = norm.full_tensor()
    return norm
