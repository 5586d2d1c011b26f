"""The typed run config: one pydantic model per section, unknown keys rejected.

A run config says *what* to train; a hardware profile (see `trainforge.profiles`) supplies
*how* by setting fields of the same schema. Option names follow Hugging Face
`TrainingArguments` where one exists, so users coming from the Trainer read them at once.
Each field's description is its documentation (units included); `trainforge config show`
and docs/configuration.md are generated from them.

An extension's own options are not listed here: the entry that `data.dataset`,
`optimizer.name` or a logger's name picks owns an options model (`trainforge.registry`),
and its section holds a mapping the entry validates (`data.options`, `optimizer.args`,
`logging.options`). The fields the built-ins had here before keep working in their old flat
spelling (`data.download`, `optimizer.momentum`): they move into the mapping when the entry
takes them and are left out, as they always had no effect, when it does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from trainforge.options import check_options, options_model
from trainforge.registry import (
    CLASS_PATH,
    DATASETS,
    LOGGERS,
    OPTIMIZERS,
    PROFILES,
    SCHEDULES,
    TASKS,
    Registry,
)

Precision = Literal["auto", "fp32", "fp16", "bf16"]
Device = Literal["auto", "cuda", "mps", "cpu"]


def Registered(registry: Registry) -> Any:
    """A string that must be a name in `registry`; otherwise the registry's one-line
    did-you-mean error. Checked at validation time, so names registered later count."""

    return Annotated[str, AfterValidator(lambda value: registered(registry, value))]


def registered(registry: Registry, value: str) -> str:
    """`value` when `registry` has it; else the registry's one-line did-you-mean error."""
    if value not in registry:
        raise ValueError(registry.unknown_message(value))
    return value


def choices(registry: Registry) -> str:
    """`name (description)` for every registered name: the fields' documentation."""
    return "; ".join(f"{name} ({describe(entry)})" for name, entry in registry.items())


def describe(entry: object) -> str:
    """An entry's one-line description (its `description`, else its docstring's first line)."""
    text = getattr(entry, "description", None) or (getattr(entry, "__doc__", None) or "")
    return text.strip().splitlines()[0] if text.strip() else ""


def owned_options(registry: Registry, name: str | None, given: Any) -> Any:
    """`given` read by the options model of `registry`'s entry `name`; each problem becomes
    one line of the config error (`entry_options`, formatted in `config.errors`). With no
    entry (the name itself is wrong, and reported there) the value stays as given."""
    entry = registry.find(name) if isinstance(name, str) else None
    if entry is None:
        return given
    options, problems = check_options(options_model(entry), given, f"{registry.kind} {name}")
    if options is None:
        raise PydanticCustomError("entry_options", "invalid options", {"problems": problems})
    return options


def fold_flat(
    data: Any, aliases: tuple[str, ...], target: str, registry: Registry, key: str, default: str
) -> Any:
    """A section's old flat spellings (`data.download`) moved into its options mapping
    (`data.options.download`) when the entry picked by `key` takes them; left out when it
    does not (they never applied to it). A value in the mapping wins over a flat one."""
    if not isinstance(data, dict) or not any(alias in data for alias in aliases):
        return data
    data = dict(data)
    name = data.get(key, default)
    entry = registry.find(name) if isinstance(name, str) else None
    takes = set(options_model(entry).model_fields) if entry is not None else set(aliases)
    given = data.get(target)
    options = dict(given) if isinstance(given, dict) else {}
    for alias in aliases:
        if alias in data:
            value = data.pop(alias)
            if alias in takes:
                options.setdefault(alias, value)
    if given is None or isinstance(given, dict):
        data[target] = options
    return data


