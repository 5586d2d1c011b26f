"""Resume, in one place: what `--resume` names (the run.json recipe it rebuilds, the
directory the run started in), the run folder claimed under its hold, the checkpoint the
run resumes from (by itself after a launcher's restart), the batch numbers that checkpoint
keeps for `batch_size: auto`, run.json (its segments: `run.segments`), the restore itself,
and the Slurm requeue that lets a preempted job come back to it. Checkpoint files are
`trainforge.engine.checkpoint`'s, the folder's layout `trainforge.runfolder`'s.

Order matters for "nothing half-written": the resume point is chosen (and refused) before
anything is written; the folder is readied for writing only once the task exists, so a
user error while building data or model leaves no trace on disk. Rank 0 alone tidies and
writes; the other ranks take its choice.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainforge import parallel
from trainforge.config import ResolvedConfig, RunConfig
from trainforge.engine import checkpoint as ckpt
from trainforge.errors import UserError
from trainforge.observe import series
from trainforge.run.recipe import config_changes
from trainforge.run.segments import launcher_job, restart_line
from trainforge.runfolder import Hold, RunFolder, find_run, for_config

if TYPE_CHECKING:
    from trainforge.engine.loop import Loop


def run_folder_for(resolved: ResolvedConfig) -> RunFolder:
    out = resolved.config.output
    return for_config(out.dir, out.run_name, resolved.path)


# ------------------------------------------------------------------ the recipe of a resume


def resolve_run(args, platform, world_size: int, **check: object):
    """(the resolved run, what to resume from: None, auto or a checkpoint folder).

    `--resume runs/NAME` rebuilds the run recorded in that folder (its run.json), with
    the flags given now on top; `--resume CHECKPOINT` does so from that checkpoint."""
    from trainforge.config import validate

    resume, recorded, config_path, profile = args.resume, None, args.config, args.profile
    flags = dict(args.flags)
    if resume not in (None, "auto"):
        found = find_run(resume) or _in_config_run(args, resume, platform)
        if found is None:
            _resume_not_found(args, resume, platform)
        folder, checkpoint = found
        resume = str(checkpoint) if checkpoint else "auto"
        if folder.is_run():
            record = folder.read_run()
            recorded = dict(record.get("recipe") or {})
            if config_path is not None:
                recorded.pop("file", None)  # a config named now is read afresh
            else:
                config_path = Path(record["config_file"]) if record.get("config_file") else None
            profile = profile or record.get("profile")
            from trainforge.models.hub import resume_pin

            if pin := resume_pin(record, flags):  # the same base weights as the run began
                flags["model.model_name_or_path"] = pin
            folder, resume = _enter_recorded_start(record, folder, checkpoint)
        elif config_path is None:
            raise UserError(
                f"--resume {resume}: {folder.path} has no run record (run.json)",
                f"name its config too: trainforge train CONFIG --resume {folder.path}",
            )
        flags["output.dir"] = str(folder.path.parent)
        flags["output.run_name"] = folder.path.name
    if config_path is None and recorded is None:
        raise UserError("no run config given", "trainforge train CONFIG (or --config FILE)")
    resolved = validate(
        config_path,
        platform=platform,
        profile=profile,
        overrides=args.overrides,
        flags=flags,
        flag_sources=args.sources,
        recorded=recorded,
        world_size=world_size,
        **check,
    )
    if args.more_steps is not None:
        flags["training.max_steps"] = _steps_done(resolved, resume, args.more_steps)
        resolved = validate(
            config_path, platform=platform, profile=profile, overrides=args.overrides,
            flags=flags, flag_sources=args.sources, recorded=recorded, world_size=world_size,
            **check,
        )  # fmt: skip
    return resolved, resume


def _steps_done(resolved, resume: str | None, more: int) -> int:
    """The max_steps `--max_steps +N` means: N past the checkpoint this run resumes (a
    folder, or the run's newest with auto), N for a fresh start. Says it in one line."""
    if resume is None:
        return more
    if resume == "auto":
        found = ckpt.latest(run_folder_for(resolved).checkpoints)
        done, name = (found.global_step, found.path.name) if found else (0, "no checkpoint")
    else:
        done, name = int(ckpt.read_meta(Path(resume)).get("global_step", 0)), Path(resume).name
    if os.environ.get("RANK", "0") == "0":
        end = done + more
        print(f"--max_steps +{more}: {name} is at step {done}, so training ends at step {end}")
    return done + more


def _config_run_folder(args, platform):
    """The run folder the named config (with its flags) writes to; None without a config."""
    from trainforge.config import load
    from trainforge.hardware import pick_profile

    if args.config is None:
        return None
    resolved = load(
        args.config,
        profile=args.profile,
        overrides=args.overrides,
        flags=args.flags,
        flag_sources=args.sources,
        pick_auto_profile=lambda: pick_profile(platform),
    )
    out = resolved.config.output
    return for_config(out.dir, out.run_name, resolved.path)


def _in_config_run(args, resume: str, platform):
    """The ViT training guide's `CONFIG --resume_from checkpoints/NAME.pth`: a relative
    path is also looked for in the config's run folder."""
    if Path(resume).is_absolute() or Path(resume).exists():
        return None
    folder = _config_run_folder(args, platform)
    return find_run(str(folder.path / resume)) if folder else None


def _resume_not_found(args, resume: str, platform) -> None:
    """One line naming the flag as typed, the path, and where a checkpoint could be."""
    what = "not a run folder or checkpoint folder" if Path(resume).exists() else "not found"
    folder = None if Path(resume).is_absolute() else _config_run_folder(args, platform)
    if folder is None:
        raise UserError(
            f"{args.resume_flag} {resume}: {what}",
            "pass a run folder such as runs/NAME (see `ls runs`), or auto",
        )
    raise UserError(
        f"{args.resume_flag} {resume}: {what} (nor in {folder.path}, this config's run folder)",
        f"pick one of `ls {folder.checkpoints}`, or resume the newest with "
        f"{args.resume_flag} {folder.path}",
    )


def _enter_recorded_start(record: dict, folder: RunFolder, checkpoint: Path | None):
    """Work where the run started, so the relative paths in its config (data, models) mean
    what they meant then; (the run folder, what to resume) as absolute paths."""
    resume = str(checkpoint.resolve()) if checkpoint else "auto"
    absolute = RunFolder(folder.path.resolve())
    return (absolute if enter_start_dir(folder, record) else folder), resume


def enter_start_dir(folder: RunFolder, record: dict | None = None) -> bool:
    """Change to the directory the run in `folder` started in (its run.json's `cwd`), saying
    so, where that is not the current one; False when it stays (also for a folder without
    a record)."""
    if record is None:
        record = folder.read_run() if folder.is_run() else {}
    started = Path(str(record.get("cwd") or "."))
    if not started.is_dir() or started.resolve() == Path.cwd().resolve():
        return False
    os.chdir(started)
    if os.environ.get("RANK", "0") == "0":
        print(f"working in {started}, where the run started (its relative paths mean that)")
    return True


# ------------------------------------------------------------------ the resume point
def resume_point(folder: RunFolder, resume_from: str | None, overwrite: bool) -> Path | None:
    """The checkpoint this run starts from (None: a fresh start), or one line saying why
    the folder cannot be used. `resume_from` is auto (this run's newest good checkpoint),
    a checkpoint folder of this run, or None (a fresh run: refused where a run already is,
    unless --overwrite)."""
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
                f"checkpoint {resume_from}: {problem}",
                f"resume the run with --resume {folder.path} (its newest good checkpoint)",
            )
        ckpt.check_format(path)
        return path
    from trainforge.run.preflight import refuse_occupied

    refuse_occupied(folder, overwrite)  # said first by `trainforge train` (run.preflight)
    return None


