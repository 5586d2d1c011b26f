"""The run's plan: the recipe (run config + flags) resolved for a target and a process count.

The run config is the recipe: its effective batch (samples per optimizer step, across
accumulation and processes) and its learning-rate schedule are the same on every machine.
The hardware profile only decides how to run it: `hardware.micro_batch_size` caps the
micro-batch, and the plan splits the effective batch over the processes into micro-batches
no larger than that, accumulating the rest. The micro-batches of a step differ by at most
one sample (64 on 3 processes: 22, 21 and 21; `trainforge.data.sampling`), so any process
count trains the recipe's batch and the learning rate never follows the process count; a
count that would leave a process without a sample in every step is refused. A micro-batch
the user's run config sets itself (file, environment or flag) is the user's "how": a cap
too, which a profile may lower but never raise. Learning-rate scaling applies only when the
command line changes the effective batch away from a reference batch the user's config
states (its own batch, or `optimizer.reference_batch_size`), never against the schema's
default. The rule that decided the micro-batch and the rate is kept in `rules`, which
`config show` prints.
Precision and device `auto` are resolved for the target here too, so `config show`, the
run header and `config.resolved.yaml` all show what the run will do, each with its source.

The target is the machine in hand at `train`, and the named profile's hardware for
`validate` / `config show --profile NAME` (a Jetson profile checks fine on a laptop).
Nothing here imports torch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainforge.config.lr_scaling import plan_rate
from trainforge.config.schema import RunConfig, TrainingConfig

if TYPE_CHECKING:
    from trainforge.config.loading import ResolvedConfig
    from trainforge.hardware import Platform
    from trainforge.profiles import Profile

# The effective batch of `per_device_train_batch_size: auto` when nothing names one.
AUTO_GLOBAL_BATCH = 128
# The layers that are the user's own: a value from one of them is the user's "how".
USER_SOURCES = ("file ", "env", "flag")


@dataclass(frozen=True)
class Target:
    """The hardware a config is judged and planned for."""

    device: str  # cuda, mps or cpu: what training.device auto means there
    bf16: bool  # whether that device trains in bf16 (precision auto picks it)
    label: str  # said in messages: "this machine (cpu)", "profile jetson-orin (cuda)"


@dataclass(frozen=True)
class BatchPlan:
    micro_batch: int  # the largest micro-batch of a step; the others are at most 1 smaller
    accumulation: int
    world_size: int
    target: int  # the effective batch asked for, and trained

    @property
    def global_batch(self) -> int:
        return self.target

    @property
    def even(self) -> bool:
        """Every micro-batch of a step holds `micro_batch` samples."""
        return self.micro_batch * self.accumulation * self.world_size == self.target

    def micro_text(self) -> str:
        """`22` or, where the step's micro-batches differ by one sample, `21-22`."""
        if self.even:
            return str(self.micro_batch)
        smallest = self.target // (self.accumulation * self.world_size)
        return f"{smallest}-{self.micro_batch}"


def platform_target(platform: Platform) -> Target:
    bf16 = platform.device == "cuda" and all(
        (g.compute_capability or (8, 0)) >= (8, 0) for g in platform.gpus
    )
    return Target(platform.device, bf16, f"this machine ({platform.device})")


def profile_target(profile: Profile) -> Target:
    """A profile's hardware: its device if it names one, else CUDA when its precision is a
    GPU precision (fp16/bf16), else the CPU."""
    training = profile.settings.get("training") or {}
    precision = training.get("precision", "auto")
    device = training.get("device", "auto")
    if device == "auto":
        device = "cuda" if precision in ("fp16", "bf16") else "cpu"
    return Target(device, device == "cuda", f"profile {profile.name} ({device})")


def plan_accumulation(max_micro_batch: int, target: int, world_size: int = 1) -> BatchPlan:
    """Micro-batch and accumulation for an effective batch of `target` over `world_size`:
    the fewest accumulation steps whose micro-batches, within one sample of each other, stay
    at or under `max_micro_batch`. The effective batch is always `target` itself."""
    assert max_micro_batch >= 1 and target >= 1 and world_size >= 1
    accumulation = math.ceil(target / (world_size * max_micro_batch))
    micro = math.ceil(target / (world_size * accumulation))
    return BatchPlan(micro, accumulation, world_size, target)


