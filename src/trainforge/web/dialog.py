"""The Train Model dialog: its defaults (read afresh from the config files each time it
opens) and the validation of what the user submits, with the CLI's own validator.

Defaults come from `trainforge.config.load` on the chosen run config with the detected
platform's profile (on a Jetson: config/jetson_training.json and jetson-orin), so the
dialog shows exactly what `trainforge train CONFIG` would use. A submission becomes the
argument list of `trainforge train` (every dialog field as a `--set`), is validated by
`trainforge.config.validate` with those same arguments, judged against this machine as
`trainforge train` judges them (the run trains here, whatever profile is picked), and each
error line is placed beside the field whose config path it names. The task and image-dataset
choices are the names registered in `trainforge.registry.TASKS` and `DATASETS`.

The config choices are the project's config/ files and, beside them, the packaged recipes
(`trainforge.recipes`) no project file of the same name stands for, by name: a server started
in an empty folder offers `vit_digits`, which the run trains as `trainforge train vit_digits`.

A submission sends what the user changed: a field left at the value the dialog showed (the
run config's) is no override, so a batch changed in the dialog scales the learning rate as
`trainforge train CONFIG --batch_size N` does (a rate sent with it would be kept as given).
The page sends an unchanged field empty; the server also takes a field equal to the config's
value as unchanged, so an API client echoing the defaults gets the same run.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from trainforge import recipes
from trainforge.config import ConfigError, ResolvedConfig, load, validate
from trainforge.data.catalog import image_dataset_names
from trainforge.errors import UserError
from trainforge.hardware import Platform, pick_profile
from trainforge.models.hub import cache_folder, cached_ids, is_hub_id
from trainforge.profiles import list_profiles
from trainforge.registry import TASKS
from trainforge.web.limits import yaml_alias
from trainforge.web.model_list import list_model_names
from trainforge.web.paths import (
    PATH_SETTINGS,
    PathRefused,
    config_file,
    config_files,
    inside,
    override_problem,
    shown,
)
from trainforge.web.settings import NAME_RULE, WebSettings, is_plain_name

# Config path -> the dialog field that sets it (errors naming the path go beside the field).
FIELD_PATHS = {
    "training.num_train_epochs": "epochs",
    "optimizer.learning_rate": "learning_rate",
    "training.per_device_train_batch_size": "batch_size",
    "data.options.train_file": "dataset",
    "data.train_file": "dataset",  # the old flat spelling, in errors of older configs
    "data.dataset": "dataset",
    "model.model_name_or_path": "base_model",
    "output.run_name": "output_name",
    "output.model_name": "output_name",
    "task.kind": "task",
    "model.arch": "task",
    "profile": "profile",
    # The precision comes from the profile unless an override names it (which then wins: the
    # earliest mention, and "overrides" sorts first on a tie): fp16 on a machine without CUDA
    # is refused beside the profile that asked for it.
    "training.precision": "profile",
}
# Fields the dialog owns or the server decides: not settable through the overrides box (the
# path settings' owners come from their one list, `web.paths.PATH_SETTINGS`).
RESERVED_PREFIXES = (
    "output.",
    "profile",
    *(key for key, owner in PATH_SETTINGS.items() if owner == "dialog"),
)


@dataclass
class TrainForm:
    config: str
    output_name: str
    task: str | None = None
    base_model: str | None = None
    dataset: str | None = None
    epochs: float | None = None
    learning_rate: float | None = None
    batch_size: int | str | None = None  # a number or "auto"
    profile: str = "auto"
    overrides: list[str] = field(default_factory=list)
    overwrite: bool = False


class FormErrors(Exception):
    """Field name -> messages; `_form` holds those that belong to no single field."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(m for ms in errors.values() for m in ms))


def config_choices(settings: WebSettings) -> list[str]:
    """The project's run configs (`config/NAME.yaml`), then the packaged recipes whose file
    the project's config/ has no file of the same name for (by name: `vit_digits`)."""
    files = config_files(settings)
    taken = {PurePosixPath(name).name for name in files}
    return files + [r.name for r in recipes.catalog() if r.file.name not in taken]


def default_config(settings: WebSettings, platform: Platform) -> str | None:
    choices = config_choices(settings)
    preferred = "jetson_training" if platform.kind == "jetson" else "vit_digits"
    for name in choices:
        if name == preferred or PurePosixPath(name).stem == preferred:
            return name
    return choices[0] if choices else None