def claim(hold: Hold, resume_from: str | None, overwrite: bool) -> Path | None:
    """The resume point, agreed by every rank: rank 0 locks an existing folder (a live run's
    writes are not leftovers), tidies crash leftovers and chooses; the others choose after
    it. The lock stays with `hold` (`RunFolder.hold`) until the run ends."""
    folder = hold.folder
    main = parallel.context().is_main
    if resume_from is None:
        # torchrun restarts each node's processes on its own count (a node that joins starts
        # at 0): the run continues when any rank's launcher restarted it.
        said = [line for line in parallel.gather_objects(restart_line(folder)) if line]
        if said:
            print(said[0])
            resume_from = "auto"
    start_from = None
    if main and folder.path.is_dir():
        hold.take()
    if main:
        start_from = resume_point(folder, resume_from, overwrite)
    # Rank 0 tidied crash leftovers and chose; every rank takes its choice (a rank choosing
    # on its own could see the folder while rank 0 is already writing into it).
    chosen = parallel.gather_objects(str(start_from) if start_from else None)[0]
    return Path(chosen) if chosen else None


def prepare_folder(
    hold: Hold,
    resolved: ResolvedConfig,
    start_from: Path | None,
    resume_from: str | None,
    config_text: str,
) -> int | None:
    """Rank 0 readies the folder for writing: locked, cleared for --overwrite, metrics past
    the resume step dropped, run.json and config.resolved.yaml written. Returns the step
    the run resumes at (None: a fresh start or another rank)."""
    folder, config = hold.folder, resolved.config
    resume_step = None
    if not parallel.context().is_main:
        return None
    hold.take()
    if start_from is None and config.output.overwrite:
        folder.clear()
    elif start_from is None and resume_from is None and folder.occupied():
        resume_point(folder, None, False)  # another process got here first: refuse
    if start_from is not None:
        resume_step = int(ckpt.read_meta(start_from).get("global_step", 0))
        # The steps after the checkpoint are redone: their records go, by a bisected
        # truncation that reads a few lines, not the file (a long run's is 10^8 bytes).
        series.truncate(folder.metrics, resume_step)
    folder.mark_holder()
    record_run(folder, resolved)  # first: a folder with any file of the run can resume
    folder.resolved_config.write_text(config_text, encoding="utf-8")
    if config.hardware.swap_directory:
        Path(config.hardware.swap_directory).mkdir(parents=True, exist_ok=True)
    note_killed_start(folder)  # only now: a user error before this leaves nothing on disk
    return resume_step