def check_split(batch: int, world_size: int) -> None:
    """Refuse, in one line, a process count that leaves a process without a sample in every
    step (more processes than the effective batch): it would compute stand-ins only."""
    if world_size <= batch:
        return
    from trainforge.config.errors import ConfigError
    from trainforge.errors import UserError

    refusal = UserError(
        f"the effective batch {batch} cannot be split over {world_size} processes: "
        f"{world_size - batch} of them would train on no sample in any step",
        f"run on {batch} process{'es' if batch > 1 else ''} or fewer (torchrun "
        f"--nproc-per-node {batch}), or raise training.global_batch_size to at least "
        f"{world_size}",
    )
    raise ConfigError([refusal.line()])


def _recipe_batch(training: dict[str, Any]) -> int | None:
    """The effective batch a layer of training settings asks for (None: not an int)."""
    try:
        if training.get("global_batch_size") is not None:
            return int(training["global_batch_size"])
        micro = training.get("per_device_train_batch_size")
        accumulation = int(training.get("gradient_accumulation_steps") or 1)
        if micro is None:
            micro = TrainingConfig.model_fields["per_device_train_batch_size"].default
        return int(micro) * accumulation if micro != "auto" else None
    except (TypeError, ValueError):
        return None


def _file_training(resolved: ResolvedConfig) -> dict[str, Any]:
    file_data = resolved.layers.get("file")
    file_training = file_data.get("training") if isinstance(file_data, dict) else None
    return file_training if isinstance(file_training, dict) else {}


def reference_batch(resolved: ResolvedConfig) -> tuple[int | None, str]:
    """(the effective batch the learning rate was tuned for, where it is stated):
    optimizer.reference_batch_size, else the batch the run config file itself states
    (defaults under it, no profile, no flags); (None, "") when neither states one, so that
    nothing scales the rate against the schema's default batch."""
    config = resolved.config
    if config.optimizer.reference_batch_size:
        source = resolved.sources.get("optimizer.reference_batch_size", "default")
        return config.optimizer.reference_batch_size, f"optimizer.reference_batch_size, {source}"
    training = _file_training(resolved)
    states = training.get("global_batch_size") is not None or training.get(
        "per_device_train_batch_size"
    ) not in (None, "auto")
    batch = _recipe_batch(training) if states else None
    if batch is None or batch < 1:  # < 1: a bad value, reported by validation
        return None, ""
    where = f"file {resolved.path}" if resolved.path else "the recorded run config"
    return batch, f"the run config's own batch, {where}"


def effective_batch(resolved: ResolvedConfig) -> int:
    """The recipe's effective batch: the run config and the flags, never the profile."""
    t = resolved.config.training
    if t.global_batch_size:
        return t.global_batch_size
    if t.per_device_train_batch_size == "auto":
        return (
            resolved.config.optimizer.reference_batch_size
            or _recipe_batch(_file_training(resolved))
            or AUTO_GLOBAL_BATCH
        )
    return t.per_device_train_batch_size * t.gradient_accumulation_steps


def user_micro_batch(resolved: ResolvedConfig) -> tuple[int, str] | None:
    """(the micro-batch the user's run config sets itself, its source); None when it is the
    schema's default or auto."""
    micro = resolved.config.training.per_device_train_batch_size
    source = resolved.sources.get("training.per_device_train_batch_size", "default")
    if micro == "auto" or not source.startswith(USER_SOURCES):
        return None
    return micro, source