def _config_path(settings: WebSettings, config: str) -> Path:
    """The file a config choice names: a recipe by name, else a file in config/."""
    recipe = recipes.get(config)
    if recipe is not None:
        return recipe.file
    try:
        return config_file(settings, config)
    except PathRefused as err:
        raise FormErrors({"config": [str(err)]}) from None


def _load(settings: WebSettings, platform: Platform, config: str, profile: str) -> ResolvedConfig:
    return load(
        _config_path(settings, config),
        profile=None if profile == "auto" else profile,
        pick_auto_profile=lambda: pick_profile(platform),
    )


def defaults(
    settings: WebSettings, platform: Platform, config: str | None, profile: str = "auto"
) -> dict[str, Any]:
    """Everything the dialog shows for `config` (None: the platform's default config)."""
    detected, reason = pick_profile(platform)
    config = config or default_config(settings, platform)
    out: dict[str, Any] = {
        "choices": {
            "configs": config_choices(settings),
            "profiles": ["auto", *list_profiles()],
            "tasks": TASKS.names(),
            "models": list_model_names(settings.models_path) + cached_ids(),  # folders, ids
            "image_datasets": image_dataset_names(),
        },
        "detected": {"platform": platform.describe()[0], "profile": detected, "reason": reason},
        "values": {"config": config},
        "errors": {},
    }
    if config is None:
        out["errors"] = {"config": [f"no run config files in {settings.config_dir}/"]}
        return out
    if profile not in out["choices"]["profiles"]:  # a name, never a profile file's path
        out["errors"] = {"profile": [f"unknown profile {shown(profile)}; pick one of the list"]}
        return out
    try:
        resolved = _load(settings, platform, config, profile)
    except FormErrors as err:
        out["errors"] = err.errors
        return out
    except UserError as err:
        label = str(_config_path(settings, config))
        out["errors"] = place_errors([x.replace(label, config) for x in _lines(err)], [])
        return out
    out["values"] = _values(settings, config, resolved)
    prof = resolved.profile
    out["profile"] = {
        "name": prof.name,
        "reason": resolved.profile_reason,
        "description": prof.description,
        "notes": prof.notes,
        "guide": prof.guide,
    }
    out["notes"] = resolved.config.notes
    return out


def _values(settings: WebSettings, config: str, resolved: ResolvedConfig) -> dict[str, Any]:
    c = resolved.config
    lm = TASKS.get(c.task.kind).base_model  # its dataset is a text file, its model a base model
    base = c.model.model_name_or_path
    if base:
        path = PurePosixPath(base)
        base = path.name if str(path.parent) in (".", settings.models_dir) else base
    stem = Path(config).stem.replace("_", "-")
    suggested = c.output.model_name or c.output.run_name or (f"{stem}-tuned" if lm else stem)
    return {
        "config": config,
        "task": c.task.kind,
        "base_model": base,
        "dataset": _packaged_as_written(c.data.options.train_file) if lm else c.data.dataset,
        "epochs": c.training.num_train_epochs,
        "learning_rate": c.optimizer.learning_rate,
        "batch_size": c.training.per_device_train_batch_size,
        "output_name": unused_name(settings, suggested),
        "profile": resolved.profile.name,
    }


def _packaged_as_written(path: str | None) -> str | None:
    """A packaged recipe's data file as the recipe writes it (`example_datasets/...`), where
    loading made it the package's absolute path; any other path as it is."""
    prefix = f"{recipes.ROOT}/"
    return path[len(prefix) :] if path and path.startswith(prefix) else path


def unused_name(settings: WebSettings, name: str) -> str:
    """`name`, or `name-2`, `name-3`, ... when a run or model folder already has it."""
    if not is_plain_name(name):
        name = "run"

    def taken(candidate: str) -> bool:
        return (settings.runs_path / candidate).exists() or (
            settings.models_path / candidate
        ).exists()

    if not taken(name):
        return name
    return next(f"{name}-{i}" for i in range(2, 10_000) if not taken(f"{name}-{i}"))