class Section(BaseModel):
    """Base for every section: unknown keys are errors, values are frozen after load."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class TaskConfig(Section):
    kind: Registered(TASKS) = Field(
        "image-classification",
        description=f"What is trained: {choices(TASKS)}. The task supplies model, batches, "
        "loss and metrics; more kinds: trainforge.registry.TASKS.register.",
    )

    label_smoothing: float = Field(
        0.1, ge=0.0, lt=1.0, description="Label smoothing α for cross-entropy (ViT guide: 0.1)."
    )
    eval_generation: bool = Field(
        False,
        description="causal-lm: greedy-decode every validation prompt and report per (edit "
        "distance over the target's space-separated units, e.g. phonemes) and wer (share of "
        "outputs not exactly right).",
    )
    max_new_tokens: int = Field(
        48, ge=1, description="causal-lm: tokens generated per prompt by eval_generation."
    )


class ModelConfig(Section):
    arch: Literal["vit", "hf"] = Field(
        "vit", description="Model family: vit, or hf (a Hugging Face causal LM folder)."
    )
    model_name_or_path: str | None = Field(
        None,
        description="hf: base model folder (save_pretrained layout), e.g. models/NAME; a bare "
        "NAME means models/NAME. Read offline (local_files_only).",
    )
    init_arch: Literal["gpt2", "llama"] | None = Field(
        None,
        description="hf: when model_name_or_path does not exist, create it as a randomly "
        "initialised model of this family with a tokenizer trained on data.train_file.",
    )
    init_size: Literal["tiny", "small", "g2p"] = Field(
        "tiny", description="hf: size preset for init_arch (see `trainforge models init`)."
    )
    init_corpus: str | None = Field(
        None,
        description="hf with init_arch: the corpus that owns the name model_name_or_path (planned "
        "from the config file's data.options.train_file). A run on another corpus, such as a "
        "smoke test's file given with --data_file, gets a base model of its own, "
        "NAME-<corpus stem>-<hash prefix>.",
    )
    patch_size: int = Field(4, ge=1, description="Side of a square image patch, in pixels.")
    embedding_dim: int = Field(384, ge=8, description="Token width of the transformer.")
    num_layers: int = Field(12, ge=1, le=128, description="Number of transformer blocks.")
    num_heads: int = Field(
        6, ge=1, description="Attention heads per block; must divide embedding_dim."
    )
    mlp_size: int = Field(1536, ge=8, description="Hidden width of each block's MLP.")
    attention_dropout: float = Field(
        0.1, ge=0.0, lt=1.0, description="Dropout on attention weights."
    )
    mlp_dropout: float = Field(0.1, ge=0.0, lt=1.0, description="Dropout after the MLP layers.")
    init_from: str | None = Field(
        None,
        description="Start from another run's weights: a run folder (its final model, else its "
        "verified best checkpoint, else its newest), a checkpoint folder, an exported "
        "safetensors folder or a .safetensors file; causal-lm: also a Hugging Face model or "
        "LoRA adapter folder. "
        "Matching tensors load, a classifier head of another size is re-initialised, the "
        "optimizer starts fresh. Not re-applied on --resume.",
    )
    freeze: Literal["none", "backbone"] = Field(
        "none",
        description="vit: backbone trains only the classifier head (on-device adaptation "
        "with little memory); none trains every weight.",
    )


class DataConfig(Section):
    dataset: Registered(DATASETS) = Field(
        "cifar10",
        description=f"The dataset: {choices(DATASETS)}. More datasets: "
        "trainforge.registry.DATASETS.register.",
    )

    root: str = Field("data/cifar10", description="Folder holding the data set files.")
    options: Any = Field(
        default_factory=dict,
        description="The dataset's own options, checked by its entry (see 'Dataset options' "
        "below): cifar10's download, image-folder's image_size, val_fraction and "
        "skip_bad_images, digits' val_fraction, text's train_file, validation_file, "
        "test_file, header, max_seq_length, packing, prompt_template, use_chat_template and "
        "val_fraction. Their flat spellings (data.download, data.train_file, ...) still "
        "load, with a notice (see 'Old flat spellings').",
    )
    dataloader_num_workers: int = Field(
        0, ge=0, le=64, description="Loader worker processes (0: load in the main process)."
    )
    pin_memory: bool = Field(True, description="Page-locked host batches (CUDA only).")
    prefetch_factor: int | None = Field(
        2, ge=1, description="Batches each worker loads ahead (workers > 0 only)."
    )
    persistent_workers: bool = Field(True, description="Keep workers alive between epochs.")
    random_crop_padding: int | None = Field(
        None, ge=0, description="Training RandomCrop padding in pixels (None: data set default)."
    )
    horizontal_flip: bool | None = Field(
        None, description="Training RandomHorizontalFlip(p=0.5) (None: data set default)."
    )
    normalize_mean: list[float] | None = Field(
        None, description="Per-channel mean (None: data set default)."
    )
    normalize_std: list[float] | None = Field(
        None, description="Per-channel std (None: data set default)."
    )

    @model_validator(mode="before")
    @classmethod
    def _flat_options(cls, data: Any) -> Any:
        _fixed_size_refusal(data)
        return fold_flat(data, DATA_FLAT, "options", DATASETS, "dataset", "cifar10")

    @field_validator("options")
    @classmethod
    def _dataset_options(cls, value: Any, info: ValidationInfo) -> Any:
        return owned_options(DATASETS, info.data.get("dataset"), value)

    def option(self, name: str, default: Any = None) -> Any:
        """The dataset's option `name` (`default` when its entry has no such option)."""
        return getattr(self.options, name, default)

    def with_options(self, **changes: Any) -> DataConfig:
        """A copy whose dataset options have `changes` (checked by the entry again)."""
        given = self.options.model_dump() if isinstance(self.options, BaseModel) else {}
        return self.model_copy(update={"options": self._reread({**given, **changes})})

    def _reread(self, given: dict[str, Any]) -> Any:
        return owned_options(DATASETS, self.dataset, given)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Any:
        """pydantic's copy; an update that names a text option by its old field
        (`validation_file`) goes to the options, as `with_options` does."""
        rest = dict(update or {})
        moved = {name: rest.pop(name) for name in list(rest) if name in TEXT_FLAT}
        copied = super().model_copy(update=rest or None, deep=deep)
        return copied.with_options(**moved) if moved else copied

    # The text dataset's options as they were read before its entry owned them
    # (`cfg.data.train_file`): its defaults where another dataset is picked. Kept with the
    # flat spellings (see DATA_FLAT) for readers not moved to `cfg.data.options` yet.
    @property
    def train_file(self) -> str | None:
        return self._text("train_file")

    @property
    def validation_file(self) -> str | None:
        return self._text("validation_file")

    @property
    def test_file(self) -> str | None:
        return self._text("test_file")

    @property
    def header(self) -> bool | str:
        return self._text("header")

    @property
    def max_seq_length(self) -> int:
        return self._text("max_seq_length")

    @property
    def packing(self) -> bool:
        return self._text("packing")

    @property
    def prompt_template(self) -> str:
        return self._text("prompt_template")

    @property
    def use_chat_template(self) -> bool:
        return self._text("use_chat_template")

    def _text(self, name: str) -> Any:
        text = options_model(DATASETS.find("text")).model_fields.get(name)
        return self.option(name, text.default if text is not None else None)

    @model_validator(mode="after")
    def _check_normalisation(self) -> DataConfig:
        if (self.normalize_mean is None) != (self.normalize_std is None):
            raise ValueError("normalize_mean and normalize_std must be given together")
        if self.normalize_mean is not None and len(self.normalize_mean) != len(
            self.normalize_std or []
        ):
            raise ValueError("normalize_mean and normalize_std must have the same length")
        if self.normalize_std is not None and any(s <= 0 for s in self.normalize_std):
            raise ValueError("normalize_std values must be > 0")
        return self


