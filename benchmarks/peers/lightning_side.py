"""PyTorch Lightning with its own fast settings: `Trainer(barebones=True)`.

barebones turns off everything that costs speed (logger, progress bar, checkpointing, model
summary, sanity validation). Clipping is Lightning's `gradient_clip_val` (norm), applied in
the module's `configure_gradient_clipping` hook (Lightning's mixed-precision plugin refuses to
clip for a fused AdamW), the optimizer
and the per-step schedule come from `configure_optimizers`, bf16 is `precision="bf16-mixed"`,
and compilation is `torch.compile(lightning_module)` as Lightning's documentation shows.
"""

from __future__ import annotations

import logging
import tempfile
import warnings

import torch
from torch import Tensor, nn

from peers.workload import SideResult, Workload, build_optimizer, finish, loss_fn, measured


def _module_class():
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self, model: nn.Module, optimizer, scheduler) -> None:
            super().__init__()
            self.model = model
            self._optimizer = optimizer
            self._scheduler = scheduler

        def forward(self, images: Tensor) -> Tensor:
            return self.model(images)

        def training_step(self, batch, batch_idx: int) -> Tensor:
            images, labels = batch
            return loss_fn(self(images), labels)

        def configure_gradient_clipping(
            self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None
        ) -> None:
            # Lightning's hook for custom clipping. Its mixed-precision plugin refuses to clip
            # for a fused optimizer (it assumes a gradient scaler unscales inside step); bf16
            # has no scaler, so clip by norm here exactly as the other sides do.
            if gradient_clip_val:
                nn.utils.clip_grad_norm_(list(self.parameters()), gradient_clip_val, foreach=True)

        def configure_optimizers(self):
            return {
                "optimizer": self._optimizer,
                "lr_scheduler": {"scheduler": self._scheduler, "interval": "step"},
            }

    return Module


def run_lightning(w: Workload) -> SideResult:
    import lightning.pytorch as pl

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    model = w.prepare_model()
    optimizer, scheduler = build_optimizer(model, w)
    module = _module_class()(model, optimizer, scheduler)
    fit_module = torch.compile(module) if w.compile else module
    with (
        tempfile.TemporaryDirectory(prefix="trainforge-bench-pl-") as root,
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")  # hints about workers, srun, tensor cores
        trainer = pl.Trainer(
            accelerator="gpu" if w.device.type == "cuda" else "cpu",
            devices=1,
            max_steps=w.total_steps,
            precision="bf16-mixed" if w.precision == "bf16" else "32-true",
            gradient_clip_val=w.max_grad_norm,
            gradient_clip_algorithm="norm",
            barebones=True,
            limit_val_batches=0,
            default_root_dir=root,
        )
        with measured(w) as (clock, memory):
            clock.attach(optimizer)
            trainer.fit(fit_module, train_dataloaders=w.loader())
    return finish(w, model, clock, memory)
