"""Cross-field rules that a single field's type cannot express.

Each rule returns one-line messages naming the dotted field, the bad value and the fix.
`target` is the hardware the config is judged for (for device and precision rules): the
machine in hand at `train`, or a named profile's hardware at `validate --profile`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainforge.config.schema import RunConfig, TaskConfig
from trainforge.registry import DATASETS, TASKS

if TYPE_CHECKING:
    from trainforge.config.plan import Target


def image_shape(config: RunConfig) -> tuple[int, int]:
    """(side in pixels, channels) of the images the model will see (the dataset's entry)."""
    entry = DATASETS.get(config.data.dataset)
    return entry.side(config.data.option("image_size")), entry.channels or 3


def check(config: RunConfig, target: Target | None = None) -> list[str]:
    problems: list[str] = []
    for rule in (
        _model_rules,
        _schedule_rules,
        _data_rules,
        _eval_rules,
        _output_rules,
        _task_rules,
        _text_rules,
    ):
        problems.extend(rule(config))
    if target is not None:
        problems.extend(_device_rules(config, target))
    return problems


def _model_rules(c: RunConfig) -> list[str]:
    out = []
    m = c.model
    if m.embedding_dim % m.num_heads:
        out.append(
            f"model.num_heads = {m.num_heads}: does not divide model.embedding_dim = "
            f"{m.embedding_dim}; choose num_heads among "
            f"{[h for h in range(1, 17) if m.embedding_dim % h == 0]}"
        )
    side, _ = image_shape(c)
    if side % m.patch_size:
        out.append(
            f"model.patch_size = {m.patch_size}: does not divide the {side}-pixel images of "
            f"{c.data.dataset}; choose a divisor of {side}"
        )
    if m.freeze == "backbone" and m.arch != "vit":
        out.append(
            "model.freeze = backbone: only a vit has a classifier head to train alone; "
            "for a Hugging Face model train a LoRA adapter (lora.enabled=true)"
        )
    return out


def _schedule_rules(c: RunConfig) -> list[str]:
    s, t = c.schedule, c.training
    if t.max_steps == 0:
        return ["training.max_steps = 0: nothing to train; use -1 (epochs) or a positive count"]
    if s.warmup_steps is not None and t.max_steps > 0 and s.warmup_steps >= t.max_steps:
        return [
            f"schedule.warmup_steps = {s.warmup_steps}: not shorter than training.max_steps = "
            f"{t.max_steps}; lower warmup_steps"
        ]
    if s.warmup_steps is None and t.max_steps < 0 and s.warmup_epochs >= t.num_train_epochs:
        return [
            f"schedule.warmup_epochs = {s.warmup_epochs:g}: not shorter than "
            f"training.num_train_epochs = {t.num_train_epochs:g}; "
            "lower warmup_epochs or train longer"
        ]
    return []


def _data_rules(c: RunConfig) -> list[str]:
    d = c.data
    _, channels = image_shape(c)
    if d.normalize_mean is not None and len(d.normalize_mean) != channels:
        return [
            f"data.normalize_mean = {d.normalize_mean}: {d.dataset} images have {channels} "
            f"channel(s); give {channels} value(s) or remove it"
        ]
    return []


def _eval_rules(c: RunConfig) -> list[str]:
    e, k = c.evaluation, c.checkpoint
    problems = []
    if e.eval_every_epochs is None and e.eval_steps is None and k.save_best:
        problems.append(
            "checkpoint.save_best = true needs validation: set evaluation.eval_every_epochs "
            "or evaluation.eval_steps, or set checkpoint.save_best=false"
        )
    metric = e.metric_for_best_model
    metrics = TASKS.get(c.task.kind).metrics  # what this kind's validation reports
    if metric not in metrics:
        problems.append(
            f"evaluation.metric_for_best_model = {metric} is not a {c.task.kind} metric: "
            f"use one of {', '.join(metrics)}"
        )
    elif metric in ("per", "wer") and not c.task.eval_generation:
        problems.append(
            f"evaluation.metric_for_best_model = {metric} needs generated outputs: "
            "set task.eval_generation=true"
        )
    return problems


def _output_rules(c: RunConfig) -> list[str]:
    name = c.output.run_name
    if name is not None and (
        not name.strip() or ".." in name or "/" in name or "\\" in name or name.startswith(".")
    ):
        return [
            f"output.run_name = {name!r}: must be a plain folder name (no '/', '\\\\', '..' or "
            "leading '.'); e.g. vit-cifar10"
        ]
    return []


TEXT_SUFFIXES = (".json", ".jsonl", ".tsv", ".csv")
MODEL_NAME_HINT = "a plain folder name (no '/', '\\\\', '..' or leading '.'); e.g. jetson-tuned"


def _plain_name(name: str) -> bool:
    return bool(name.strip()) and not (
        ".." in name or "/" in name or "\\" in name or name.startswith(".")
    )


def _task_rules(c: RunConfig) -> list[str]:
    """The dataset's entry names the task that reads it (`DatasetEntry.task`); a Hugging Face
    model (model.arch hf) and LoRA adapters need a kind whose model is a base-model folder
    (`TaskEntry.base_model`)."""
    kind, name = c.task.kind, c.data.dataset
    entry = DATASETS.get(name)
    out = []
    base_model = TASKS.get(kind).base_model
    if base_model and c.model.arch != "hf":
        out.append(f"model.arch = {c.model.arch!r}: task {kind} needs model.arch = 'hf'; set it")
    wants = {entry.task} - {kind}
    if not base_model and (c.model.arch == "hf" or c.lora.enabled):
        wants.update(n for n, e in TASKS.items() if e.base_model)
    if wants and kind == TaskConfig.model_fields["kind"].default:
        # The task was left at its default: the dataset (or model) says which one is meant.
        why = [f"data.dataset {name}"] * (entry.task != kind)
        why += ["model.arch hf"] * (c.model.arch == "hf") + ["lora"] * c.lora.enabled
        out.append(
            f"task.kind = {kind!r}: {', '.join(why)} need task.kind = "
            f"{' or '.join(repr(w) for w in sorted(wants))}; set it"
        )
    elif entry.task != kind:
        readers = [n for n, e in DATASETS.items() if e.task == kind]
        read = f"{' or '.join(readers)} records" if readers else "no registered dataset"
        train_file = (
            " and data.options.train_file"
            if any(DATASETS.get(n).load is None for n in readers)
            else ""
        )
        out.append(
            f"data.dataset = {name!r}: task {kind} reads {read}; "
            f"set data.dataset={readers[0] if readers else '...'}{train_file}"
        )
    elif entry.load is None and not c.data.option("train_file"):  # the task reads its files
        out.append(
            f"data.options.train_file is not set: task {kind} needs a .json, .jsonl, .tsv or "
            ".csv file"
        )
    return out


def _text_rules(c: RunConfig) -> list[str]:
    out = []
    for field in ("train_file", "validation_file", "test_file"):
        value = c.data.option(field)
        if value and not value.lower().endswith(TEXT_SUFFIXES):
            out.append(
                f"data.options.{field} = {value!r}: unknown format; use a .json, .jsonl, .tsv "
                "or .csv file"
            )
    template = c.data.option("prompt_template", "{prompt}")
    if "{prompt}" not in template:
        out.append(
            f"data.options.prompt_template = {template!r}: must contain {{prompt}}; "
            "e.g. '{prompt}\\n'"
        )
    name = c.output.model_name
    if name is not None and not _plain_name(name):
        out.append(f"output.model_name = {name!r}: must be {MODEL_NAME_HINT}")
    if c.lora.target_modules is not None and not c.lora.target_modules:
        out.append("lora.target_modules = []: names no module; list some or remove it")
    return out


def _device_rules(c: RunConfig, target: Target) -> list[str]:
    device = target.device if c.training.device == "auto" else c.training.device
    if device not in ("cpu", target.device):
        return [
            f"training.device = {device!r}: {target.label} has no {device.upper()} device; "
            "set training.device=auto or cpu"
        ]
    precision = c.training.precision
    if precision == "fp16" and device != "cuda":
        elsewhere = (
            "; `trainforge validate CONFIG --profile NAME` checks a config meant for other hardware"
            if target.label.startswith("this machine")
            else ""
        )
        return [
            f"training.precision = 'fp16': needs a CUDA device, but this run uses {device} "
            f"({target.label}); set training.precision=auto (fp32 on CPU) or bf16{elsewhere}"
        ]
    if precision == "bf16" and device == "mps":
        return ["training.precision = 'bf16': not supported on MPS; set training.precision=auto"]
    return []