# The dataset options that were flat fields of `data` before the entries owned them: the
# image datasets' and then the text dataset's. They load, with a notice, until
# FLAT_SPELLINGS_UNTIL (docs/configuration.md, "Old flat spellings").
TEXT_FLAT = (
    "train_file", "validation_file", "test_file", "header", "max_seq_length", "packing",
    "prompt_template", "use_chat_template",
)  # fmt: skip
DATA_FLAT = ("download", "image_size", "val_fraction", "skip_bad_images", *TEXT_FLAT)


def _fixed_size_refusal(data: Any) -> None:
    """A flat `data.image_size` for a dataset of fixed size is refused, as it always was."""
    if not isinstance(data, dict) or data.get("image_size") is None:
        return
    name = data.get("dataset", "cifar10")
    entry = DATASETS.find(name) if isinstance(name, str) else None
    side = getattr(entry, "image_size", None)
    if side is not None and data["image_size"] != side:
        resized = [n for n, e in DATASETS.items() if e.channels and e.image_size is None]
        raise ValueError(
            f"data.image_size = {data['image_size']}: {name} images are {side}x{side}; "
            f"remove data.image_size (it applies to {', '.join(resized)} only)"
        )


class OptimizerConfig(Section):
    name: str = Field(
        "adamw",
        description=f"Optimizer: one of {', '.join(OPTIMIZERS.names())} (adamw as in the ViT "
        "guide), or the dotted class path of a torch.optim.Optimizer subclass (e.g. "
        "torch.optim.RMSprop, given learning_rate; weight_decay per group). Every choice "
        "keeps biases, norms, class token and positions free of weight decay. More names: "
        "trainforge.registry.OPTIMIZERS.register.",
    )
    learning_rate: float = Field(3e-4, gt=0.0, le=10.0, description="Peak learning rate.")
    weight_decay: float = Field(0.01, ge=0.0, description="Decoupled weight decay.")
    args: Any = Field(
        default_factory=dict,
        description="The optimizer's own arguments, checked by its builder (see 'Optimizer "
        "arguments' below): adamw's adam_beta1, adam_beta2, adam_epsilon and fused, sgd's "
        "momentum; a class path's keyword arguments (e.g. {alpha: 0.9} for "
        "torch.optim.RMSprop), checked against its signature when it is built. The flat "
        "spellings optimizer.adam_beta1, ... optimizer.momentum still work.",
    )
    lr_scaling: Literal["linear", "sqrt", "none"] = Field(
        "linear",
        description="When the command line changes the effective batch away from the "
        "reference batch the user's config states (optimizer.reference_batch_size, else the "
        "run config file's own batch; none stated: never scaled), scale learning_rate by "
        "new/reference (linear, the "
        "training-optimisation notes' rule: 3e-4 x 20/24 = 2.5e-4), by its square root, or "
        "not at all. A profile, the process count or a micro-batch probe never changes the "
        "effective batch, so they never scale the rate; a learning rate given on the command "
        "line is taken as meant for the batch in use.",
    )
    reference_batch_size: int | None = Field(
        None,
        ge=1,
        description="Effective batch learning_rate was tuned for (None: the effective batch "
        "the run config file itself states; a file that states none is never scaled, since "
        "the schema's default batch is no batch anyone tuned a rate for).",
    )

    @model_validator(mode="before")
    @classmethod
    def _flat_args(cls, data: Any) -> Any:
        return fold_flat(data, OPTIMIZER_FLAT, "args", OPTIMIZERS, "name", "adamw")

    @field_validator("args")
    @classmethod
    def _builder_args(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.data.get("name")
        if name is not None and name not in OPTIMIZERS:  # a class path: its signature decides
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise ValueError("must be a mapping of argument: value, e.g. {alpha: 0.9}")
            return dict(value)
        return owned_options(OPTIMIZERS, name, value)

    def arg(self, name: str, default: Any = None) -> Any:
        """The optimizer's argument `name` (`default` when its builder has no such one)."""
        if isinstance(self.args, dict):
            return self.args.get(name, default)
        return getattr(self.args, name, default)

    @field_validator("name")
    @classmethod
    def _known_optimizer(cls, value: str) -> str:
        # The class path is imported when the optimizer is built (that needs torch).
        if value not in OPTIMIZERS and not CLASS_PATH.match(value):
            raise ValueError(
                f"{OPTIMIZERS.unknown_message(value)}, or a class path such as torch.optim.RMSprop"
            )
        return value


# The optimizer arguments that were flat fields of `optimizer` before the builders owned them.
OPTIMIZER_FLAT = ("adam_beta1", "adam_beta2", "adam_epsilon", "momentum", "fused")


class ScheduleConfig(Section):
    lr_scheduler_type: Registered(SCHEDULES) = Field(
        "cosine",
        description=f"Decay after warmup: {choices(SCHEDULES)}. More schedules: "
        "trainforge.registry.SCHEDULES.register.",
    )
    warmup_epochs: float = Field(5.0, ge=0.0, description="Linear warmup length in epochs.")
    warmup_steps: int | None = Field(
        None, ge=0, description="Warmup length in optimizer steps; overrides warmup_epochs."
    )
    min_lr: float = Field(0.0, ge=0.0, description="Learning rate at the end of the decay.")


class TrainingConfig(Section):
    num_train_epochs: float = Field(100, gt=0, description="Epochs to train (ViT guide: 100).")
    max_steps: int = Field(
        -1, ge=-1, description="Optimizer steps to train; -1 uses num_train_epochs."
    )
    per_device_train_batch_size: int | Literal["auto"] = Field(
        128,
        description="The recipe's batch per optimizer step on one device, before "
        "accumulation: per_device_train_batch_size x gradient_accumulation_steps is the "
        "effective batch unless global_batch_size names it. The hardware profile never "
        "changes the effective batch; the resolved plan splits it over processes and "
        "micro-batches (hardware.micro_batch_size) and writes the micro-batch here. Set by the "
        "run config itself (file, environment or flag), it is also the largest micro-batch: a "
        "profile may lower it, never raise it (the Jetson guide's 1 x 4 stays 1 x 4). auto: "
        "keep the effective batch and probe the largest micro-batch that fits.",
    )
    global_batch_size: int | None = Field(
        None,
        ge=1,
        description="Effective batch: samples per optimizer step across accumulation and "
        "processes (the recipe). None: per_device_train_batch_size x "
        "gradient_accumulation_steps as the run config gives them.",
    )
    batch_fit_margin: float = Field(
        0.1,
        ge=0.0,
        lt=1.0,
        description="per_device_train_batch_size auto: share of the memory budget kept free "
        "(0.1 = 10%).",
    )
    gradient_accumulation_steps: int = Field(
        1,
        ge=1,
        description="Micro-batches per optimizer step in the recipe; the resolved plan sets "
        "the accumulation that reaches the effective batch with the hardware's micro-batch.",
    )
    max_grad_norm: float | None = Field(
        1.0, gt=0.0, description="Gradient clipping norm (None: off)."
    )
    precision: Precision = Field(
        "auto", description="auto (bf16/fp16 on CUDA, fp32 elsewhere), fp32, fp16 or bf16."
    )
    gradient_checkpointing: bool = Field(False, description="Recompute activations in backward.")
    max_training_hours: float | None = Field(
        None,
        gt=0.0,
        description="Stop (with a checkpoint) after this much training time, in hours.",
    )
    seed: int = Field(42, ge=0, description="Seed for Python, NumPy and torch RNGs.")
    device: Device = Field("auto", description="auto, cuda, mps or cpu.")
    num_threads: int | None = Field(
        None, ge=1, description="CPU threads for torch (None: all cores)."
    )
    compile: bool = Field(False, description="Wrap the model in torch.compile.")
    channels_last: bool = Field(
        False,
        description="Keep the model and image batches in channels-last memory format "
        "(faster convolutions on tensor cores; vision tasks).",
    )
    cudnn_benchmark: bool = Field(
        False,
        description="CUDA: let cuDNN time its convolution algorithms and keep the fastest "
        "(fixed input sizes; the chosen algorithm may differ between runs, so bitwise "
        "reproducibility on the GPU is traded away).",
    )
    skip_nonfinite_steps: bool = Field(
        True,
        description="Skip the optimizer step when the loss or gradient is NaN/Inf "
        "(one scalar read per step; on CUDA with fused AdamW the check and the skip stay on "
        "the GPU and the skips are read at logging points, so no step waits for the GPU).",
    )
    max_consecutive_nonfinite_steps: int = Field(
        10, ge=1, description="Stop the run after this many skipped steps in a row."
    )

    @field_validator("per_device_train_batch_size", mode="before")
    @classmethod
    def _batch_or_auto(cls, value: object) -> object:
        # One clear message instead of one per member of the int | "auto" union.
        if value == "auto":
            return value
        try:
            number = int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            number = None
        whole = number is not None and (number == value or str(number) == value)
        if isinstance(value, bool) or not whole:
            raise ValueError("must be a whole number of at least 1, or auto")
        if number < 1:
            raise ValueError("must be greater than or equal to 1, or auto")
        return number


class EvaluationConfig(Section):
    eval_every_epochs: int | None = Field(
        1, ge=1, description="Validate every N epochs (guide: 1)."
    )
    eval_steps: int | None = Field(None, ge=1, description="Also validate every N optimizer steps.")
    per_device_eval_batch_size: int = Field(256, ge=1, description="Batch size for validation.")
    metric_for_best_model: Literal["accuracy", "loss", "perplexity", "per", "wer"] = Field(
        "accuracy",
        description="Validation metric that decides the best checkpoint (perplexity, per, "
        "wer: causal-lm; per and wer need task.eval_generation).",
    )
    greater_is_better: bool | None = Field(
        None,
        description="Direction of metric_for_best_model (None: accuracy up, every other "
        "metric down).",
    )
    fast_eval_steps: int | None = Field(
        None,
        ge=1,
        description="Fast validation on a fixed subset every N optimizer steps (None: off).",
    )
    fast_eval_fraction: float = Field(
        0.1, gt=0.0, le=1.0, description="Share of the validation set fast validation uses."
    )
    full_eval_on_fast_improvement: bool = Field(
        True, description="Run full validation whenever fast validation improves."
    )
    generation_samples: int | None = Field(
        512,
        ge=1,
        description="causal-lm with task.eval_generation: validation prompts greedy-decoded "
        "during training (a fixed, evenly spaced subset; None: all). The loss covers every "
        "example; the end of the run decodes the whole splits.",
    )


class CheckpointConfig(Section):
    save_every_epochs: int | None = Field(
        5, ge=1, description="Periodic checkpoint every N epochs."
    )
    save_steps: int | None = Field(None, ge=1, description="Periodic checkpoint every N steps.")
    save_total_limit: int | None = Field(
        3, ge=1, description="Periodic checkpoints kept; best and newest are never deleted."
    )
    save_best: bool = Field(True, description="Keep best_model by metric_for_best_model.")
    save_on_time_limit: bool = Field(True, description="Write checkpoint_time_limit on time out.")
    save_final_model: bool = Field(True, description="Write model.safetensors at the end.")
    async_save: bool = Field(
        True,
        description="Copy the state to CPU memory, then write it on a background thread.",
    )
    on_save_error: Literal["stop", "continue"] = Field(
        "stop",
        description="A save the disk refuses (full, read-only): stop (exit 2, the previous "
        "checkpoint intact) or continue training without that checkpoint.",
    )


class LoggingConfig(Section):
    logging_steps: int = Field(
        50, ge=1, description="Log training metrics every N steps (guide: 50)."
    )
    tensorboard: bool = Field(True, description="Write TensorBoard events to the run folder.")
    jsonl: bool = Field(True, description="Write metrics.jsonl to the run folder.")
    progress_bar: bool = Field(True, description="Show a progress bar on a terminal.")
    report: bool = Field(
        True,
        description="Draw RUN/report.html (plots, per-class accuracy, summary) when the run "
        "ends; false ends the run without drawing it (about 1-3 s of matplotlib on a laptop "
        "CPU), and `trainforge report RUN` draws it later from the same run folder.",
    )
    histogram_steps: int | None = Field(
        500, ge=1, description="Weight histograms to TensorBoard every N steps (None: off)."
    )
    mlflow: bool = Field(False, description="Log params and metrics to MLflow.")
    mlflow_tracking_uri: str | None = Field(
        None, description="MLflow tracking URI (None: SQLite store RUN/mlflow.db)."
    )
    mlflow_experiment: str = Field("trainforge", description="MLflow experiment name.")
    wandb: bool = Field(False, description="Log params and metrics to Weights & Biases.")
    wandb_mode: Literal["offline", "online"] = Field(
        "offline",
        description="offline needs no key (sync later with `wandb sync`); online needs "
        "WANDB_API_KEY in the environment (never written to any file).",
    )
    wandb_project: str = Field("trainforge", description="W&B project name.")
    profile_steps: int | None = Field(
        None,
        ge=1,
        description="Record torch.profiler for this many steps and write RUN/profiler/*.pt."
        "trace.json (Perfetto, TensorBoard) plus the top operators (None: off, no cost).",
    )
    profile_wait_steps: int = Field(
        5, ge=0, description="Steps before the profiler window opens (warm-up is slower)."
    )
    wandb_entity: str | None = Field(
        None, description="W&B team or user the run belongs to (None: the account's default)."
    )
    wandb_run_group: str | None = Field(None, description="W&B group of related runs.")
    wandb_dir: str | None = Field(
        None, description="Parent folder of W&B run files (None: the run folder)."
    )
    loggers: list[str] = Field(
        [],
        description=f"Loggers turned on by name, beside the switches above: {choices(LOGGERS)}. "
        "More loggers: trainforge.registry.LOGGERS.register.",
    )

    options: dict[str, Any] = Field(
        {},
        description="Each logger's own options by its name, checked by its entry (see "
        "'Logger options' below), e.g. {my-logger: {every: 10}}.",
    )

    @field_validator("loggers")
    @classmethod
    def _known_loggers(cls, value: list[str]) -> list[str]:
        return [registered(LOGGERS, name) for name in value]

    @field_validator("options")
    @classmethod
    def _logger_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        problems: list[tuple[str, Any, str]] = []
        for name, given in value.items():
            if name not in LOGGERS:
                problems.append((name, None, LOGGERS.unknown_message(name)))
                continue
            model = options_model(LOGGERS.find(name))
            options, found = check_options(model, given, f"logger {name}")
            out[name] = options
            problems.extend((f"{name}.{key}".rstrip("."), v, why) for key, v, why in found)
        if problems:
            raise PydanticCustomError("entry_options", "invalid options", {"problems": problems})
        return out

    def options_for(self, name: str) -> Any:
        """Logger `name`'s options: as given in `options`, else its model's defaults."""
        if name in self.options:
            return self.options[name]
        return options_model(LOGGERS.find(name))()

    progress_interval_s: float = Field(
        30.0,
        ge=0.0,
        description="Without a terminal (Slurm, Docker, nohup, the web app's log): a progress "
        "line at every logging point and at least every N seconds (0: every step).",
    )


class OutputConfig(Section):
    dir: str = Field("runs", description="Parent folder of run folders.")
    run_name: str | None = Field(None, description="Run folder name (None: config file name).")
    overwrite: bool = Field(
        False,
        description="Replace an existing run folder that has checkpoints, and an existing "
        "output model folder (models_dir/model_name).",
    )
    model_name: str | None = Field(
        None,
        description="causal-lm: also write the final model to models_dir/model_name as a "
        "Hugging Face folder (the --output-name flag).",
    )
    models_dir: str = Field("models", description="Folder of Hugging Face model folders.")


class HardwareConfig(Section):
    micro_batch_size: int | Literal["auto"] | None = Field(
        None,
        description="Largest micro-batch per device this hardware runs (a profile's "
        "setting): the plan splits each process's share of the effective batch into "
        "micro-batches no larger than this and accumulates the rest; a micro-batch the run "
        "config sets itself (training.per_device_train_batch_size) stays a cap this only "
        "lowers. auto: probe the largest that fits the memory budget with real training "
        "steps. None: no limit.",
    )

    @field_validator("micro_batch_size", mode="before")
    @classmethod
    def _micro_or_auto(cls, value: object) -> object:
        if value is None or value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError("must be a whole number of at least 1, auto, or null")
        return value

    memory_budget_gib: float | None = Field(
        None, gt=0.0, description="Device memory the run may use, in GiB (profile guidance)."
    )
    telemetry: bool = Field(
        True, description="Sample CPU/RAM, GPU (NVML) or Jetson (tegrastats or jtop) telemetry."
    )
    telemetry_interval_s: float = Field(
        5.0,
        gt=0.0,
        description="Telemetry sampling period: read at logging points, at most once per period.",
    )
    launcher: Literal["local", "torchrun", "slurm"] = Field(
        "local",
        description="How the profile expects the job to start: one process, torchrun, or "
        "Slurm. A single process on a machine with several GPUs, where torchrun or Slurm is "
        "expected, says so at start with the command that uses all of them.",
    )
    distributed_backend: Literal["auto", "nccl", "gloo"] = Field(
        "auto", description="torch.distributed backend (auto: NCCL on CUDA, Gloo on CPU)."
    )
    distributed_timeout_s: float = Field(
        600.0,
        gt=0.0,
        description="Seconds a collective waits for a silent peer (a stopped or hung rank) "
        "before the job ends with one line naming that rank (torch's default: 600).",
    )
    data_parallel: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="Several processes: ddp (a full model per process) or fsdp (FSDP2 "
        "fully_shard: parameters, gradients and optimizer state sharded; checkpoints through "
        "torch.distributed.checkpoint).",
    )
    swap_directory: str | None = Field(
        None, description="Folder for temporary state (created on demand)."
    )
    peak_tflops: float | None = Field(
        None,
        gt=0.0,
        description="Device peak TFLOPS for MFU (None: from the built-in table by GPU name).",
    )
    measure_peak: bool = Field(
        True,
        description="Also measure the device's dense matmul peak in the run's precision (a "
        "probe of under a second, cached per machine and runtime) and report MFU against it "
        "(mfu_measured; mfu itself where the table has no peak, e.g. on a CPU).",
    )
    slurm_requeue: bool = Field(
        True,
        description="Under Slurm, SIGUSR1 checkpoints and requeues the job (scontrol requeue).",
    )