def checkpoint_batch(checkpoint: Path) -> tuple[int, int, int] | None:
    """(micro-batch, accumulation, effective batch) a checkpoint was trained with, so that a
    resumed `per_device_train_batch_size: auto` run keeps them instead of probing again;
    None when its config does not say."""
    import yaml

    try:
        saved = yaml.safe_load(ckpt.config_file(checkpoint).read_text(encoding="utf-8")) or {}
        t = saved["training"]
        micro = int(t["per_device_train_batch_size"])
        accumulation = int(t["gradient_accumulation_steps"])
        target = int(t.get("global_batch_size") or 0)
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        return None
    return micro, accumulation, target or micro * accumulation


def note_killed_start(folder: RunFolder) -> None:
    """Say when the kernel's OOM killer ended the run's previous start, then record this
    start (a kill leaves the record behind for the next start to read)."""
    from trainforge.hardware import oom

    line = oom.previous_end(folder.process_file)
    if line:
        print(f"{line}; resuming continues it from its last checkpoint")
    oom.begin(folder.process_file)


def record_run(
    folder: RunFolder, resolved: ResolvedConfig, loop: Loop | None = None, init_from: Any = None
) -> None:
    """run.json at start: the recipe as given (so `--resume runs/NAME` rebuilds it), written
    before any other file of the run, then again with the numbers of this run once the
    trainer knows them, and the source of its starting weights (`model.init_from`), kept
    across resumes."""
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
        "launcher_job": launcher_job(),  # a restart of the same job continues the run
        "segments": earlier.get("segments", []),
    }
    if loop is not None:
        record["world_size"] = parallel.context().world_size
        record["total_steps"] = loop.total_steps
        record["steps_per_epoch"] = loop.steps_per_epoch
    if init_from := init_from or earlier.get("init_from"):
        record["init_from"] = init_from
    from trainforge.models.hub import run_record

    m = resolved.config.model  # a base model by id: the commit it resolved to
    if base := earlier.get("base_model") or run_record(
        m.model_name_or_path, resolved.config.output.models_dir
    ):
        record["base_model"] = base
    folder.write_run(record)


def restore(
    load: Callable[[Path], tuple[dict[str, Any], tuple[str, list[str]]]],
    start_from: Path,
    config: RunConfig,
) -> tuple[str, list[str]]:
    """Load the checkpoint with `load` (the trainer's: (meta, guarantee)), say what `config`
    changed since then and which guarantee the resume gives; returns ("exact" |
    "continued", reasons)."""
    saved = ckpt.config_file(start_from).read_text(encoding="utf-8")
    changes = config_changes(saved, config)
    meta, (guarantee, reasons) = load(start_from)
    if changes:  # the one line of what changed: the checkpoint's value, then the new one
        print(f"resuming with a changed config ({len(changes)}): " + "; ".join(changes))
    why = f": {'; '.join(reasons)}" if reasons else " (bitwise: the same setup)"
    trained = meta.get("train_time_s")  # a checkpoint of an older version has none
    so_far = ""
    if isinstance(trained, int | float) and trained > 0:
        from trainforge.observe.progress import format_eta

        so_far = f"; {format_eta(trained)} trained so far"  # over the earlier segments
    print(
        f"resumed from {_shown(start_from)} (epoch {meta['epoch']}, step {meta['global_step']}), "
        f"{guarantee}{why}{so_far}"
    )
    return guarantee, reasons


def _shown(path: Path) -> Path:
    """`path` relative to the working directory when it is inside it, as the other start
    lines say their paths. Its last part stays as named: a checkpoint's second name (a
    link, `checkpoint_epoch_5` to `checkpoint-5`) is said as the user gave it."""
    path = Path(path)
    try:
        return (path.parent.resolve() / path.name).relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def requeue_slurm_job() -> None:
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
