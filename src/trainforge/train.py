"""The train entry: one run composed from the library's parts, top to bottom.

config (resolved by the CLI) -> platform and process group -> resume point -> batch fit ->
task (data + model) -> run folder -> callbacks -> Trainer -> fit -> outputs. Each step is a
call into the package that owns it; the pieces that belong to no lower package (resume,
callbacks, start lines, outputs) live in `trainforge.run`. torchtitan's short `train.py`
(a main that builds its trainer from a config and runs it) is the model followed.

Order matters for "nothing half-written": the config is validated and the data and model
are built before the run folder is written, so a user error leaves no trace on disk.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from trainforge import parallel
from trainforge.config import ResolvedConfig
from trainforge.errors import UserError
from trainforge.run.outputs import RunSummary
from trainforge.run.resume import run_folder_for
from trainforge.runfolder import Hold, resume_command

__all__ = ["RunSummary", "train"]


def train(resolved: ResolvedConfig, platform: Any, *, resume_from: str | None = None) -> RunSummary:
    """Train one run. Under torchrun (or srun with several tasks) every process calls this;
    rank 0 alone prints, logs and writes files, the others train their shard silently."""
    import torch

    from trainforge.hardware import resolve_device

    device = torch.device(resolve_device(resolved.config.training.device, platform))
    hardware = resolved.config.hardware
    dist = parallel.setup(hardware.distributed_backend, device.type, hardware.distributed_timeout_s)
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
        resume = resume_command(run_folder_for(resolved))
        line = parallel.failure_line(err, resume=resume)
        if line is None:
            raise SystemExit(2) from None
        raise UserError(line) from None
    finally:
        if quiet:
            quiet.close()
        parallel.teardown()


def _train(resolved: ResolvedConfig, platform: Any, device: Any, resume_from: str | None):
    """One run while holding its folder (rank 0); the hold ends with the run."""
    from trainforge.hardware import oom

    with run_folder_for(resolved).hold() as hold:
        try:
            return _run(resolved, platform, device, resume_from, hold)
        finally:
            oom.end_all()  # the run ended by itself: no record of a killed start stays


def _run(resolved, platform, device, resume_from: str | None, hold: Hold) -> RunSummary:
    from trainforge.engine.state import seed_everything
    from trainforge.engine.trainer import Trainer
    from trainforge.hardware.allocator import tune_host_allocator
    from trainforge.hardware.threads import apply_threads, thread_count
    from trainforge.observe.loggers import build_loggers
    from trainforge.run import header, init_from, outputs, resume
    from trainforge.run.callbacks import build_callbacks
    from trainforge.run.recipe import config_hash, config_yaml
    from trainforge.tasks import build_task

    folder = hold.folder
    main = parallel.context().is_main
    start_from = resume.claim(hold, resume_from, resolved.config.output.overwrite)
    if idle := outputs.nothing_to_train(folder, start_from, resolved.config):
        return idle
    recorded = folder.read_run().get("threads") if start_from and folder.is_run() else None
    # Another run's weights, found before any data loads; a resumed run has them already.
    source = None if start_from else init_from.locate(resolved.config)
    apply_threads(thread_count(resolved.config.training.num_threads, recorded))
    tune_host_allocator()  # before the data and the model take memory
    build = init_from.frozen_builder(build_task)  # model.freeze holds for the probe too
    # `per_device_train_batch_size: auto` becomes numbers before any task or loader exists.
    resolved, fit_line = fit_batch(resolved, platform, device, build, start_from)
    config = resolved.config
    seed_everything(config.training.seed)
    # May raise UserError (missing data): nothing written yet. The run's own output model
    # may be replaced (`outputs.own_output_model`); the recorded config stays as given.
    task = build(outputs.own_output_model(config, folder), device)
    init_lines = init_from.prepare(task.model, config, source)  # before the optimizer exists
    text = config_yaml(config)
    resume_step = resume.prepare_folder(hold, resolved, start_from, resume_from, text)
    parallel.barrier()

    callbacks = build_callbacks(
        config,
        build_loggers(config.logging, folder.path, folder.path.name, resume_step) if main else [],
        progress=config.logging.progress_bar and main,
        params=logged_params(config, task),
        telemetry=header.telemetry(config, platform) if main else None,
        profile_dir=folder.path if main else None,
        run_folder=folder,
    )
    trainer = Trainer(
        task, config, run_dir=folder.path, device=device, callbacks=callbacks,
        config_yaml=text, config_hash=config_hash(config),
        peak_tflops=header.peak_tflops(config, platform, device),
        measured_peak_tflops=header.measured_peak_tflops(config, device),
    )  # fmt: skip
    notes = [*resolved.notes, fit_line, *init_lines, trainer.schedule_note]
    header.print_start(resolved, platform, trainer, device, trainer.precision.name, folder.path,
                       notes)  # fmt: skip
    if main:
        resume.record_run(folder, resolved, trainer, source.record() if source else None)
        header.warn_space(folder, config, task.model, trainer.steps_per_epoch)
    _resume(trainer, folder, start_from, config)
    steady_state()
    result = outputs.fit_or_abort(trainer.fit, folder)
    return outputs.finish(trainer, _engine(trainer, device), result, folder, resolved, platform,
                          callbacks)  # fmt: skip


def logged_params(config: Any, task: Any) -> dict[str, Any]:
    """The config as the trackers record it (W&B config, MLflow params), with the base model
    the task loaded: a run on another corpus loads NAME-<corpus>-<hash>, not the name the
    config writes, and the tracker must name what was trained on."""
    from trainforge.observe.loggers import flatten

    params = flatten(config.model_dump(mode="json"))
    if task.base_model:
        params["model.model_name_or_path"] = task.base_model
    return params


def _resume(trainer: Any, folder: Any, start_from: Any, config: Any) -> None:
    """Load the checkpoint when resuming (`run.resume.restore`), then record where this
    part of the run computes (`run.segments`; rank 0 writes)."""
    from trainforge.run import resume, segments

    def load(checkpoint: Any) -> tuple[dict, tuple[str, list[str]]]:
        meta = trainer.load_checkpoint(checkpoint)
        return meta, trainer.resume_guarantee or ("exact", [])

    guarantee = resume.restore(load, start_from, config) if start_from else ("start", [])
    where = trainer.setup.now(), trainer.state.global_step
    segments.record_segment(folder, *where, start_from, *guarantee)


def _engine(trainer: Any, device: Any) -> Any:
    """What the outputs need of how the run trained (`run.outputs.Engine`)."""
    from trainforge.engine.stateful import ModelState
    from trainforge.run.outputs import Engine

    whole = ModelState(trainer.model, trainer.sharded)  # under FSDP: gathered on rank 0
    return Engine(
        trainer.config_hash, trainer.precision.name, device, trainer.meter.peak_flops,
        trainer.meter.measured_peak_flops, whole.full_state_dict if trainer.sharded else None,
    )  # fmt: skip


def steady_state() -> None:
    """The process entry (`cli.entry`) starts `train` with the garbage collector off, so that
    start-up's imports and builds are not scanned again and again; here, before the first
    step, everything alive so far is frozen (never scanned again: modules, the model, the
    data) and the collector is switched back on for the run's own garbage. A no-op where the
    collector is on (`main()` called inside another process, as the tests do)."""
    import gc

    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def fit_batch(resolved, platform, device, build, start_from) -> tuple[ResolvedConfig, str]:
    """`per_device_train_batch_size: auto`: the numbers its checkpoint was trained with
    (a resumed run) or those the memory probe fits, applied to the run's config by the
    plan; a config without `auto` comes back unchanged with an empty line."""
    from trainforge.config.plan import apply_batch_plan
    from trainforge.engine.batch_fit import kept_batch
    from trainforge.engine.batch_probe import fit_auto_batch
    from trainforge.run.resume import checkpoint_batch

    if resolved.config.training.per_device_train_batch_size != "auto":
        return resolved, ""
    saved = checkpoint_batch(start_from) if start_from is not None else None
    if saved is not None:
        plan, line = kept_batch(*saved)
    else:
        plan, line = fit_auto_batch(resolved, platform, device, build_task=build)
    return apply_batch_plan(resolved, plan), line