class LoraConfig(Section):
    """LoRA adapters through peft (names as in peft.LoraConfig)."""

    enabled: bool = Field(False, description="causal-lm: train LoRA adapters, base frozen.")
    r: int = Field(8, ge=1, description="LoRA rank.")
    lora_alpha: float = Field(16.0, gt=0.0, description="LoRA scaling α (update × α / r).")
    lora_dropout: float = Field(0.05, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    target_modules: list[str] | None = Field(
        None,
        description="Module names to adapt, e.g. [q_proj, v_proj] (None: peft's default for "
        "the architecture).",
    )
    merge_adapter: bool = Field(
        False,
        description="Merge the adapter into the base weights for the output model "
        "(merge_and_unload); otherwise the output is the adapter folder.",
    )


class RunConfig(Section):
    """A whole run. Cross-field rules live in `trainforge.config.checks`."""

    name: str | None = Field(None, description="Human name of the config.")
    profile: str = Field(
        "auto",
        description=f"Hardware profile: {', '.join(PROFILES.names())}, a profile file "
        "(.yaml), or auto to pick by the hardware found.",
    )
    notes: str | None = Field(None, description="Free text shown next to the run.")
    extensions: list[str] = Field(
        [],
        description="Plugins imported before names are checked: module names or .py files "
        "that register datasets, optimizers, loggers, export formats (--extension adds one).",
    )
    task: TaskConfig = TaskConfig()
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    training: TrainingConfig = TrainingConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    logging: LoggingConfig = LoggingConfig()
    output: OutputConfig = OutputConfig()
    hardware: HardwareConfig = HardwareConfig()
    lora: LoraConfig = LoraConfig()


def leaf_paths(model: type, prefix: str = "") -> list[str]:
    """Dotted paths of every leaf field of a pydantic model class (an entry's options
    mapping, such as `data.options`, is one leaf: its fields depend on the entry)."""
    out: list[str] = []
    for name, info in model.model_fields.items():  # type: ignore[attr-defined]
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, Section):
            out.extend(leaf_paths(ann, f"{prefix}{name}."))
        else:
            out.append(f"{prefix}{name}")
    return out