def micro_batch_cap(resolved: ResolvedConfig) -> tuple[int | str, str]:
    """(the largest micro-batch the plan may use, or auto to probe at start; the rule that
    decided it). The user's own micro-batch is a cap that hardware.micro_batch_size may lower
    but never raise; a profile's auto probe does not override it either."""
    config = resolved.config
    hardware = config.hardware.micro_batch_size
    hw_source = resolved.sources.get("hardware.micro_batch_size", "default")
    hw = f"hardware.micro_batch_size {hardware} ({hw_source})"
    probe = "micro-batch auto: the largest that fits is probed at start, the effective batch kept"
    user = user_micro_batch(resolved)
    if config.training.per_device_train_batch_size == "auto":
        return "auto", probe
    if user is None:
        micro = config.training.per_device_train_batch_size
        if hardware == "auto":
            return "auto", f"{probe} ({hw})"
        if hardware is None:
            return micro, (
                f"micro-batch at most {micro}: training.per_device_train_batch_size (default), "
                "no hardware.micro_batch_size"
            )
        return hardware, f"micro-batch at most {hardware}: {hw}"
    micro, source = user
    own = f"the run config's own micro-batch {micro} ({source})"
    if hardware == "auto" and hw_source.startswith(USER_SOURCES):
        return "auto", f"{probe} ({hw})"
    if hardware is None:
        return micro, f"micro-batch at most {micro}: {own}"
    if hardware == "auto":
        return micro, f"micro-batch at most {micro}: {own}; {hw} does not probe over it"
    if hardware < micro:
        return hardware, f"micro-batch at most {hardware}: {hw} lowers {own}"
    return micro, f"micro-batch at most {micro}: {own}; {hw} may lower it, never raise it"


def finalize(resolved: ResolvedConfig, target: Target, world_size: int = 1) -> ResolvedConfig:
    """The ResolvedConfig with the plan filled in (micro-batch, accumulation, effective
    batch, learning rate, warmup, precision, device), sources naming the plan, and the
    lines the run prints about it in `notes`."""
    config, sources, notes = resolved.config, dict(resolved.sources), list(resolved.notes)
    training, batch_rule = _plan_batch(resolved, world_size)
    _mark(sources, training, config.training, "plan")
    optimizer = config.optimizer
    used = training["global_batch_size"]  # the recipe's, on any process count
    reference, where = reference_batch(resolved)
    optimizer, line, rate_rule = plan_rate(optimizer, sources, reference, where, used)
    if line:
        notes.append(line)
    schedule, warmup_note = _fit_warmup(config, sources)
    if warmup_note:
        notes.append(warmup_note)
    training.update(_resolve_device(config.training, target, sources))
    data = _plan_text_batching(config)
    notes += [data[1]] if data[1] else []
    final = config.model_copy(
        update={
            "training": config.training.model_copy(update=training),
            "optimizer": optimizer,
            "schedule": schedule,
            "model": _plan_corpus(resolved, sources),
            "data": data[0],
            "output": _plan_output_names(resolved, sources),
        }
    )
    rules = (batch_rule, rate_rule)  # planned once: the rules of this plan only
    return replace(resolved, config=final, sources=sources, notes=tuple(notes), rules=rules)


def _plan_text_batching(config: Any) -> tuple[Any, str]:
    """The text dataset's train batching (`text_batching`) and its header line ("" for other
    datasets). The device never changes it: packing and length grouping are the recipe's."""
    if config.data.dataset != "text":
        return config.data, ""
    return config.data, text_batching(config.data.options)[2]


def text_batching(options: Any) -> tuple[bool, bool, str]:
    """(packing, group_by_length, the header's line) of the text dataset's options
    (`data.options.packing` / `group_by_length`; grouping applies without packing only)."""
    packing = bool(options.packing)
    group = bool(options.group_by_length) and not packing
    if packing:
        how = "padding-free packed rows (per-example position ids)"
    else:
        how = "padded batches" + (" grouped by length" if group else "")
    return packing, group, f"batching: {how} (data.options)"


def _plan_corpus(resolved: ResolvedConfig, sources: dict[str, str]) -> Any:
    """`model.init_corpus`: the corpus that owns the base model's name is the one the config
    file names, not one a flag swapped in for a smoke test (models/base_model.py)."""
    model = resolved.config.model
    if not model.init_arch or model.init_corpus is not None:
        return model
    data = (resolved.layers.get("file") or {}).get("data") or {}
    options = data.get("options") if isinstance(data.get("options"), dict) else {}
    declared = options.get("train_file") or data.get("train_file")  # either spelling
    declared = declared or getattr(resolved.config.data.options, "train_file", None)
    if not declared:
        return model
    sources["model.init_corpus"] = "plan (the config file's data.options.train_file)"
    return model.model_copy(update={"init_corpus": str(declared)})


