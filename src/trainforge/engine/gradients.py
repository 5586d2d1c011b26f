"""The gradients of an accumulation window, made into the optimizer step's gradients.

It owns the one division of the summed gradients by the window's item count (over every
rank under torch.distributed), clipping and the gradient norm the non-finite guard reads.
Micro-batch losses were weighted by their item counts on the way in, so a window of any
shape gives the update of one batch holding the same samples.

Clipping folds into the optimizer where it can (`folds_clipping`): torch's fused Adam, AdamW,
SGD and Adagrad divide every gradient by their `grad_scale` tensor as they read it (the hook
`torch.amp.GradScaler` uses), so the clip becomes that divisor and the separate pass that
multiplies every gradient by the clip coefficient is gone. The update is the clipped one up
to rounding (`g / (1 / c)` for `g * c`); the norm, what is clipped and when are unchanged.

Library considered: torch's `clip_grad_norm_` and `get_total_norm` (foreach) do the
clipping and the norm; only the weighting by a global item count, which DDP's mean over
ranks does not know, and the fold into the fused kernel are written here.
"""

from __future__ import annotations

from typing import Any

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
    fold_into: torch.optim.Optimizer | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scale the summed gradients of `params` to the window's mean and clip them to
    `max_grad_norm`; (the step's mean loss, the gradient norm: from clipping, or computed
    when `want_norm`, else None). `mean_backward`: the window was one micro-batch on one
    process whose mean loss went backward, so the gradients are already the mean.
    `fold_into`: an optimizer that `folds_clipping`, whose next step applies the clip."""
    if mean_backward:  # one micro-batch on one process: nothing to weight or reduce
        return sums.loss_sum, _clip(params, max_grad_norm, want_norm, sharded, fold_into)  # type: ignore[return-value]
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
    return loss_sum / weight, _clip(params, max_grad_norm, want_norm, sharded, fold_into)


def folds_clipping(optimizer: Any, sharded: bool, max_grad_norm: float | None) -> bool:
    """Whether the clip to `max_grad_norm` can be left to `optimizer` (module doc): there is
    a clip, the optimizer is a torch one whose fused kernel reads `grad_scale`, and the
    gradients are plain (not FSDP-sharded)."""
    supported = bool(getattr(optimizer, "_step_supports_amp_scaling", False))
    return max_grad_norm is not None and supported and not sharded


def _clip(
    params: list[nn.Parameter], max_grad_norm: float | None, want_norm: bool, sharded: bool,
    fold_into: torch.optim.Optimizer | None = None,
) -> torch.Tensor | None:  # fmt: skip
    """Clip to `max_grad_norm`; the gradient norm (from clipping, or computed when
    `want_norm`), else None. With `fold_into` (given only with a clip, `folds_clipping`),
    the clip is that optimizer's `grad_scale`: torch's `clip_grad_norm_` multiplies by
    `max_norm / (norm + 1e-6)` where that is below 1, so the fused kernel divides by its
    inverse, at least 1."""
    norm = None
    if fold_into is not None and max_grad_norm is not None:
        grads = [p.grad for p in params if p.grad is not None]
        norm = nn.utils.get_total_norm(grads, foreach=True)
        scale = torch.clamp((norm + 1e-6) / max_grad_norm, min=1.0)
        fold_into.grad_scale = scale.float()  # type: ignore[attr-defined]  # fp32 for the kernels
        return norm
    if max_grad_norm is not None:
        norm = nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=True)
    elif want_norm:
        grads = [p.grad for p in params if p.grad is not None]
        norm = nn.utils.get_total_norm(grads, foreach=True) if grads else None
    if sharded and norm is not None and hasattr(norm, "full_tensor"):  # a DTensor
        norm = norm.full_tensor()
    return norm
