"""What a finished (or stopped) run leaves behind and says last: the final model, the
validation confusion matrix, summary.json, the report, the lines that tell how to resume,
and the summary `trainforge train` returns.

Every path comes from `trainforge.runfolder.RunFolder`. The collectives (the confusion
matrix summed over ranks, a sharded model gathered on rank 0) run on every rank before
rank 0 alone writes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainforge import parallel
from trainforge.config import ResolvedConfig
from trainforge.data.loaders import park_workers
from trainforge.engine import checkpoint as ckpt
from trainforge.errors import UserError
from trainforge.run.callbacks import metrics_callback
from trainforge.run.header import device_name
from trainforge.run.resume import requeue_slurm_job
from trainforge.runfolder import RunFolder, resume_command

if TYPE_CHECKING:
    from trainforge.engine.loop import Loop, Outcome
    from trainforge.engine.task import Task


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
    final_stop: str | None = None  # a signal during the closing evaluation (model saved)
    start_step: int = 0  # where this segment began: 0 for a fresh run
    start_time_s: float = 0.0

    @property
    def exit_code(self) -> int:
        """0, or 128 + the signal number for a run stopped by a signal (130 for Ctrl+C),
        during training or during its closing evaluation."""
        stopped_by = self.signal if self.interrupted else self.final_stop
        if not stopped_by and not self.interrupted:
            return 0
        return 128 + int(getattr(signal, stopped_by or "SIGINT", signal.SIGINT))


NOTHING_TO_TRAIN = "nothing to train"


def nothing_to_train(folder: RunFolder, start_from: Path | None, config: Any) -> RunSummary | None:
    """A resumed run already past a lowered training.max_steps trains nothing: one line says
    so (rank 0), and the run ends before anything is built or written."""
    target = config.training.max_steps
    if start_from is None or target <= 0:
        return None
    step = int(ckpt.read_meta(start_from).get("global_step", 0))
    if step <= target:  # at the end: fit() finishes the outputs as a finished run does
        return None
    if parallel.context().is_main:
        print(
            f"nothing to train: {folder.path} is at step {step} and training.max_steps is "
            f"{target}; raise --max_steps above {step} to train further"
        )
    return RunSummary(folder.path, {}, None, NOTHING_TO_TRAIN, False, step, 0.0)


@dataclass(frozen=True)
class Engine:
    """What the outputs need of how the run trained, beyond the loop's declared view
    (`engine.loop.Loop`): given by the train entry, which built the Trainer."""

    config_hash: str
    precision: str
    device: Any  # the torch.device it trained on
    peak_flops: float | None = None
    measured_peak_flops: float | None = None
    # Under FSDP: gathers the whole model's weights on rank 0 (a collective), else None.
    gather_weights: Callable[[], dict] | None = None


def fit_or_abort(fit: Callable[[], Any], folder: RunFolder) -> Any:
    """fit(), and on a second Ctrl+C (GracefulStop gave Python's handler back) one line on
    stderr before the KeyboardInterrupt goes on to exit 130 at once."""
    try:
        return fit()
    except KeyboardInterrupt:
        if parallel.context().is_main:
            print(
                "aborted by a second Ctrl+C; "
                f"`{resume_command(folder)}` continues from the newest "
                "complete checkpoint",
                file=sys.stderr,
                flush=True,
            )
        raise


def finish(
    loop: Loop,
    engine: Engine,
    result: Any,
    folder: RunFolder,
    resolved: ResolvedConfig,
    platform: Any,
    callbacks: list[Any],
) -> RunSummary:
    """Every rank joins the collectives; rank 0 then writes the outputs and the last lines."""
    config = resolved.config
    confusion = None if result.interrupted else _confusion(loop.task, engine.device)  # all ranks
    final_weights = None
    gather = engine.gather_weights
    if gather is not None and config.checkpoint.save_final_model and not result.interrupted:
        final_weights = gather()  # collective: gathered on rank 0
    summary = RunSummary(
        run_dir=folder.path,
        final_metrics=result.final_metrics,
        best_metric=result.state.best_metric,
        stop_reason=result.stop_reason,
        interrupted=result.interrupted,
        global_step=result.state.global_step,
        train_time_s=result.state.train_time_s,
        signal=loop.outcome.signal,
        checkpoint=loop.outcome.last_checkpoint,
        start_step=loop.outcome.start_step,
        start_time_s=loop.outcome.start_time_s,
    )
    if not parallel.context().is_main:
        return summary
    if config.checkpoint.save_final_model and not result.interrupted:
        save_final_model(loop.task, result, engine.config_hash, folder.path, final_weights)
        summary.final_stop = loop.task.final_stop
    if confusion is not None:
        folder.eval_dir.mkdir(exist_ok=True)
        folder.confusion.write_text(json.dumps(confusion), encoding="utf-8")
    record = {
        **{k: str(v) if isinstance(v, Path) else v for k, v in vars(summary).items()},
        **_facts(loop, engine, result, resolved, platform, callbacks),
    }
    folder.summary.write_text(json.dumps(record, indent=2), encoding="utf-8")
    if config.logging.report:  # off: `trainforge report RUN` draws it from the same folder
        write_report(folder.path)
    _last_lines(loop.outcome, result, folder, config)
    return summary


def _facts(
    loop: Loop,
    engine: Engine,
    result: Any,
    resolved: ResolvedConfig,
    platform: Any,
    callbacks: list[Any],
) -> dict:
    """summary.json's fields beyond the RunSummary: where and how the run trained."""
    metrics = metrics_callback(callbacks)
    peak, measured = engine.peak_flops, engine.measured_peak_flops
    return {
        "platform": platform.kind,
        "device": str(engine.device),
        "device_name": device_name(platform, engine.device),
        "profile": resolved.profile.name,
        "config_hash": engine.config_hash,
        "precision": engine.precision,
        "samples_per_s": metrics.last_train.get("samples_per_s"),
        "flops_per_sample": result.state.flops_per_sample or None,
        "mfu": metrics.last_train.get("mfu"),
        "mfu_measured": metrics.last_train.get("mfu_measured"),
        "peak_tflops": peak / 1e12 if peak else None,
        "measured_peak_tflops": measured / 1e12 if measured else None,
        "nonfinite_steps": result.state.nonfinite_steps,
        "telemetry": metrics.telemetry.summary() if metrics.telemetry else None,
        # Tasks with a held-out test split score the final model on it (e.g. G2P PER/WER).
        "test_metrics": loop.task.test_metrics,
        "world_size": parallel.context().world_size,
    }


def _last_lines(outcome: Outcome, result: Any, folder: RunFolder, config: Any) -> None:
    """How to resume a stopped run; a diverged run ends in one line naming the fix."""
    if result.interrupted:
        print(f"{outcome.signal}: checkpoint saved to {outcome.last_checkpoint}")
        print(f"resume with: {resume_command(folder)}")
        if outcome.signal == "SIGUSR1" and config.hardware.slurm_requeue:
            requeue_slurm_job()
    elif result.stop_reason.startswith("time limit"):
        print(f"{result.stop_reason}: checkpoint saved to {outcome.last_checkpoint}")
        hours = 2 * (config.training.max_training_hours or 0)
        # the limit counts training time across resumes: continuing needs a higher one
        print(f"resume with: {resume_command(folder)} --max_training_hours {hours:g}")
    if outcome.diverged:
        found = ckpt.latest(folder.checkpoints)
        raise UserError(
            f"training stopped at step {result.state.global_step}: {result.stop_reason}; "
            f"last good checkpoint: {found.path if found else 'none'}",
            "lower optimizer.learning_rate or set training.max_grad_norm, then resume with "
            f"`{resume_command(folder)} --learning_rate RATE`",
        )


def _confusion(task: Task, device: Any) -> dict | None:
    """Classification: the validation confusion matrix (rows true, columns predicted),
    summed over ranks (None for a task without classes)."""
    import torch

    try:
        found = task.confusion_matrix(task.model, device)
    finally:  # the validation pass restarted the loader's workers: they go now, as after fit
        park_workers(task.val_loader)
    if found is None:
        return None
    matrix, names = found
    counts = parallel.all_reduce_sum(torch.tensor(matrix, dtype=torch.long, device=device))
    return {"class_names": names, "matrix": counts.tolist()}


def write_report(run_dir: Path) -> None:
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


def own_output_model(config: Any, folder: RunFolder) -> Any:
    """`config` with its output model allowed to be replaced when this run wrote it.

    A run's output model (`output.models_dir/output.model_name`) is part of the run: the
    model's trainforge.json names the run folder that wrote it, so extending that run
    (`--resume runs/NAME --max_steps N`) updates it without --overwrite, while a model
    another run (or a user) wrote stays refused without --overwrite."""
    out = config.output
    if not out.model_name or out.overwrite:
        return config
    summary = Path(out.models_dir) / out.model_name / "trainforge.json"
    try:
        writer = json.loads(summary.read_text(encoding="utf-8")).get("run_dir")
    except (OSError, ValueError, AttributeError):
        return config
    if not writer or Path(writer).resolve() != folder.path.resolve():
        return config
    return config.model_copy(update={"output": out.model_copy(update={"overwrite": True})})


def save_final_model(
    task: Task, result: Any, config_hash: str, run_dir: Path, weights: dict | None = None
) -> None:
    """The task's own final artifact (`Task.save_final`: a Hugging Face folder), or else
    model.safetensors from `weights` (gathered under FSDP) or the task's model."""
    saved = task.save_final(
        run_dir,
        model=task.model,
        metrics=dict(result.final_metrics),
        config_hash=config_hash,
        global_step=result.state.global_step,
    )
    if saved is not None:
        return
    source = weights if weights is not None else task.model.state_dict()
    ckpt.save_weights(RunFolder(run_dir).model, source, {"config_hash": config_hash})


def _count(number: int, noun: str) -> str:
    """`1 step`, `2 steps`."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def print_summary(summary: RunSummary) -> None:
    """The lines a finished `trainforge train` ends with (rank 0 only): how it ended, the
    validation figures, and where the checkpoints, TensorBoard logs, metrics and model are."""
    if os.environ.get("RANK", "0") != "0":  # torchrun: rank 0 speaks for the job
        return
    if summary.stop_reason == "nothing to train":  # said in one line already
        return
    folder = RunFolder(summary.run_dir)
    metrics = summary.final_metrics
    done = f"done: {summary.stop_reason} after {_count(summary.global_step, 'step')} "
    segment = summary.global_step - summary.start_step
    if summary.start_step and segment:  # resumed: its totals, and this segment's share
        done += (
            f"in {summary.train_time_s:.1f} s of training in all; this segment "
            f"{_count(segment, 'step')} in {summary.train_time_s - summary.start_time_s:.1f} s"
        )
    elif summary.start_step:  # resumed at its end (a closing step redone): nothing trained
        done += f"in {summary.train_time_s:.1f} s of training in all; none in this segment"
    else:
        done += f"in {summary.train_time_s:.1f} s of training"
    print(done)
    if "accuracy" in metrics:
        print(f"validation accuracy {metrics['accuracy'] * 100:.2f}%  loss {metrics['loss']:.4f}")
    for label, path in (
        ("checkpoints:", folder.checkpoints),
        ("TensorBoard:", folder.tensorboard),
        ("metrics:    ", folder.metrics),
        ("final model:", folder.model),
    ):
        if path.exists():
            shown = f"tensorboard --logdir {path}" if label == "TensorBoard:" else path
            print(f"{label} {shown}")