# The version that stops reading the old flat spellings below: until then a config file,
# the environment or `--set` may use them and the run prints one line naming them
# (`config.loading.flat_spelling_notice`); from it on they are unknown fields.
FLAT_SPELLINGS_UNTIL = "0.3.0"
# Options mappings -> the old flat spellings they took over (`--set data.download=false`).
OWNED_OPTIONS: dict[str, tuple[str, ...]] = {
    "data.options": DATA_FLAT,
    "optimizer.args": OPTIMIZER_FLAT,
    "logging.options": (),
}


def flat_alias_paths() -> list[str]:
    """The old flat spellings that still work (`data.download`, `optimizer.momentum`)."""
    return [
        f"{where.rpartition('.')[0]}.{alias}"
        for where, aliases in OWNED_OPTIONS.items()
        for alias in aliases
    ]


def owned_path(path: str) -> str:
    """Where an old flat spelling lives now (`data.download` -> `data.options.download`);
    any other path as it is."""
    section, _, leaf = path.rpartition(".")
    for where, aliases in OWNED_OPTIONS.items():
        if where.rpartition(".")[0] == section and leaf in aliases:
            return f"{where}.{leaf}"
    return path


def flat_alias_types() -> dict[str, Any]:
    """Old flat spelling -> its type, as the built-in entry that owns it declares it."""
    owners = {"data.options": DATASETS, "optimizer.args": OPTIMIZERS}
    out: dict[str, Any] = {}
    for where, registry in owners.items():
        section = where.rpartition(".")[0]
        for _, entry in registry.items():
            for name, info in options_model(entry).model_fields.items():
                if name in OWNED_OPTIONS[where]:
                    out.setdefault(f"{section}.{name}", info.annotation)
    return out


