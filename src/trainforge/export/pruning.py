"""Global magnitude pruning (`torch.nn.utils.prune`), optional fine-tuning, then permanent.

All Linear and Conv2d weights compete in one pool: the `sparsity` share with the smallest
|w| across the whole model is zeroed (L1 unstructured), so layers that matter less lose more.
Fine-tuning runs the normal engine (`engine.trainer.Trainer` with the run's own task, loss,
precision and device) while the pruning masks stay applied, with a short cosine schedule and
no warm-up; then the masks are folded into the weights. The artifact is dense safetensors with
zeros: unstructured sparsity shrinks compressed files and feeds sparse kernels, not dense
matmuls, so its latency is that of the fp32 model.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import save_file
from torch import nn
from torch.nn.utils import prune

from trainforge.export.artifacts import ArtifactDir, TorchPredictor
from trainforge.runfolder import RunFolder

if TYPE_CHECKING:
    from trainforge.export.job import ExportJob, Result

PRUNED_FILE = "model.safetensors"
PRUNABLE = (nn.Linear, nn.Conv2d)


def prunable_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, PRUNABLE)]


def prune_global(model: nn.Module, sparsity: float) -> None:
    """Mask the `sparsity` share of smallest-magnitude weights across all prunable layers."""
    targets = [(m, "weight") for _, m in prunable_layers(model)]
    prune.global_unstructured(targets, pruning_method=prune.L1Unstructured, amount=sparsity)


def make_permanent(model: nn.Module) -> None:
    """Fold masks into the weights and drop the re-parametrisation."""
    for _, module in prunable_layers(model):
        if prune.is_pruned(module) and hasattr(module, "weight_orig"):
            prune.remove(module, "weight")


def sparsity_report(model: nn.Module) -> tuple[float, dict[str, float]]:
    """(global share of zero weights, share per layer) over the prunable layers."""
    per_layer: dict[str, float] = {}
    zeros = total = 0
    for name, module in prunable_layers(model):
        weight = module.weight.detach()
        layer_zeros = int((weight == 0).sum())
        per_layer[name] = layer_zeros / weight.numel()
        zeros += layer_zeros
        total += weight.numel()
    return zeros / max(total, 1), per_layer


def finetune_config(job: ExportJob, epochs: float, learning_rate: float):
    from trainforge.config.schema import RunConfig

    data = job.source.config.model_dump(mode="json")
    data["training"].update(
        num_train_epochs=epochs, max_steps=-1, compile=False, max_training_hours=None
    )
    data["schedule"].update(warmup_epochs=0.0, warmup_steps=0)
    data["optimizer"]["learning_rate"] = learning_rate
    data["evaluation"].update(eval_every_epochs=max(1, math.ceil(epochs)), eval_steps=None)
    return RunConfig.model_validate(data)


def finetune(job: ExportJob, model: nn.Module, folder: Path) -> dict[str, Any]:
    """Train the masked model for `finetune_epochs` through the engine; logs to folder."""
    from trainforge.engine.state import seed_everything
    from trainforge.engine.trainer import Trainer
    from trainforge.hardware import detect, resolve_device
    from trainforge.hardware.threads import apply_threads
    from trainforge.observe import JsonlLogger
    from trainforge.run.callbacks import build_callbacks

    o = job.options.of("pruned")
    lr = o.finetune_lr or job.source.config.optimizer.learning_rate / 10
    config = finetune_config(job, o.finetune_epochs, lr)
    device = torch.device(resolve_device(config.training.device, detect()))
    if config.training.num_threads:
        apply_threads(config.training.num_threads)  # as `trainforge train` does
    seed_everything(config.training.seed)
    task = job.kind.finetune_task(config, model)
    finetune_run = RunFolder(folder / "finetune")  # the fine-tuning's own run folder
    callbacks = build_callbacks(
        config,
        [JsonlLogger(finetune_run.metrics)],
        resumable=False,
        progress=config.logging.progress_bar,
    )
    trainer = Trainer(task, config, run_dir=finetune_run.path, device=device, callbacks=callbacks)
    print(
        f"fine-tuning the pruned model: {o.finetune_epochs:g} epoch(s), "
        f"{trainer.total_steps} steps, peak lr {lr:g}, {device}"
    )
    result = trainer.fit()
    trainer.model.to("cpu")
    return {
        "epochs": o.finetune_epochs,
        "steps": result.state.global_step,
        "learning_rate": lr,
        "device": str(device),
        "train_time_s": result.state.train_time_s,
        "val_metrics": result.final_metrics,
        "log": finetune_run.metrics.relative_to(folder).as_posix(),
    }


def write_pruned(job: ExportJob) -> list[Result]:
    from trainforge.export.job import Result

    o = job.options.of("pruned")
    with ArtifactDir(job.out_root, "pruned") as folder:
        model = job.fresh_model()
        prune_global(model, o.sparsity)
        _, before = job.evaluate(TorchPredictor(model))
        tuned = finetune(job, model, folder) if o.finetune_epochs > 0 else None
        make_permanent(model)
        model.eval()
        achieved, per_layer = sparsity_report(model)
        state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(folder / PRUNED_FILE), metadata={"sparsity": f"{achieved:.6f}"})
        job.write_config(folder)
        predict = TorchPredictor(model)
        _, metrics = job.evaluate(predict)
        summary = job.summarize(
            folder,
            fmt="pruned",
            runtime="torch",
            precision="fp32",
            artifact=PRUNED_FILE,
            predict=predict,
            metrics=metrics,
            sparsity_target=o.sparsity,
            sparsity=achieved,
            sparsity_by_layer=per_layer,
            metrics_before_finetune=before,
            finetune=tuned,
        )
    return [Result(job.out_root / "pruned", summary)]
