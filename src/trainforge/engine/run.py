"""One training run end to end: config -> platform -> data + model -> Trainer -> run folder.

Order matters for "nothing half-written": the config is validated and the data and model
are built before the run folder is created, so a user error leaves no trace on disk.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from trainforge.config import ResolvedConfig, RunConfig
from trainforge.errors import UserError


@dataclass
class RunSummary:
    run_dir: Path
    final_metrics: dict[str, float]
    best_metric: float | None
    stop_reason: str
    interrupted: bool
    global_step: int
    train_time_s: float


def config_yaml(config: RunConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def config_hash(config: RunConfig) -> str:
    # The output section names where a run goes, not what it trains: not part of the hash.
    data = config.model_dump(mode="json", exclude={"output"})
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def run_dir_for(resolved: ResolvedConfig) -> Path:
    out = resolved.config.output
    name = out.run_name or (resolved.path.stem if resolved.path else "run")
    return Path(out.dir) / name


def _resume_point(run_dir: Path, resume_from: str | None, overwrite: bool) -> Path | None:
    from trainforge.engine import checkpoint as ckpt

    root = run_dir / "checkpoints"
    if resume_from == "auto":
        found = ckpt.latest(root)
        if found is None:
            print(f"resume auto: no checkpoint in {root}, starting fresh")
        return found.path if found else None
    if resume_from:
        path = Path(resume_from)
        problem = ckpt.verify(path) if path.is_dir() else "not found"
        if problem:
            raise UserError(
                f"--resume_from {path}: {problem}",
                "pass a checkpoint folder such as runs/NAME/checkpoints/best_model, or auto",
            )
        return path
    if ckpt.list_checkpoints(root) and not overwrite:
        raise UserError(
            f"run folder {run_dir} already has checkpoints",
            "continue it with --resume auto, or pick another --set output.run_name=NAME, "
            "or replace it with --set output.overwrite=true",
        )
    return None


def train(resolved: ResolvedConfig, platform, *, resume_from: str | None = None) -> RunSummary:
    import torch

    from trainforge.engine.callbacks import CheckpointCadence, EvalCadence, GracefulStop, TimeLimit
    from trainforge.engine.state import seed_everything
    from trainforge.engine.trainer import Trainer
    from trainforge.hardware import resolve_device
    from trainforge.observe import MetricsCallback, ProgressDisplay, build_loggers
    from trainforge.tasks import build_task

    config = resolved.config
    t = config.training
    run_dir = run_dir_for(resolved)
    start_from = _resume_point(run_dir, resume_from, config.output.overwrite)
    device = torch.device(resolve_device(t.device, platform))
    if t.num_threads:
        torch.set_num_threads(t.num_threads)
    seed_everything(t.seed)
    task = build_task(config)  # may raise UserError (missing data): nothing written yet

    if start_from is None and config.output.overwrite and run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    text = config_yaml(config)
    (run_dir / "config.resolved.yaml").write_text(text, encoding="utf-8")
    if config.hardware.swap_directory:
        Path(config.hardware.swap_directory).mkdir(parents=True, exist_ok=True)

    progress = ProgressDisplay(enabled=config.logging.progress_bar)
    callbacks = [
        EvalCadence(config.evaluation.eval_steps, config.evaluation.eval_every_epochs),
        CheckpointCadence(
            config.checkpoint.save_steps,
            config.checkpoint.save_every_epochs,
            config.checkpoint.save_best,
        ),
        TimeLimit(t.max_training_hours, config.checkpoint.save_on_time_limit),
        GracefulStop(),
        MetricsCallback(
            build_loggers(config.logging, run_dir),
            config.logging.logging_steps,
            listeners=[progress],
        ),
        progress,
    ]
    trainer = Trainer(
        task,
        config,
        run_dir=run_dir,
        device=device,
        callbacks=callbacks,
        config_yaml=text,
        config_hash=config_hash(config),
    )
    _print_start(resolved, platform, trainer, run_dir)
    if start_from is not None:
        meta = trainer.load_checkpoint(start_from)
        print(f"resumed from {start_from} (epoch {meta['epoch']}, step {meta['global_step']})")
    result = trainer.fit()
    if config.checkpoint.save_final_model and not result.interrupted:
        _save_final_model(trainer, run_dir)
    summary = RunSummary(
        run_dir=run_dir,
        final_metrics=result.final_metrics,
        best_metric=result.state.best_metric,
        stop_reason=result.stop_reason,
        interrupted=result.interrupted,
        global_step=result.state.global_step,
        train_time_s=result.state.train_time_s,
    )
    (run_dir / "summary.json").write_text(
        json.dumps(
            {k: str(v) if isinstance(v, Path) else v for k, v in vars(summary).items()}, indent=2
        ),
        encoding="utf-8",
    )
    return summary


def _save_final_model(trainer, run_dir: Path) -> None:
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous().cpu() for k, v in trainer.model.state_dict().items()}
    tmp = run_dir / ".model.safetensors.tmp"
    save_file(state, str(tmp), metadata={"config_hash": trainer.config_hash})
    tmp.replace(run_dir / "model.safetensors")


def _print_start(resolved: ResolvedConfig, platform, trainer, run_dir: Path) -> None:
    c = resolved.config
    t = c.training
    global_batch = t.per_device_train_batch_size * t.gradient_accumulation_steps
    print(
        f"platform: {platform.kind} ({platform.device})   profile: {resolved.profile.name} "
        f"({resolved.profile_reason})"
    )
    print(
        f"task: {c.task.kind}   data: {c.data.dataset} ({trainer.task.num_train_samples} "
        f"training samples)   model: {c.model.arch} "
        f"{sum(p.numel() for p in trainer.model.parameters()):,} parameters"
    )
    print(
        f"device: {trainer.device}   precision: {trainer.precision.name}   batch: "
        f"{t.per_device_train_batch_size} x {t.gradient_accumulation_steps} accumulation = "
        f"{global_batch}   steps: {trainer.total_steps} ({trainer.steps_per_epoch}/epoch)"
    )
    print(f"run folder: {run_dir}")