def _plan_output_names(resolved: ResolvedConfig, sources: dict[str, str]) -> Any:
    """A run on a corpus other than the config file's own is named with it: the run folder
    `<config name>-<file stem>` and the output model `<model_name>-<file stem>`, so the DGX
    Spark plan's smoke test (`--data_file test_mini.tsv`) and the real run that follows never
    share a folder or a model and neither needs --overwrite; the same command line (its
    `--resume_from_checkpoint` too) always finds the same run. A run name the config or the
    user gives, and a model name from a flag or the environment, are kept."""
    output = resolved.config.output
    data = (resolved.layers.get("file") or {}).get("data") or {}
    options = data.get("options") if isinstance(data.get("options"), dict) else {}
    declared = options.get("train_file") or data.get("train_file")
    used = getattr(resolved.config.data.options, "train_file", None)
    if not declared or not used or resolved.path is None or _same_path(declared, used):
        return output
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(str(used)).stem).strip("._-") or "data"
    why = f"plan (the run's corpus {used} is not the config file's {declared})"
    update: dict[str, Any] = {}
    if output.run_name is None and not _users(sources.get("output.run_name", "")):
        update["run_name"] = f"{resolved.path.stem}-{stem}"
    if output.model_name and not _users(sources.get("output.model_name", ""), file=False):
        update["model_name"] = f"{output.model_name}-{stem}"
    for key in update:
        sources[f"output.{key}"] = why
    return output.model_copy(update=update) if update else output


def _users(source: str, file: bool = True) -> bool:
    """Whether a value came from the user's own layers (with `file=False`: other than the
    config file, whose names belong to its own corpus)."""
    return source.startswith(USER_SOURCES if file else ("env", "flag"))


def _same_path(a: str, b: str) -> bool:
    return Path(a) == Path(b) or Path(a).resolve() == Path(b).resolve()


def apply_batch_plan(resolved: ResolvedConfig, plan: BatchPlan) -> ResolvedConfig:
    """The run with the batch numbers `plan` fitted (`per_device_train_batch_size: auto`):
    micro-batch, accumulation and global batch set and sourced as `batch fit (...)`. The
    effective batch is the plan's target, so the learning rate stays as planned."""
    config = resolved.config
    training = config.training.model_copy(
        update={
            "per_device_train_batch_size": plan.micro_batch,
            "gradient_accumulation_steps": plan.accumulation,
            "global_batch_size": plan.global_batch,
        }
    )
    sources = dict(resolved.sources)
    for key in (
        "training.per_device_train_batch_size",
        "training.gradient_accumulation_steps",
        "training.global_batch_size",
    ):
        sources[key] = f"batch fit ({sources.get(key, 'default')})"
    return replace(
        resolved, config=config.model_copy(update={"training": training}), sources=sources
    )


def _mark(sources: dict[str, str], new: dict[str, Any], old: Any, label: str) -> None:
    for key, value in new.items():
        if getattr(old, key) != value:
            path = f"training.{key}"
            sources[path] = f"{label} ({sources.get(path, 'default')})"


def _plan_batch(resolved: ResolvedConfig, world_size: int) -> tuple[dict[str, Any], str]:
    batch = effective_batch(resolved)
    if batch >= 1:  # < 1: a bad value, reported by validation
        check_split(batch, world_size)
    cap, rule = micro_batch_cap(resolved)
    if not isinstance(cap, int):
        # The micro-batch is probed with real steps at start; the effective batch is kept.
        return {"per_device_train_batch_size": "auto", "global_batch_size": batch}, rule
    plan = plan_accumulation(min(cap, batch), batch, world_size)
    out = {
        "per_device_train_batch_size": plan.micro_batch,
        "gradient_accumulation_steps": plan.accumulation,
        "global_batch_size": plan.global_batch,
    }
    return out, rule


def fitted_warmup(
    warmup: float, length: float, unit: str, given: str = ""
) -> tuple[float, str] | None:
    """The one warmup rule, for the plan (steps or epochs, before the data is known) and the
    engine (steps, once they are counted): a warmup as long as the run or longer is
    shortened to a tenth of the run. (the shortened warmup, the line that says so), or None
    when it fits. `unit` is "step" (whole steps) or "epoch"; `given` prefixes the warmup as
    it was asked for (e.g. `2 epochs = `)."""
    if warmup == 0 or warmup < length:
        return None
    short = int(length) // 10 if unit == "step" else length / 10
    return short, (
        f"schedule: warmup of {given}{_num(warmup)} {unit}s does not fit the "
        f"{_num(length)}-{unit} run; shortened to {_num(short)} (a tenth of the run)"
    )


