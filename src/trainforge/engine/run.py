"""One training run end to end: config -> platform -> data + model -> Trainer -> run folder.

Order matters for "nothing half-written": the config is validated and the data and model
are built before the run folder is created, so a user error leaves no trace on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainforge.config import ResolvedConfig, RunConfig
from trainforge.errors import UserError
from trainforge.runfolder import RunFolder, for_config, resume_command


@dataclass
class RunSummary:
    run_dir: Path
    final_metrics: dict[str, float]
    best_metric: float | None
    stop_reason: str
    interrupted: bool
    global_step: int
    train_time_s: float
    signal: str | None = None
    checkpoint: Path | None = None

    @property
    def exit_code(self) -> int:
        """0, or 128 + the signal number for a run stopped by a signal (130 for Ctrl+C)."""
        if not self.interrupted:
            return 0
        return 128 + int(getattr(signal, self.signal or "SIGINT", signal.SIGINT))


def config_dump(config: RunConfig) -> dict[str, Any]:
    """The config as plain data with every secret value from the environment masked: what
    config.resolved.yaml, checkpoints and the report hold."""
    from trainforge.observe.secrets import scrub_mapping

    return scrub_mapping(config.model_dump(mode="json"))


def config_yaml(config: RunConfig) -> str:
    return yaml.safe_dump(config_dump(config), sort_keys=False)


def config_hash(config: RunConfig) -> str:
    # The output section names where a run goes, not what it trains: not part of the hash.
    data = config.model_dump(mode="json", exclude={"output"})
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def run_folder_for(resolved: ResolvedConfig) -> RunFolder:
    out = resolved.config.output
    return for_config(out.dir, out.run_name, resolved.path)


def _resume_point(folder: RunFolder, resume_from: str | None, overwrite: bool) -> Path | None:
    """The checkpoint this run starts from (None: a fresh start), or one line saying why
    the folder cannot be used. `resume_from` is auto (this run's newest good checkpoint),
    a checkpoint folder of this run, or None (a fresh run: refused where a run already is,
    unless --overwrite)."""
    from trainforge.engine import checkpoint as ckpt

    root = folder.checkpoints
    for line in ckpt.recover(root):
        print(f"checkpoints: {line}")
    if resume_from is None and os.environ.get("SLURM_JOB_ID") and ckpt.latest(root):
        # A requeued or restarted Slurm job continues its run by itself.
        print(f"Slurm job {os.environ['SLURM_JOB_ID']}: resuming the run's newest checkpoint")
        resume_from = "auto"
    if resume_from == "auto":
        found = ckpt.latest(root)
        if found is None and folder.occupied():
            print(f"resume: no complete checkpoint in {root}; starting the run from step 0")
            folder.clear()
        elif found is None:
            print(f"resume: no checkpoint in {root}, starting fresh")
        if found is None:
            return None
        ckpt.check_format(found.path, found.meta)  # before anything is written
        return found.path
    if resume_from:
        path = Path(resume_from)
        problem = ckpt.verify(path) if path.is_dir() else "not found"
        if problem:
            raise UserError(
                f"--resume {resume_from}: {problem}",
                f"resume the run with --resume {folder.path} (its newest good checkpoint)",
            )
        ckpt.check_format(path)
        return path
    occupied = folder.occupied()
    if occupied and not overwrite:
        raise UserError(
            f"run folder {folder.path} already holds a run ({', '.join(occupied)})",
            f"continue it with `{resume_command(folder)}`, start it afresh with --overwrite, "
            "or pick another --set output.run_name=NAME",
        )
    return None


def config_changes(saved_yaml: str, config: RunConfig) -> list[str]:
    """`key: old -> new` for every leaf that differs from the checkpoint's config."""
    try:
        saved = yaml.safe_load(saved_yaml) or {}
    except yaml.YAMLError:
        return ["(the checkpoint's config.yaml is unreadable)"]
    current = config_dump(config)  # compared as saved: masked the same way
    changes: list[str] = []

    def walk(old: Any, new: Any, prefix: str) -> None:
        if isinstance(old, dict) and isinstance(new, dict):
            for key in sorted(set(old) | set(new)):
                walk(old.get(key), new.get(key), f"{prefix}{key}.")
        elif old != new:
            changes.append(f"{prefix.rstrip('.')}: {old!r} -> {new!r}")

    walk(saved, current, "")
    return [c for c in changes if not c.startswith("output.")]


def _requeue_slurm_job() -> None:
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return
    try:
        done = subprocess.run(
            ["scontrol", "requeue", job], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        print(f"could not requeue Slurm job {job}: {err}; resubmit it to continue")
        return
    if done.returncode == 0:
        print(f"Slurm job {job} requeued; it resumes from the checkpoint when it restarts")
    else:
        reason = (done.stderr or done.stdout).strip().splitlines()
        print(f"could not requeue Slurm job {job}: {reason[0] if reason else done.returncode}")


def train(resolved: ResolvedConfig, platform, *, resume_from: str | None = None) -> RunSummary:
    """Train one run. Under torchrun (or srun with several tasks) every process calls this;
    rank 0 alone prints, logs and writes files, the others train their shard silently."""
    import contextlib

    import torch

    from trainforge import parallel
    from trainforge.hardware import resolve_device

    device = torch.device(resolve_device(resolved.config.training.device, platform))
    dist = parallel.setup(resolved.config.hardware.distributed_backend, device.type)
    if not dist.enabled:
        return _train(resolved, platform, device, resume_from)
    if device.type == "cuda":
        device = torch.device("cuda", dist.local_rank)
    quiet = open(os.devnull, "w") if not dist.is_main else None  # noqa: SIM115
    try:
        with contextlib.redirect_stdout(quiet) if quiet else contextlib.nullcontext():
            summary = _train(resolved, platform, device, resume_from)
        # Every rank leaves together, after rank 0 has written its files: a rank that tore
        # its process group down while another still used it could abort at exit.
        parallel.barrier()
        return summary
    except Exception as err:
        # One line for the job: the rank where it failed names itself and the reason; a rank
        # that only lost that peer stays quiet (see parallel.failure_line).
        line = parallel.failure_line(err)
        if line is None:
            raise SystemExit(2) from None
        raise UserError(line) from None
    finally:
        if quiet:
            quiet.close()
        parallel.teardown()


def _train(resolved: ResolvedConfig, platform, device, resume_from: str | None) -> RunSummary:
    """One run while holding its folder (rank 0); the hold ends with the run."""
    held: list[int] = []
    try:
        return _train_held(resolved, platform, device, resume_from, held)
    finally:
        for fd in held:
            os.close(fd)


def _train_held(
    resolved: ResolvedConfig, platform, device, resume_from: str | None, held: list[int]
) -> RunSummary:
    import torch

    from trainforge import parallel
    from trainforge.engine.batch_fit import resolve_auto_batch
    from trainforge.engine.callbacks import CheckpointCadence, EvalCadence, GracefulStop, TimeLimit
    from trainforge.engine.state import seed_everything
    from trainforge.engine.trainer import Trainer
    from trainforge.observe import MetricsCallback, ProgressDisplay, build_loggers
    from trainforge.observe.loggers import flatten
    from trainforge.observe.profiler import profiler_callbacks
    from trainforge.tasks import build_task

    dist = parallel.context()
    folder = run_folder_for(resolved)
    run_dir = folder.path
    main = dist.is_main
    if main and folder.path.is_dir():
        held.append(folder.lock())  # before tidying: a live run's writes are not leftovers
    if main:
        start_from = _resume_point(folder, resume_from, resolved.config.output.overwrite)
    parallel.barrier()  # rank 0 tidied crash leftovers; now every rank sees the same folder
    if not main:
        start_from = _resume_point(folder, resume_from, True)
    from trainforge.hardware.threads import thread_count

    recorded = folder.read_run().get("threads") if start_from and folder.is_run() else None
    torch.set_num_threads(thread_count(resolved.config.training.num_threads, recorded))
    # `per_device_train_batch_size: auto` becomes numbers before any task or loader exists.
    resolved, fit_line = resolve_auto_batch(resolved, platform, device, start_from=start_from)
    config = resolved.config
    t = config.training
    seed_everything(t.seed)
    task = build_task(config, device)  # may raise UserError (missing data): nothing written yet

    text = config_yaml(config)
    resume_step = None
    if main:
        if not held:
            held.append(folder.lock())
        if start_from is None and config.output.overwrite:
            folder.clear()
        elif start_from is None and resume_from is None and folder.occupied():
            _resume_point(folder, None, False)  # another process got here first: refuse
        if start_from is not None:
            resume_step = int(ckpt_meta(start_from).get("global_step", 0))
            folder.trim_metrics(resume_step)
        folder.mark_holder()
        _record_run(folder, resolved)  # first: a folder with any file of the run can resume
        folder.resolved_config.write_text(text, encoding="utf-8")
        if config.hardware.swap_directory:
            Path(config.hardware.swap_directory).mkdir(parents=True, exist_ok=True)
    parallel.barrier()

    progress = ProgressDisplay(enabled=config.logging.progress_bar and main)
    e = config.evaluation
    callbacks = [
        EvalCadence(
            e.eval_steps,
            e.eval_every_epochs,
            e.fast_eval_steps,
            e.full_eval_on_fast_improvement,
        ),
        CheckpointCadence(
            config.checkpoint.save_steps,
            config.checkpoint.save_every_epochs,
            config.checkpoint.save_best,
        ),
        TimeLimit(t.max_training_hours, config.checkpoint.save_on_time_limit),
        GracefulStop(),
        MetricsCallback(
            build_loggers(config.logging, run_dir, run_dir.name, resume_step) if main else [],
            config.logging.logging_steps,
            listeners=[progress],
            params=flatten(config.model_dump(mode="json")),
            telemetry=_telemetry(config, platform) if main else None,
            histogram_steps=config.logging.histogram_steps if config.logging.tensorboard else None,
        ),
        progress,
        *(profiler_callbacks(config.logging, run_dir) if main else []),
    ]
    trainer = Trainer(
        task,
        config,
        run_dir=run_dir,
        device=device,
        callbacks=callbacks,
        config_yaml=text,
        config_hash=config_hash(config),
        peak_tflops=_peak_tflops(config, platform, device),
    )
    _print_start(resolved, platform, trainer, run_dir)
    for line in (*resolved.notes, fit_line, trainer.schedule_note):
        if line:
            print(line)
    if main:
        _record_run(folder, resolved, trainer)
        _warn_space(folder, config, trainer)
    if start_from is not None:
        changes = config_changes((start_from / "config.yaml").read_text(encoding="utf-8"), config)
        meta = trainer.load_checkpoint(start_from)
        if changes:
            print(f"resuming with a changed config ({len(changes)}): " + "; ".join(changes))
        print(f"resumed from {start_from} (epoch {meta['epoch']}, step {meta['global_step']})")
    result = _fit_or_abort(trainer, main, folder)
    confusion = None if result.interrupted else _confusion(trainer)  # collective: every rank
    final_weights = None
    if trainer.sharded and config.checkpoint.save_final_model and not result.interrupted:
        final_weights = trainer.full_state_dict()  # collective: gathered on rank 0
    if not main:
        return RunSummary(
            run_dir, result.final_metrics, result.state.best_metric, result.stop_reason,
            result.interrupted, result.state.global_step, result.state.train_time_s,
            trainer.stop_signal, trainer.last_checkpoint,
        )  # fmt: skip
    if config.checkpoint.save_final_model and not result.interrupted:
        _save_final_model(trainer, run_dir, final_weights)
    summary = RunSummary(
        run_dir=run_dir,
        final_metrics=result.final_metrics,
        best_metric=result.state.best_metric,
        stop_reason=result.stop_reason,
        interrupted=result.interrupted,
        global_step=result.state.global_step,
        train_time_s=result.state.train_time_s,
        signal=trainer.stop_signal,
        checkpoint=trainer.last_checkpoint,
    )
    metrics_cb = next(c for c in callbacks if isinstance(c, MetricsCallback))
    extra = {
        "platform": platform.kind,
        "device": str(device),
        "device_name": _device_name(platform, device),
        "profile": resolved.profile.name,
        "config_hash": trainer.config_hash,
        "precision": trainer.precision.name,
        "samples_per_s": metrics_cb.last_train.get("samples_per_s"),
        "flops_per_sample": trainer.flops_per_sample or None,
        "mfu": metrics_cb.last_train.get("mfu"),
        "nonfinite_steps": result.state.nonfinite_steps,
        "telemetry": metrics_cb.telemetry.summary() if metrics_cb.telemetry else None,
        # Tasks with a held-out test split score the final model on it (e.g. G2P PER/WER).
        "test_metrics": getattr(trainer.task, "test_metrics", None),
    }
    extra["world_size"] = dist.world_size
    if confusion is not None:
        folder.eval_dir.mkdir(exist_ok=True)
        folder.confusion.write_text(json.dumps(confusion), encoding="utf-8")
    folder.summary.write_text(
        json.dumps(
            {
                **{k: str(v) if isinstance(v, Path) else v for k, v in vars(summary).items()},
                **extra,
            },
            indent=2,
        ),
        encoding="utf-8",
    )
    _write_report(run_dir)
    if result.interrupted:
        print(f"{trainer.stop_signal}: checkpoint saved to {trainer.last_checkpoint}")
        print(f"resume with: {resume_command(folder)}")
        if trainer.stop_signal == "SIGUSR1" and config.hardware.slurm_requeue:
            _requeue_slurm_job()
    elif result.stop_reason.startswith("time limit"):
        print(f"{result.stop_reason}: checkpoint saved to {trainer.last_checkpoint}")
        hours = 2 * (config.training.max_training_hours or 0)
        # the limit counts training time across resumes: continuing needs a higher one
        print(f"resume with: {resume_command(folder)} --max_training_hours {hours:g}")
    if trainer.diverged:
        last = ckpt_latest(run_dir)
        raise UserError(
            f"training stopped at step {result.state.global_step}: {result.stop_reason}; "
            f"last good checkpoint: {last or 'none'}",
            "lower optimizer.learning_rate or set training.max_grad_norm, then resume with "
            f"`{resume_command(folder)} --learning_rate RATE`",
        )
    return summary


def ckpt_meta(folder: Path) -> dict[str, Any]:
    from trainforge.engine import checkpoint as ckpt

    return ckpt.read_meta(folder)


def _record_run(folder: RunFolder, resolved: ResolvedConfig, trainer=None) -> None:
    """run.json at start: the recipe as given (so `--resume runs/NAME` rebuilds it), written
    before any other file of the run, then again with the numbers of this run once the
    trainer knows them."""
    import torch

    from trainforge import __version__

    earlier = folder.read_run() if folder.is_run() else {}
    record = {
        "created": earlier.get("created") or None,
        "trainforge": __version__,
        "config_file": str(resolved.path) if resolved.path else None,
        "cwd": os.getcwd(),
        "profile": resolved.profile_requested,
        "profile_used": resolved.profile.name,
        "recipe": resolved.layers,
        "threads": torch.get_num_threads(),
        "effective_batch": resolved.config.training.global_batch_size,
        "command": sys.argv[1:],
    }
    if trainer is not None:
        record["world_size"] = trainer.dist.world_size
        record["total_steps"] = trainer.total_steps
        record["steps_per_epoch"] = trainer.steps_per_epoch
    folder.write_run(record)


def _warn_space(folder: RunFolder, config: RunConfig, trainer) -> None:
    """One line at start when the disk cannot hold the checkpoints the run will keep."""
    from trainforge.engine import checkpoint as ckpt
    from trainforge.hardware.doctor_checks import checkpoints_kept

    line = ckpt.space_warning(
        folder.path, ckpt.estimate_bytes(trainer.model), checkpoints_kept(config)
    )
    if line:
        print(line)


def _fit_or_abort(trainer, main: bool, folder: RunFolder):
    """fit(), and on a second Ctrl+C (GracefulStop gave Python's handler back) one line on
    stderr before the KeyboardInterrupt goes on to exit 130 at once."""
    try:
        return trainer.fit()
    except KeyboardInterrupt:
        if main:
            print(
                "aborted by a second Ctrl+C; "
                f"`{resume_command(folder)}` continues from the newest "
                "complete checkpoint",
                file=sys.stderr,
                flush=True,
            )
        raise


def _telemetry(config: RunConfig, platform):
    if not config.hardware.telemetry:
        return None
    from trainforge.hardware.telemetry import TelemetrySampler, available_sources

    sources, notes = available_sources(platform)
    for note in notes:
        print(note)
    if not sources:
        return None
    return TelemetrySampler(sources, config.hardware.telemetry_interval_s)


def _device_name(platform, device) -> str | None:
    if device.type == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    return platform.gpus[0].name if platform.gpus else None


def _peak_tflops(config: RunConfig, platform, device) -> float | None:
    if config.hardware.peak_tflops:
        return config.hardware.peak_tflops
    if device.type != "cuda":
        return None  # CPU peaks vary too much to tabulate; set hardware.peak_tflops
    from trainforge.engine.precision import resolve_precision
    from trainforge.hardware.peaks import platform_peak_tflops

    precision = resolve_precision(config.training.precision, device)
    # On a Jetson the board model names the module (torch calls every Orin GPU "Orin").
    return platform_peak_tflops(platform, _device_name(platform, device), precision)


def _confusion(trainer) -> dict | None:
    """Classification: the validation confusion matrix (rows true, columns predicted),
    summed over ranks."""
    confusion = getattr(trainer.task, "confusion_matrix", None)
    if confusion is None:
        return None
    import torch

    from trainforge import parallel

    matrix, names = confusion(trainer.model, trainer.device)
    counts = parallel.all_reduce_sum(torch.tensor(matrix, dtype=torch.long, device=trainer.device))
    return {"class_names": names, "matrix": counts.tolist()}


def _write_report(run_dir: Path) -> None:
    """The run report; at a terminal a detached child writes it, so the prompt comes back
    at once (the page appears when it is done; its output goes to RUN/report.log)."""
    try:
        from trainforge.observe.report import build_report_off_the_path
    except ImportError:
        return
    try:
        path = build_report_off_the_path(run_dir)
    except Exception as err:  # a report problem must not fail a finished run
        print(f"report not written: {str(err).splitlines()[0] if str(err) else type(err).__name__}")
        return
    print(f"report: {path}")


def ckpt_latest(run_dir: Path) -> Path | None:
    from trainforge.engine import checkpoint as ckpt

    found = ckpt.latest(RunFolder(run_dir).checkpoints)
    return found.path if found else None


def _save_final_model(trainer, run_dir: Path, weights: dict | None = None) -> None:
    # A task that knows its own model format (a Hugging Face folder) saves itself.
    save_final = getattr(trainer.task, "save_final", None)
    if save_final is not None:
        save_final(
            run_dir,
            model=trainer.model,
            metrics=dict(trainer.last_val),
            config_hash=trainer.config_hash,
            global_step=trainer.state.global_step,
        )
        return
    from trainforge.engine import checkpoint as ckpt

    source = weights if weights is not None else trainer.model.state_dict()
    ckpt.save_weights(RunFolder(run_dir).model, source, {"config_hash": trainer.config_hash})


def _recipe_line(resolved: ResolvedConfig) -> str:
    """The recipe's numbers and where each came from (the run config, a flag, a default)."""

    def origin(path: str) -> str:
        source = resolved.sources.get(path, "default")
        while source.startswith(("plan (", "batch fit (")):
            source = source.split(" (", 1)[1][:-1]
        return source

    c = resolved.config
    batch_from = origin("training.global_batch_size")
    if batch_from == "default":
        batch_from = origin("training.per_device_train_batch_size")
    return (
        f"recipe: effective batch {c.training.global_batch_size} ({batch_from})   "
        f"learning rate {c.optimizer.learning_rate:g} ({origin('optimizer.learning_rate')})   "
        f"precision {c.training.precision} ({origin('training.precision')})"
    )


def _print_start(resolved: ResolvedConfig, platform, trainer, run_dir: Path) -> None:
    c = resolved.config
    t = c.training
    world = trainer.dist.world_size
    global_batch = t.per_device_train_batch_size * t.gradient_accumulation_steps * world
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
        f"{t.per_device_train_batch_size} x {t.gradient_accumulation_steps} accumulation"
        + (f" x {world} processes" if world > 1 else "")
        + f" = {global_batch}   steps: {trainer.total_steps} ({trainer.steps_per_epoch}/epoch)"
    )
    print(_recipe_line(resolved))
    if world > 1:
        mode = "FSDP2 (fully_shard)" if trainer.sharded else "DDP"
        print(f"distributed: {world} processes, backend {trainer.dist.backend}, {mode}")
    print(f"run folder: {run_dir}")
