"""Which weights a run folder, a checkpoint folder or a weights file means: the one answer
that `trainforge evaluate`, `trainforge export` (`export.source`) and `model.init_from`
(`run.init_from`) share, and the one line they print about their choice.

Is it a run: a folder is a run when it holds its resolved config (`config.resolved.yaml`,
written when the run starts). Every reader of a run's weights needs that recipe to rebuild
the model the weights belong to, so a folder without it is no run to read weights from,
whatever else it holds; run.json alone (a run that never got past its start) has no
weights either.

The order for a run folder, and why:
1. its final model (`model.safetensors`): what the run finished with, after its closing
   validation, and what `trainforge train` printed as its result;
2. else its `best_model` checkpoint, when it verifies against its manifest: the run's own
   choice by its validation metric, which a stopped run has already made;
3. else its newest checkpoint that verifies (`engine.checkpoint.latest` skips damaged ones):
   the last good state of an interrupted run, still worth scoring, exporting or starting
   from. A best checkpoint that fails verification is passed over for it rather than read.

A checkpoint folder (its manifest beside it) means itself; a file means itself. What a
caller accepts of these is the caller's to say (export reads folders only, init_from also
takes a .safetensors file); a Hugging Face folder of a causal-LM run is its task's own
output, not a run's weights here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainforge.engine import checkpoint as ckpt
from trainforge.errors import UserError
from trainforge.runfolder import RunFolder

FINAL = "final model"
BEST = "best checkpoint"
NEWEST = "newest checkpoint"
CHECKPOINT = "checkpoint"
FILE = "weights file"


@dataclass(frozen=True)
class RunWeights:
    """The weights a path means: `kind` (one of the names above), the safetensors `file` (a
    sharded checkpoint's `dcp/` folder: `engine.checkpoint.read_weights` reads both),
    the `folder` holding it (a checkpoint folder, or the run folder for its final model) and
    the run it belongs to (None: a checkpoint or file outside a run)."""

    given: Path
    kind: str
    file: Path
    folder: Path
    run_dir: Path | None

    @property
    def checkpoint(self) -> bool:
        """Whether the weights are a checkpoint's (verified against its manifest)."""
        return self.kind in (BEST, NEWEST, CHECKPOINT)

    def line(self) -> str:
        """The one line every caller prints about its choice."""
        return weights_line(self.kind, self.file)


def weights_line(kind: str, file: Path) -> str:
    """How evaluate, export and init_from name the weights they read."""
    return f"weights: {kind} {file}"


def is_run(folder: Path) -> bool:
    """Whether `folder` is a run folder (module doc: it holds its resolved config)."""
    return RunFolder(folder).resolved_config.is_file()


def run_of(checkpoint: Path) -> Path | None:
    """The run folder whose checkpoints/ holds `checkpoint`, else None."""
    run = RunFolder(checkpoint.parent.parent)
    return run.path if run.checkpoints == checkpoint.parent and is_run(run.path) else None


def run_weights(path: Path) -> RunWeights | None:
    """The weights `path` means (module doc), or None when it is neither a run folder, a
    checkpoint folder nor a file. A run folder without any weights is refused in one line."""
    path = Path(path)
    if path.is_file():
        return RunWeights(path, FILE, path, path.parent, None)
    if (path / ckpt.MANIFEST).is_file():
        return RunWeights(path, CHECKPOINT, ckpt.weights_path(path), path, run_of(path))
    if not path.is_dir() or not is_run(path):
        return None
    run = RunFolder(path)
    if run.model.is_file():
        return RunWeights(path, FINAL, run.model, path, path)
    best = run.checkpoints / ckpt.best_name()
    if best.is_dir() and ckpt.verify(best) is None:
        return RunWeights(path, BEST, ckpt.weights_path(best), best, path)
    newest = ckpt.latest(run.checkpoints)
    if newest is not None:
        return RunWeights(path, NEWEST, ckpt.weights_path(newest.path), newest.path, path)
    raise UserError(
        f"run folder {path} has no {run.model.name} and no usable checkpoint",
        "train it first (trainforge train CONFIG) or pass a checkpoint folder",
    )