def option_types(config: BaseModel) -> dict[str, Any]:
    """Dotted path -> type of each option of the entries a resolved config picked
    (`data.options.val_fraction`, `optimizer.args.momentum`, `logging.options.csv.X`), read
    at the `OWNED_OPTIONS` mappings: the fields a sweep may search beside the schema's own."""
    out: dict[str, Any] = {}
    for where in OWNED_OPTIONS:
        section, _, field = where.partition(".")
        value = getattr(getattr(config, section), field)
        owned = value.items() if isinstance(value, dict) else [("", value)]
        for key, options in owned:  # logging.options: logger name -> its options
            if isinstance(options, BaseModel):
                base = f"{where}.{key}" if key else where
                fields = type(options).model_fields.items()
                out.update({f"{base}.{name}": info.annotation for name, info in fields})
    return out


def value_paths(config: BaseModel, prefix: str = "") -> list[str]:
    """Dotted paths of every value of a config instance, an entry's options expanded to
    their own fields (`data.options.download`): what `trainforge config show` lists."""
    out: list[str] = []
    for name in type(config).model_fields:
        value = getattr(config, name)
        path = f"{prefix}{name}"
        if isinstance(value, Section):
            out.extend(value_paths(value, path + "."))
        elif path in OWNED_OPTIONS and isinstance(value, BaseModel):
            out.extend(f"{path}.{field}" for field in type(value).model_fields)
        elif path in OWNED_OPTIONS and isinstance(value, dict) and value:
            out.extend(f"{path}.{key}" for key in value)
        else:
            out.append(path)
    return out
