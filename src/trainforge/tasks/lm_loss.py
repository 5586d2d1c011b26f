"""Next-token cross-entropy and accuracy of a causal LM without its `[B, T, V]` logits.

This module owns the language-model loss math and the one piece of model plumbing it needs:

- `target_rows` keeps only the positions whose next token is a target (label != -100): the
  prompt tokens of a completion-only batch, and its padding, need no logits at all.
- `linear_cross_entropy` applies the output head to those rows a chunk at a time (about
  `CHUNK_ELEMENTS` fp32 logits at once, whatever the vocabulary) and returns the summed loss
  and the number of rows whose argmax is the target. With gradients it computes them in the
  same pass, chunk by chunk (the gradient of the hidden rows, and an fp32 accumulator the
  size of the head weight), and its backward only scales them by the incoming gradient: no
  logits are kept for backward and none are computed twice. Gemma-2-style
  `final_logit_softcapping` (cap * tanh(z / cap)) is applied per chunk, and its derivative
  in the gradient.
- `capture_head` gets the hidden states a model's head would see without running the head:
  for the duration of one forward, the head module (`get_output_embeddings()`, tied weights
  included) returns its input and records it with its own weight. The Parameter objects
  and module tree are never replaced, so state_dict keys, tying, peft, `save_pretrained`,
  export and `generate()` (outside the context) see the model unchanged, and the forward
  still goes through whatever wraps the model (peft, DDP, FSDP2, torch.compile). The weight
  is read inside the forward, where FSDP2 has it unsharded.

The numbers equal `F.cross_entropy(logits.float(), reduction="sum")` over the full logits
to float rounding: each chunk's logits are computed in the autocast dtype of the plain path
(or the input's dtype) and then cast to fp32, as the plain path's `.float()` does.

Libraries considered: TRL's chunked loss (TRL PRs #5575/#5846) lives inside its trainer's
`compute_loss` and needs a TRL trainer; Liger Kernel's fused linear cross-entropy and Apple's
Cut Cross-Entropy (`cut-cross-entropy`) are Triton/CUDA kernels with no CPU path, and this
loss must run the same on a laptop CPU, a Jetson and a CUDA workstation. This is the same
idea as Liger's (gradients in the forward pass, chunked over rows) in plain torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

IGNORE = -100
# fp32 logits of one chunk (64 MiB); softmax and its gradient hold two more of that size.
CHUNK_ELEMENTS = 1 << 24


def chunk_rows(vocab_size: int, chunk_elements: int | None = None) -> int:
    """Rows of logits per chunk: `chunk_elements` (default `CHUNK_ELEMENTS`) logits, at
    least one row."""
    return max(1, (chunk_elements or CHUNK_ELEMENTS) // max(1, vocab_size))


def target_rows(states: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """(rows of `states[:, :-1]` whose next label is a target, those targets): `states` is
    `[B, T, *]` hidden states or logits, `labels` `[B, T]` with -100 where nothing is
    predicted."""
    targets = labels[:, 1:]
    keep = targets != IGNORE
    return states[:, :-1][keep], targets[keep]


def full_cross_entropy(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """(summed fp32 cross-entropy, correct argmax count) of materialised `[N, V]` logits."""
    loss = F.cross_entropy(logits.float(), targets, reduction="sum")
    correct = (logits.argmax(dim=-1) == targets).sum()
    return loss, correct


def _compute_dtype(hidden: Tensor) -> torch.dtype:
    """The dtype the plain path's head matmul runs in: autocast's, else the input's."""
    kind = hidden.device.type
    if torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return hidden.dtype


def _chunk_logits(
    rows: Tensor, weight: Tensor, bias: Tensor | None, softcap: float | None
) -> Tensor:
    z = F.linear(rows, weight, bias).float()
    if softcap:
        z = torch.tanh(z / softcap) * softcap
    return z