# ---------------------------------------------------------------------- submission
def build_arguments(settings: WebSettings, form: TrainForm) -> tuple[list[str], list[str]]:
    """(the `--set` overrides, the full `trainforge train` argument list) for a form."""
    errors = _check_form(settings, form)
    if errors:
        raise FormErrors(errors)
    quoted = json.dumps  # a YAML string whatever the text looks like
    sets: list[str] = []
    task = form.task
    entry = None
    if task is not None:  # a known kind: _check_form refused any other
        entry = TASKS.get(task)
        sets += [f"task.kind={task}", *entry.settings]
    if entry is not None and entry.base_model:
        if form.dataset:
            sets.append(f"data.options.train_file={quoted(form.dataset)}")
        if form.base_model:
            path = form.base_model  # an id stays an id (resolved through the HF cache)
            if not is_hub_id(path, settings.models_dir):
                path = f"{settings.models_dir}/{form.base_model}"
            sets.append(f"model.model_name_or_path={quoted(path)}")
        sets.append(f"output.model_name={quoted(form.output_name)}")
    elif entry is not None and entry.images and form.dataset:
        sets.append(f"data.dataset={quoted(form.dataset)}")
    for path, value in (
        ("training.num_train_epochs", form.epochs),
        ("optimizer.learning_rate", form.learning_rate),
        ("training.per_device_train_batch_size", form.batch_size),
    ):
        if value is not None:
            sets.append(f"{path}={_number(value)}")
    sets += [
        f"output.run_name={quoted(form.output_name)}",
        f"output.dir={quoted(settings.runs_dir)}",
        f"output.models_dir={quoted(settings.models_dir)}",
        *form.overrides,
    ]
    argv = [form.config, "--profile", form.profile]
    for item in sets:
        argv += ["--set", item]
    if form.overwrite:
        argv.append("--overwrite")
    return sets, argv


