"""A callback that makes chosen micro-batches produce a NaN loss or an Inf gradient, shared by
the engine's fault tests and the CUDA suite's guard tests."""

from __future__ import annotations

from trainforge.engine.callbacks import Callback


class Poison(Callback):
    """Micro-batch calls numbered in `nan_loss_steps` get a NaN loss; those in
    `inf_grad_steps` a finite loss with an infinite gradient."""

    def __init__(self, task, nan_loss_steps=(), inf_grad_steps=()) -> None:
        self.calls = 0
        original = task.step

        def step(model, batch):
            out = original(model, batch)
            self.calls += 1
            if self.calls in nan_loss_steps:
                out.loss = out.loss * float("nan")
            if self.calls in inf_grad_steps:
                # Finite loss, infinite gradient: d/dw of w * 0 with an inf upstream factor.
                first = next(model.parameters())
                out.loss = out.loss + (first.sum() * 0.0) * float("inf")
            return out

        task.step = step
