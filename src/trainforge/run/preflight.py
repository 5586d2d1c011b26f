"""What refuses a fresh run before any slow work: its run folder already holding a run, its
output model already written by another run, and a base model that is not named or whose
folder is missing or holds no config.json. `trainforge train` asks here right after
the config is validated, before torch is imported, the hardware probed, a base model created
or the data read, so a refused command answers in about a second, with the fix, instead of
after the data and the model were built. The run's own claim (`run.resume.resume_point`,
under the folder's lock) and the task's output check (`models.hf.output_dir`) stay the
authority; these are the same refusals, said first.

Nothing here imports torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainforge.errors import UserError
from trainforge.runfolder import RunFolder, resume_command


def refuse_occupied(folder: RunFolder, overwrite: bool) -> None:
    """A fresh run into a folder that holds a run: one line naming how to go on."""
    occupied = folder.occupied()
    if occupied and not overwrite:
        raise UserError(
            f"run folder {folder.path} already holds a run ({', '.join(occupied)})",
            f"continue it with `{resume_command(folder)}`, start it afresh with --overwrite, "
            "or pick another --set output.run_name=NAME",
        )


def owns_model(model_dir: Path, folder: RunFolder) -> bool:
    """Whether the model folder was written by the run in `folder` (its trainforge.json
    names that run: `run.outputs.own_output_model` lets such a run replace it)."""
    try:
        writer = json.loads((model_dir / "trainforge.json").read_text(encoding="utf-8"))
        writer = writer.get("run_dir")
    except (OSError, ValueError, AttributeError):
        return False
    return bool(writer) and Path(writer).resolve() == folder.path.resolve()


def check_fresh_run(config: Any, folder: RunFolder, resume: str | None) -> None:
    """Refuse, before any slow work, what the run would refuse later (module doc)."""
    from trainforge.run.segments import launcher_job

    # Under a launcher (a requeued Slurm job, torchrun's elastic restart) a fresh start may
    # be the run continuing by itself: the claim decides that under the folder's lock.
    if resume is None and launcher_job() is None:
        refuse_occupied(folder, config.output.overwrite)
    check_config_paths(config, folder)


def check_config_paths(config: Any, folder: RunFolder) -> None:
    """The refusals that read only the config and the paths it names (no data, no model):
    `trainforge validate` says them too. A run folder that holds a run is not one of them:
    validating the config of a run that trained is no mistake."""
    from trainforge.registry import TASKS

    if not TASKS.get(config.task.kind).base_model:
        return
    _check_output_model(config, folder)
    from trainforge.models.base_model import check_base_model_named

    check_base_model_named(config)


def _check_output_model(config: Any, folder: RunFolder) -> None:
    name = config.output.model_name
    if not name or config.output.overwrite:
        return
    model_dir = Path(config.output.models_dir) / name
    if model_dir.exists() and not owns_model(model_dir, folder):
        # `models.hf.output_dir`'s words; that package imports torch, which this check must
        # not wait for.
        raise UserError(
            f"model folder {model_dir} already exists",
            "pick another --output-name, or replace it with --overwrite",
        )