def _number(value: float | str) -> str:
    """A number as YAML reads it back: 40.0 -> 40, 1e-05 -> 1e-05 (a float for pydantic)."""
    if value == "auto":  # per_device_train_batch_size: auto
        return "auto"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _check_form(settings: WebSettings, form: TrainForm) -> dict[str, list[str]]:
    """The checks the config validator cannot make: names, files, the overrides box."""
    errors: dict[str, list[str]] = {}

    def add(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    try:
        _config_path(settings, form.config)
    except FormErrors as err:
        add("config", err.errors["config"][0])
    if not is_plain_name(form.output_name):
        add("output_name", f"{shown(form.output_name)} is not a plain name; use {NAME_RULE}")
    if form.task is not None and form.task not in TASKS:
        add("task", TASKS.unknown_message(form.task[:40]))  # never echoes a long value
    if form.profile not in ("auto", *list_profiles()):
        add("profile", f"unknown profile {shown(form.profile)}; pick one of the list")
    if form.base_model is not None and is_hub_id(form.base_model, settings.models_dir):
        if form.base_model.split("@")[0] not in cached_ids():
            add("base_model", _uncached(form.base_model))
    elif form.base_model is not None:  # refused by the same rule whatever the task
        if not is_plain_name(form.base_model):
            add("base_model", f"{shown(form.base_model)} is not a plain name; use {NAME_RULE}")
        elif form.base_model not in list_model_names(settings.models_path):
            add("base_model", f"no model folder {settings.models_dir}/{form.base_model}")
    # The dataset given is a text file only for a kind whose model is a base model.
    if form.dataset is not None and form.task in TASKS and TASKS.get(form.task).base_model:
        problem = _dataset_problem(settings, form.dataset)
        if problem:
            add("dataset", problem)
    for item in form.overrides:
        problem = _override_problem(settings, item)
        if problem:
            add("overrides", problem)
    return errors


def _override_problem(settings: WebSettings, item: str) -> str | None:
    key, sep, _ = item.partition("=")
    key = key.strip()
    if not sep or not key:
        return f"{shown(item)} is not KEY=VALUE, e.g. training.max_steps=100"
    if key.startswith(RESERVED_PREFIXES):
        return f"{shown(key)} is set by the dialog or the server, not here"
    if yaml_alias(item):
        return f"{shown(key)}: a YAML alias (*name) is not taken here; write the value out"
    return override_problem(settings, item, "overrides")


def _dataset_problem(settings: WebSettings, dataset: str) -> str | None:
    try:
        path = inside(settings, dataset, "dataset")
    except PathRefused as err:
        return f"{err}, e.g. example_datasets/x.json"
    if not path.is_file():
        return f"dataset {shown(dataset)}: no such file in the project folder"
    return None


# The form's fields that stand for one config value each, as `_values` shows them.
SHOWN_FIELDS = ("base_model", "dataset", "epochs", "learning_rate", "batch_size")


def only_changed(settings: WebSettings, platform: Platform, form: TrainForm) -> TrainForm:
    """The form with each field still at the value the dialog showed (the config's) left
    empty: what the user did not change is no override (see the module docstring)."""
    try:
        shown_values = _values(
            settings, form.config, _load(settings, platform, form.config, form.profile)
        )
    except (FormErrors, UserError):  # the validation below says what is wrong
        return form
    same = {
        name: None
        for name in SHOWN_FIELDS
        if getattr(form, name) is not None and getattr(form, name) == shown_values[name]
    }
    return dataclasses.replace(form, **same)


def validate_form(
    settings: WebSettings, platform: Platform, form: TrainForm
) -> tuple[ResolvedConfig, list[str]]:
    """The resolved config and the `trainforge train` arguments, or FormErrors."""
    form = only_changed(settings, platform, form)
    sets, argv = build_arguments(settings, form)
    path = _config_path(settings, form.config)
    try:
        resolved = validate(
            path,
            platform=platform,
            for_profile=False,  # the run trains on this machine: its hardware rules apply
            profile=None if form.profile == "auto" else form.profile,
            overrides=sets,
        )
    except UserError as err:
        raise FormErrors(place_errors(_lines(err), form.overrides, str(path))) from None
    problem = _base_model_problem(settings, resolved.config)
    if problem:
        raise FormErrors({"base_model": [problem]})
    return resolved, argv


# In the web app's words: the dialog's field and page, never a command-line flag.
NO_BASE_MODEL = (
    "a {kind} run fine-tunes a base model: pick one in Base model (the Models page lists them)"
)


def _base_model_problem(settings: WebSettings, config: Any) -> str | None:
    """Why a run of a kind that fine-tunes a base model could not start for want of it, or
    None. A config that creates its base model on first use (`model.init_arch`) needs none
    yet."""
    if not TASKS.get(config.task.kind).base_model:
        return None
    name = config.model.model_name_or_path
    if not name:
        return NO_BASE_MODEL.format(kind=config.task.kind)
    if is_hub_id(name, settings.models_dir):  # never made by init_arch: it must be cached
        return None if name.split("@")[0] in cached_ids() else _uncached(name)
    path = Path(name) if len(PurePosixPath(name).parts) > 1 else Path(settings.models_dir) / name
    folder = path if path.is_absolute() else settings.root / path
    if config.model.init_arch or (folder / "config.json").is_file():
        return None
    return f"{name} is not a model folder: " + NO_BASE_MODEL.split(": ", 1)[1]


def _uncached(model_id: str) -> str:
    return (
        f"{model_id} is not in the Hugging Face cache {cache_folder()}; fetch it first: "
        f"trainforge models pull {model_id}"
    )


def _lines(err: UserError) -> list[str]:
    return err.lines if isinstance(err, ConfigError) else [err.line()]


def place_errors(
    lines: list[str], overrides: list[str], label: str | None = None
) -> dict[str, list[str]]:
    """Each error line beside the field whose config path it names (earliest mention).

    A name counts as a mention only on its own: `--profile NAME` in a hint is a flag of the
    command line, not the profile field, and `x.profile` is some other path."""
    override_keys = [item.partition("=")[0].strip() for item in overrides]
    errors: dict[str, list[str]] = {}
    for line in lines:
        text = line.removeprefix(f"{label}: ") if label else line
        spots = [(at, f) for p, f in FIELD_PATHS.items() if (at := _mention(text, p)) >= 0]
        spots += [(at, "overrides") for k in override_keys if k and (at := _mention(text, k)) >= 0]
        target = min(spots)[1] if spots else "_form"
        if "--set" in text and not spots:
            target = "overrides"
        errors.setdefault(target, []).append(text)
    return errors


def _mention(text: str, name: str) -> int:
    """Where `name` first stands on its own in `text` (not inside a longer path or a
    `--flag`), else -1."""
    found = re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-]|\.\w)", text)
    return found.start() if found else -1
