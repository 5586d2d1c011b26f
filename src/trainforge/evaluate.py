"""`trainforge evaluate RUN`: score a run's model on its whole validation and test splits, or
on any TSV/CSV/JSONL file, as the run's closing evaluation computes them.

Owns the evaluation config (the run's own, with the files asked
for as its validation split, nothing written and no base model created), and the printed and
JSON results. Which weights a run folder means is `run.weights.run_weights`'s answer (the one
export and `model.init_from` use: final model, else verified best, else newest), or the
checkpoint `--checkpoint` names; they are read as export reads them (`export.source`:
verified against the manifest, safetensors only). The passes are the task's own where it
declares one (`Task.evaluate_split`: the causal-LM task decodes every prompt), else
`engine.evaluate.evaluate_batches` with the task's metrics.
Works where the run started, as `--resume` does, so its relative data and model paths hold.

Library considered: Hugging Face `evaluate` (metric objects loaded by name) scores
predictions, not a checkpoint on its task's data; the task's sums already are the metrics.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainforge.engine import checkpoint as ckpt
from trainforge.errors import UserError
from trainforge.export.options import SOURCE_HINT
from trainforge.runfolder import RunFolder, guide_spelling

if TYPE_CHECKING:
    from trainforge.run.weights import RunWeights

SPLITS = ("val", "test")


@dataclass
class Request:
    """What `trainforge evaluate` was asked for."""

    run: Path
    checkpoint: str | None = None  # a checkpoint name in the run, or a folder path
    file: Path | None = None  # scored instead of the splits
    splits: tuple[str, ...] | None = None  # None: every split the run has
    batch_size: int | None = None
    device: str | None = None
    num_threads: int | None = None


def weights_of(request: Request) -> RunWeights:
    """The weights scored: the checkpoint `--checkpoint` names, else those the run folder
    means (`run.weights.run_weights`)."""
    from trainforge.run import weights

    run = RunFolder(guide_spelling(request.run))  # the ViT guide's NAME.pth: folder NAME
    given = request.checkpoint
    path = run.path
    if given is not None:
        named = guide_spelling(run.checkpoints / given)
        path = named if named.is_dir() else guide_spelling(given)
        if not path.is_dir():
            have = [c.path.name for c in ckpt.list_checkpoints(run.checkpoints)]
            raise UserError(
                f"--checkpoint {given}: no such checkpoint in {run.checkpoints}",
                f"pick one of {', '.join(have)}" if have else "train the run first",
            )
    found = weights.run_weights(path) if path.is_dir() else None
    if found is None:
        raise UserError(f"{path} is neither a run folder nor a checkpoint", SOURCE_HINT)
    return found


def evaluate(request: Request) -> dict[str, Any]:
    """Score the weights on the splits and files asked for; prints one line per pass and
    returns {"weights", "step", "results": {name: {"examples", metrics…}}}."""
    from trainforge.export.options import check_source_exists
    from trainforge.export.source import load_weights, read_source
    from trainforge.run.resume import enter_start_dir

    if request.file is not None and not request.file.is_file():
        raise UserError(f"--file {request.file}: not found", "pass a TSV, CSV or JSONL file")
    check_source_exists(request.run)
    source = read_source(weights_of(request))
    step = _step_of(source.weights)
    file = request.file.resolve() if request.file is not None else None
    enter_start_dir(RunFolder(source.run_dir))
    config = _evaluation_config(source.config, request, file)
    import torch

    from trainforge.hardware import detect, resolve_device
    from trainforge.hardware.threads import apply_threads, thread_count
    from trainforge.tasks import build_task

    device = torch.device(resolve_device(config.training.device, detect()))
    apply_threads(thread_count(config.training.num_threads))
    task = build_task(config, device)
    model = load_weights(task.model, source.state_dict, source.weights).to(device)
    at = f"step {step}" if step is not None else "step not recorded"
    print(f"evaluating {source.weights} ({at}) on {device}")
    results: dict[str, dict[str, float]] = {}
    for name, loader in _passes(task, request, file):
        metrics = _score(task, model, loader, device, config)
        shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        print(f"{name} ({len(loader.dataset)} examples): {shown}")
        results[name] = {"examples": len(loader.dataset), **metrics}
    return {"weights": str(source.weights), "step": step, "results": results}


def _step_of(weights: Path) -> int | None:
    """The optimizer step the weights were saved at: a checkpoint's meta, or for a run's final
    model the step its summary records; None where neither says."""
    folder = weights.parent
    if (folder / ckpt.META).is_file():
        return int(ckpt.read_meta(folder).get("global_step", 0))
    summary = RunFolder(folder).summary
    try:
        step = json.loads(summary.read_text(encoding="utf-8")).get("global_step")
    except (OSError, ValueError):
        return None
    return int(step) if isinstance(step, int) else None


def _evaluation_config(config: Any, request: Request, file: Path | None) -> Any:
    """The run's config for scoring: nothing written, no base model created, the file (when
    given) as the validation split, the batch, device and threads asked for."""
    from trainforge.registry import TASKS

    data, model = config.data, config.model
    kind = TASKS.get(config.task.kind)
    if file is not None:
        if not kind.scores_files:
            raise UserError(
                f"--file {file}: only text runs score a file ({config.task.kind} run)",
                "score its own validation split: trainforge evaluate RUN",
            )
        data = data.with_options(validation_file=str(file), test_file=None)
    if kind.base_model:
        from trainforge.models.base_model import resolve_base_model

        base = resolve_base_model(config, create=False)
        model = model.model_copy(update={"model_name_or_path": str(base), "init_arch": None})
    evaluation = config.evaluation
    if request.batch_size:
        evaluation = evaluation.model_copy(
            update={"per_device_eval_batch_size": request.batch_size}
        )
    training = config.training.model_copy(
        update={k: v for k, v in (("device", request.device),
                                  ("num_threads", request.num_threads)) if v is not None}
    )  # fmt: skip
    output = config.output.model_copy(update={"model_name": None})
    return config.model_copy(
        update={"data": data, "model": model, "evaluation": evaluation,
                "training": training, "output": output}
    )  # fmt: skip


def _passes(task: Any, request: Request, file: Path | None):
    """(name, loader) of each pass: the file when given (read as the validation split),
    else the splits asked for (by default every split the run has)."""
    if file is not None:
        yield f"file {file.name}", task.val_loader
        return
    for split in request.splits or SPLITS:
        name = "validation" if split == "val" else split
        loader = task.val_loader if split == "val" else task.test_loader
        if loader is not None:
            yield name, loader
        elif request.splits:
            print(f"{name}: the run has no {name} split")


def _score(task: Any, model: Any, loader: Any, device: Any, config: Any) -> dict[str, float]:
    """The task's metrics on the loader's whole data set, every prompt decoded."""
    own = task.evaluate_split(model, loader)
    if own is not None:
        return own
    from trainforge.engine.evaluate import evaluate_batches
    from trainforge.engine.precision import PrecisionPlan

    precision = PrecisionPlan.create(config.training.precision, device)
    loss_sum, weight, sums = evaluate_batches(
        task, model, loader, device=device, precision=precision
    )
    return task.metrics(loss_sum, weight, sums)


def write_json(result: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")
