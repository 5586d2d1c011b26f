"""The non-finite guard: decides whether an optimizer step may be applied, and counts skips.

It owns the skip counts (`state.NonFiniteCounts`, checkpointed as the part "nonfinite")
and, in device mode, the counters that stay on the GPU between logging points.

Host mode reads the loss and the gradient norm once per step: on the CPU as two scalars (no
synchronisation there, and two reads cost less than a tensor addition), on a GPU as their
sum in one read (finite exactly when both are, short of a sum overflowing float32, which
only a diverged run reaches). Device mode (CUDA
with fused AdamW): the finite check stays on the GPU. The fused kernel skips a non-finite
step by itself (its `found_inf` input), and the skips are counted on the device and read at
logging points (`settle`), so no step waits for the GPU. Until that read a skipped step
counts as a step (global_step, schedule); settling gives the steps back, so from then on the
run equals one that never saw them. Under fp16 the grad scaler feeds the kernel its own
`found_inf` (overflowing gradients, which a non-finite loss produces too), so only the loss
decides in host mode and the scaler alone decides on CUDA.

Library considered: torch.amp.GradScaler skips steps with non-finite gradients, but only
under loss scaling and without a limit on consecutive skips; it is used for fp16 and this
guard covers fp32/bf16 runs and the divergence stop.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trainforge.engine.state import NonFiniteCounts


class NonFiniteGuard:
    def __init__(
        self, counts: NonFiniteCounts, *, enabled: bool, device_skip: bool, limit: int,
        cpu: bool = False,
    ) -> None:  # fmt: skip
        self.counts = counts
        self.cpu = cpu  # the run's device is the CPU: two host reads per check
        self.enabled = enabled  # training.skip_nonfinite_steps
        self.device_skip = device_skip
        self.limit = limit  # training.max_consecutive_nonfinite_steps
        # [skipped steps, their loss weight] since the last settle, and the current streak
        self._skipped_dev: torch.Tensor | None = None
        self._consecutive_dev: torch.Tensor | None = None

    @classmethod
    def for_run(cls, counts: NonFiniteCounts, training: Any, device: torch.device,
                optimizer: Any) -> NonFiniteGuard:  # fmt: skip
        """The guard `training` asks for; device mode where the check can stay on the GPU
        (CUDA with fused AdamW, module doc)."""
        fused = device.type == "cuda" and bool(optimizer.defaults.get("fused"))
        return cls(
            counts, enabled=training.skip_nonfinite_steps, device_skip=fused,
            limit=training.max_consecutive_nonfinite_steps, cpu=device.type == "cpu",
        )  # fmt: skip

    # checkpointed part "nonfinite": device counts are settled before every save
    def state_dict(self) -> dict[str, Any]:
        return self.counts.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counts.load_state_dict(state)

    @property
    def reason(self) -> str:
        return f"diverged: {self.limit} consecutive steps with a non-finite loss or gradient"

    def diverged(self) -> bool:
        return self.counts.consecutive_nonfinite >= self.limit

    def check(
        self, step_loss: torch.Tensor, norm: torch.Tensor | None, sums: Any, optimizer: Any,
        scaler: Any,
    ) -> bool:  # fmt: skip
        """False when the step must be skipped now (host mode). In device mode the answer
        goes to the fused kernel as `found_inf` and the step counts until `settle`."""
        if not self.enabled:
            return True
        with_norm = norm is not None and scaler is None
        if self.device_skip and scaler is None:
            check = step_loss + norm if with_norm else step_loss
            bad = (~torch.isfinite(check)).to(torch.float32)
            optimizer.found_inf = bad
            self._count_on_device(bad, sums)
            return True
        if self.device_skip:
            return True
        if not with_norm:
            return math.isfinite(step_loss.item())
        if self.cpu:  # two reads: cheaper there than an addition
            return math.isfinite(step_loss.item()) and math.isfinite(norm.item())  # type: ignore[union-attr]
        return math.isfinite((step_loss + norm).item())  # one synchronisation

    def applied(self, optimizer: Any, scaler: Any) -> None:
        """A step went through the optimizer (or the grad scaler)."""
        if self.device_skip and scaler is None:
            optimizer.found_inf = None
        if not self.device_skip:  # else counted on the device, read when settling
            self.counts.consecutive_nonfinite = 0

    def skipped_on_host(self, step: int) -> None:
        c = self.counts
        c.nonfinite_steps += 1
        c.consecutive_nonfinite += 1
        print(
            f"step {step}: non-finite loss or gradient, optimizer step skipped "
            f"({c.consecutive_nonfinite} in a row, {c.nonfinite_steps} in total)"
        )

    def _count_on_device(self, bad: torch.Tensor, sums: Any) -> None:
        """Count a possibly skipped step on the device, and keep its loss and sums out of
        the logging interval (a NaN would spoil its mean); its weight is taken out of the
        interval when settling."""
        if self._skipped_dev is None or self._consecutive_dev is None:
            self._skipped_dev = torch.zeros(2, dtype=torch.float64, device=bad.device)
            # A streak carried in from a checkpoint continues (a host number, no read).
            self._consecutive_dev = bad * 0 + self.counts.consecutive_nonfinite
        self._skipped_dev[0].add_(bad)
        self._skipped_dev[1].add_(bad, alpha=sums.weight)
        # consecutive = (consecutive + 1) on a skip, 0 otherwise
        self._consecutive_dev.add_(bad).mul_(bad)
        keep = bad == 0
        if isinstance(sums.loss_sum, torch.Tensor):
            sums.loss_sum = torch.where(keep, sums.loss_sum, 0.0)
        sums.sums = {k: torch.where(keep, v, torch.zeros_like(v)) for k, v in sums.sums.items()}

    def settle(self, global_step: int) -> tuple[int, int]:
        """Device mode: read the skips counted since the last call (one read); returns
        (skipped steps, their loss weight), which the loop takes back out of its step
        counter, schedule and meter (`Trainer.settle_skips`)."""
        if self._skipped_dev is None or self._consecutive_dev is None:
            return 0, 0
        counts = torch.cat([self._skipped_dev, self._consecutive_dev.reshape(1).double()])
        skipped, skipped_weight, consecutive = (int(v) for v in counts.tolist())
        self._skipped_dev.zero_()
        c = self.counts
        c.consecutive_nonfinite = consecutive
        if skipped:
            c.nonfinite_steps += skipped
            print(
                f"step {global_step - skipped}: {skipped} optimizer step(s) skipped since the "
                f"last report for a non-finite loss or gradient ({consecutive} in a row, "
                f"{c.nonfinite_steps} in total)"
            )
        return skipped, skipped_weight