class _LinearCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of `hidden @ weight.T (+ bias)` and the correct count, chunked;
    the gradients are computed in forward (see the module docstring)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        targets: Tensor,
        softcap: float | None,
        rows_per_chunk: int,
    ) -> tuple[Tensor, Tensor]:
        dtype = _compute_dtype(hidden)
        needs = ctx.needs_input_grad  # all False under no_grad or for frozen inputs
        with torch.autocast(hidden.device.type, enabled=False):
            h_all, w = hidden.to(dtype), weight.to(dtype)
            b = None if bias is None else bias.to(dtype)
            grad_h = torch.empty_like(hidden) if needs[0] else None
            # Allocated only when asked for: [V, H] in fp32 is 671 MB for Gemma 3's head, which
            # an evaluation (no gradients) would otherwise allocate and drop at every batch.
            grad_w = (
                torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
                if needs[1]
                else None
            )
            grad_b = torch.zeros(bias.shape, device=bias.device) if needs[2] else None
            loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
            correct = torch.zeros((), dtype=torch.int64, device=hidden.device)
            for start in range(0, hidden.shape[0], rows_per_chunk):
                h = h_all[start : start + rows_per_chunk]
                t = targets[start : start + rows_per_chunk]
                z = _chunk_logits(h, w, b, softcap)
                lse = torch.logsumexp(z, dim=-1)
                loss += (lse - z.gather(1, t[:, None]).squeeze(1)).sum()
                correct += (z.argmax(dim=-1) == t).sum()
                if not (needs[0] or needs[1] or needs[2]):
                    continue
                g = torch.exp(z - lse[:, None])  # d loss / d z = softmax - one-hot
                g[torch.arange(len(t), device=t.device), t] -= 1.0
                if softcap:
                    g *= 1.0 - (z / softcap) ** 2  # d (cap tanh(a / cap)) / d a
                del z
                if grad_b is not None:
                    grad_b += g.sum(dim=0)
                g = g.to(dtype)
                if grad_h is not None:
                    grad_h[start : start + rows_per_chunk] = g @ w
                if grad_w is not None and g.dtype == torch.float32:
                    # In place: `g.t() @ h` would be a second [V, H] (671 MB for Gemma 3's
                    # head) beside the accumulator at every chunk.
                    grad_w.addmm_(g.t(), h)
                elif grad_w is not None:
                    grad_w += (g.t() @ h).float()
        ctx.grads = (grad_h, grad_w, grad_b)
        ctx.dtypes = (hidden.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor, _grad_correct: Tensor) -> tuple:  # type: ignore[override]
        out = []
        for grad, dtype in zip(ctx.grads, ctx.dtypes, strict=True):
            # In place: the head's [V, H] gradient is the size of the vocabulary (671 MB
            # for Gemma 3's); a scaled copy would hold it twice at the peak.
            out.append(None if grad is None else grad.mul_(grad_loss).to(dtype))
        ctx.grads = None
        return (*out, None, None, None)


def linear_cross_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    bias: Tensor | None = None,
    softcap: float | None = None,
    rows_per_chunk: int | None = None,
) -> tuple[Tensor, Tensor]:
    """(summed fp32 cross-entropy, correct argmax count) of the head `weight` `[V, H]`
    (+ `bias`) applied to `hidden` `[N, H]`, against `targets` `[N]`, without ever holding
    more than `rows_per_chunk` rows of logits (default `chunk_rows(V)`)."""
    rows = rows_per_chunk or chunk_rows(weight.shape[0])
    if hidden.shape[0] == 0:  # a batch with no target: zero, still connected to the graph
        zero = (hidden.sum() + weight.sum()) * 0.0
        return zero.float(), torch.zeros((), dtype=torch.int64, device=hidden.device)
    return _LinearCrossEntropy.apply(hidden, weight, bias, targets, softcap, rows)


# ------------------------------------------------------------------ the model's head
@dataclass
class HeadCapture:
    """What the head saw during one forward: its input rows and its own parameters."""

    softcap: float | None = None
    hidden: Tensor | None = None
    weight: Tensor | None = None
    bias: Tensor | None = None


def _unwrap(model: nn.Module) -> nn.Module:
    """The module under torch.compile and DDP wrappers (peft forwards to its base itself)."""
    from torch.nn.parallel import DistributedDataParallel

    while True:
        if isinstance(model, torch._dynamo.eval_frame.OptimizedModule):
            model = model._orig_mod
        elif isinstance(model, DistributedDataParallel | nn.DataParallel):
            model = model.module
        else:
            return model


def output_head(model: nn.Module) -> nn.Linear | None:
    """The model's plain `nn.Linear` output head, or None (no head, a LoRA-wrapped or
    quantised head: the loss then uses the model's own logits)."""
    inner = _unwrap(model)
    get_head = getattr(inner, "get_output_embeddings", None)  # Hugging Face models, peft
    head = get_head() if callable(get_head) else None
    return head if type(head) is nn.Linear else None


@contextlib.contextmanager
def capture_head(model: nn.Module) -> Iterator[HeadCapture | None]:
    """Inside, a forward of `model` records the head's input in the yielded capture and
    returns it in place of the logits; None when the model has no plain head (its forward
    is then unchanged). The head's own forward is back on leaving."""
    head = output_head(model)
    if head is None:
        yield None
        return
    config = getattr(_unwrap(model), "config", None)
    capture = HeadCapture(softcap=getattr(config, "final_logit_softcapping", None))

    def hidden_forward(x: Tensor) -> Tensor:
        capture.hidden, capture.weight, capture.bias = x, head.weight, head.bias
        return x

    before = head.__dict__.get("forward")  # an instance-level forward (hooks) to restore
    head.forward = hidden_forward
    try:
        yield capture
    finally:
        if before is None:
            del head.forward
        else:
            head.forward = before


def next_token_loss(
    model: nn.Module, inputs: dict[str, Any], labels: Tensor
) -> tuple[Tensor, Tensor]:
    """(summed next-token cross-entropy, correct argmax count) of `model(**inputs)` over the
    target positions of `labels` `[B, T]`, with the head applied chunk by chunk where the
    model has a plain head, else over the model's own logits (target rows only)."""
    with capture_head(model) as capture:
        output = model(**inputs)
    if capture is not None and capture.hidden is not None:
        rows, targets = target_rows(capture.hidden, labels)
        return linear_cross_entropy(
            rows, capture.weight, targets, bias=capture.bias, softcap=capture.softcap
        )
    rows, targets = target_rows(output.logits, labels)  # a head the loss cannot apply itself
    return full_cross_entropy(rows, targets)