def _num(value: float) -> str:
    """A whole count as written (`1000000`), a fraction as short as it reads (`0.5`)."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _fit_warmup(config: RunConfig, sources: dict[str, str]) -> tuple[Any, str]:
    """A run shortened on the command line keeps a warmup that fits (`fitted_warmup`). A
    warmup longer than what the file itself asks for stays an error (config checks)."""
    s, t = config.schedule, config.training
    from_flag = {k for k, v in sources.items() if v.startswith("flag")}
    if s.warmup_steps is not None and t.max_steps > 0 and "training.max_steps" in from_flag:
        key, fitted = "warmup_steps", fitted_warmup(s.warmup_steps, t.max_steps, "step")
    elif s.warmup_steps is None and t.max_steps < 0 and "training.num_train_epochs" in from_flag:
        key, fitted = "warmup_epochs", fitted_warmup(s.warmup_epochs, t.num_train_epochs, "epoch")
    else:
        return s, ""
    if fitted is None:
        return s, ""
    _mark_plan(sources, f"schedule.{key}", "shortened to a tenth of the run")
    return s.model_copy(update={key: fitted[0]}), fitted[1]


def _mark_plan(sources: dict[str, str], path: str, why: str) -> None:
    """Source a value the plan changed as `plan (why; where it came from)`."""
    sources[path] = f"plan ({why}; was {sources.get(path, 'default')})"


def _resolve_device(t: TrainingConfig, target: Target, sources: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    device = target.device if t.device == "auto" else t.device
    if t.device == "auto":
        out["device"] = device
        sources["training.device"] = f"auto: {target.label}"
    if t.precision == "auto":
        out["precision"] = ("bf16" if target.bf16 else "fp16") if device == "cuda" else "fp32"
        sources["training.precision"] = f"auto: {device}"
    return out


# ------------------------------------------------------------ a causal LM's eval batch
@dataclass(frozen=True)
class LMShape:
    """What a causal LM's evaluation memory depends on (bytes: its weights as loaded)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    seq_len: int
    model_bytes: int
    chunk_elements: int = 1 << 24  # `tasks.lm_loss.CHUNK_ELEMENTS`


def lm_eval_bytes(shape: LMShape, batch: int) -> int:
    """An upper estimate of an evaluation pass's peak at `batch` rows (no gradients): the
    weights, the loss's chunk of fp32 logits with its softmax (never `[B, T, V]`), per row
    greedy decoding's next-token fp32 logits and their processed copies (3 x V), the
    activations of one layer and the KV cache over the sequence."""
    s = shape
    fixed = s.model_bytes + 3 * 4 * s.chunk_elements
    per_row = 4 * (3 * s.vocab_size + 8 * s.seq_len * s.hidden_size)
    per_row += 4 * 2 * s.num_layers * s.seq_len * s.hidden_size
    return fixed + batch * per_row


def lm_eval_batch(eval_batch: int, shape: LMShape, budget_bytes: int) -> tuple[int, str | None]:
    """(the eval batch to use, the line that says why it is lower, or None): the largest
    batch up to `eval_batch` whose estimated peak fits `budget_bytes`, at least 1."""
    if lm_eval_bytes(shape, eval_batch) <= budget_bytes:
        return eval_batch, None
    per_row = lm_eval_bytes(shape, 1) - lm_eval_bytes(shape, 0)
    fits = max(1, (budget_bytes - lm_eval_bytes(shape, 0)) // per_row)
    fits = min(eval_batch, int(fits))
    gib = 1024**3
    line = (
        f"evaluation: per_device_eval_batch_size {eval_batch} lowered to {fits}: the "
        f"{shape.vocab_size:,}-token head needs about {lm_eval_bytes(shape, eval_batch) / gib:.1f}"
        f" GiB at {eval_batch}, over the {budget_bytes / gib:.1f} GiB budget"
    )
    return fits, line
