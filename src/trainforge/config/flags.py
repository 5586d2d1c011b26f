"""Command-line flags of `train` and `config show`, generated from the run-config schema.

Every leaf field whose name is unique in the schema is a flag of the same name, so the
Hugging Face `TrainingArguments` names users know work as they are (`--max_steps`,
`--save_steps`, `--learning_rate`, `--per_device_train_batch_size`, ...). On top: the ViT
training guide's flags (`--batch_size`, `--max_epochs`, ...), the DGX Spark setup plan's
(`--data_file`, `--eval_file`, `--report_to`, `--resume_from_checkpoint`), `--output_dir`,
`--config FILE`, `--profile`, `--set a.b=v` and `--resume runs/NAME`. Values are read as
YAML scalars (3, 1e-4, true), like `--set`. As with Hugging Face's argument parser, a name
may be written with `-` for `_` (`--max-steps`), and a boolean flag takes true/false,
yes/no, on/off or 1/0, or no value for true.

typer/click options were considered: they need every flag declared by hand (the list this
module exists to avoid) and cannot give `--resume_from_checkpoint` an optional value.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainforge import yamltext
from trainforge.config.schema import OWNED_OPTIONS, RunConfig, flat_alias_types, owned_path
from trainforge.errors import UserError
from trainforge.registry import LOGGERS

# The ViT training guide's flags and other names users type, beside the schema's own.
ALIASES: dict[str, str] = {
    "batch_size": "training.per_device_train_batch_size",
    "max_epochs": "training.num_train_epochs",
    "output_dir": "output.dir",
    "run_name": "output.run_name",
    "data_file": "data.train_file",
    "eval_file": "data.validation_file",
    "model_name_or_path": "model.model_name_or_path",
    "base-model": "model.model_name_or_path",
}
# Flags that are not one field.
SPECIAL = {
    "config": "run config file (instead of the positional CONFIG)",
    "profile": "hardware profile name or file, or auto",
    "set": "any field: --set training.seed=1 (repeatable)",
    "resume": "continue a run: --resume runs/NAME (or a checkpoint folder, or auto)",
    "resume_from": "same as --resume (the ViT training guide's name); with CONFIG, "
    "checkpoints/NAME.pth is looked for in the config's run folder",
    "resume_from_checkpoint": "same as --resume; without a value, this run's newest checkpoint",
    "overwrite": "start afresh where a run already is (its folder is replaced)",
    "report_to": "trackers (registered loggers, comma-separated), all or none",
    "output-name": "causal-lm: write models/OUTPUT_NAME and name the run after it",
    "world_size": "config show / validate: plan for this many processes (default 1)",
    "extension": "import a plugin module or .py file first (repeatable; recorded with the run)",
}
# What a boolean flag's value may be (`--tensorboard off`); without one, the flag means true.
BOOL_WORDS = {
    "true": True, "yes": True, "on": True, "1": True,
    "false": False, "no": False, "off": False, "0": False,
}  # fmt: skip
# What an optional text flag's value may be to mean "none" (`--test_file null`), as in YAML.
NULL_WORDS = ("null", "none", "~")
# --report_to names trackers: every registered logger but the run's own metrics.jsonl, which
# a run always keeps (the web app and the report read it).
KEPT_LOGGERS = ("jsonl",)


@functools.cache
def leaf_types() -> dict[str, Any]:
    """Dotted path -> annotation of every leaf field, and of the old flat spellings of the
    built-in entries' options (`data.val_fraction`, `optimizer.momentum`)."""
    out: dict[str, Any] = {}

    def walk(model: type, prefix: str) -> None:
        for name, info in model.model_fields.items():  # type: ignore[attr-defined]
            ann = info.annotation
            if isinstance(ann, type) and hasattr(ann, "model_fields"):
                walk(ann, f"{prefix}{name}.")
            else:
                out[f"{prefix}{name}"] = ann

    walk(RunConfig, "")
    return {**out, **flat_alias_types()}


@functools.cache
def flag_fields() -> dict[str, str]:
    """Flag name -> dotted field, for every unique leaf name plus the aliases."""
    by_name: dict[str, list[str]] = {}
    for path in leaf_types():
        if "." in path and path not in OWNED_OPTIONS:
            by_name.setdefault(path.rsplit(".", 1)[1], []).append(path)
    fields = {name: paths[0] for name, paths in by_name.items() if len(paths) == 1}
    return {**fields, **ALIASES}


@dataclass
class RunArgs:
    """What the command line of `train` / `config show` asked for."""

    config: Path | None = None
    profile: str | None = None
    overrides: list[str] = field(default_factory=list)  # --set items
    flags: dict[str, Any] = field(default_factory=dict)  # dotted field -> value
    sources: dict[str, str] = field(default_factory=dict)  # dotted field -> "flag --name"
    resume: str | None = None
    resume_flag: str = "--resume"  # as typed: --resume, --resume_from, --resume_from_checkpoint
    world_size: int | None = None
    help: bool = False
    files: list[Path] = field(default_factory=list)  # extra positionals (validate)
    # `--max_steps +N`: N steps past the checkpoint the run resumes from (0 for a fresh one)
    more_steps: int | None = None


def _is_bool(path: str) -> bool:
    return leaf_types().get(path) in (bool, bool | None)


def _take(argv: list[str], i: int, name: str, inline: str | None) -> tuple[str, int]:
    if inline is not None:
        return inline, i
    if i + 1 >= len(argv) or (argv[i + 1].startswith("--") and len(argv[i + 1]) > 2):
        raise UserError(f"--{name} needs a value", f"write e.g. --{name} VALUE")
    return argv[i + 1], i + 1


def parse(argv: list[str]) -> RunArgs:
    """Parse the flags; unknown ones are one line with the nearest known name."""
    args, fields, i = RunArgs(), flag_fields(), 0
    while i < len(argv):
        token = argv[i]
        if token in ("-h", "--help"):
            args.help = True
        elif not token.startswith("--"):
            args.files.append(Path(token))
        else:
            name, eq, inline = token[2:].partition("=")
            i = _one_flag(args, argv, i, name, inline if eq else None, fields)
        i += 1
    if args.config is None and args.files:
        args.config = args.files.pop(0)
    return args


def _known_spelling(name: str, fields: dict) -> str:
    """The flag a name means: as written, or with `-` and `_` swapped (`--max-steps` is
    `--max_steps`, as Hugging Face's argument parser takes both; `--output_name` is
    `--output-name`)."""
    for candidate in (name, name.replace("-", "_"), name.replace("_", "-")):
        if candidate in fields or candidate in SPECIAL:
            return candidate
    return name


def _one_flag(
    args: RunArgs, argv: list[str], i: int, typed: str, inline: str | None, fields: dict
) -> int:
    name = _known_spelling(typed, fields)
    if name in ("resume", "resume_from", "resume_from_checkpoint"):
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if inline is None and (nxt is None or nxt.startswith("--")):
            if name != "resume_from_checkpoint":
                raise UserError(f"--{name} needs a value", f"write --{name} runs/NAME or auto")
            args.resume = "auto"
            return i
        value, i = _take(argv, i, name, inline)
        args.resume, args.resume_flag = value, f"--{name}"
    elif name == "extension":
        value, i = _take(argv, i, name, inline)
        args.flags.setdefault("extensions", []).append(value)
    elif name in ("config", "profile", "set", "world_size", "report_to", "output-name"):
        value, i = _take(argv, i, name, inline)
        _special(args, name, value)
    elif name == "overwrite" or (name in fields and _is_bool(fields[name])):
        path = "output.overwrite" if name == "overwrite" else fields[name]
        nxt = inline if inline is not None else (argv[i + 1] if i + 1 < len(argv) else None)
        value: Any = True
        if nxt is not None and str(nxt).lower() in BOOL_WORDS:
            value = BOOL_WORDS[str(nxt).lower()]
            i += 0 if inline is not None else 1
        elif inline is not None:
            raise UserError(f"--{typed}={inline}: not true or false", f"write --{typed}=false")
        _put(args, path, value, typed)
    elif name in fields:
        value, i = _take(argv, i, typed, inline)
        kind = leaf_types().get(fields[name])
        if kind == str | None and value.strip().lower() in NULL_WORDS:
            # `--test_file null`: no such file. A flag's None means "not given" when layers
            # merge, so it travels as `--set data.options.test_file=null` does.
            args.overrides.append(f"{owned_path(fields[name])}=null")
        else:
            text_field = kind is str or kind == str | None
            if fields[name] == "training.max_steps" and value.strip().startswith("+"):
                args.more_steps = _more_steps(typed, value)
                args.sources[fields[name]] = f"flag --{typed} {value.strip()}"
                return i
            read = value if text_field else yamltext.value(value, f"--{typed}")
            _put(args, fields[name], read, typed)
    else:
        close = difflib.get_close_matches(name, [*fields, *SPECIAL], n=1, cutoff=0.6)
        raise UserError(
            f"--{typed}: unknown flag",
            f"did you mean --{close[0]}?" if close else "see `trainforge train --help`",
        )
    return i


def _more_steps(typed: str, value: str) -> int:
    """The N of `--max_steps +N`: a whole number of steps, at least 1."""
    text = value.strip()[1:]
    if not text.isdigit() or int(text) < 1:
        raise UserError(
            f"--{typed} {value.strip()}: not a number of steps to add",
            f"write --{typed} +N with N >= 1 (e.g. +1000), or an absolute --{typed} N",
        )
    return int(text)


def _put(args: RunArgs, path: str, value: Any, name: str) -> None:
    args.flags[path] = value
    args.sources[path] = f"flag --{name}"


def _special(args: RunArgs, name: str, value: str) -> None:
    if name == "config":
        args.config = Path(value)
    elif name == "profile":
        args.profile = value
    elif name == "set":
        args.overrides.append(value)
    elif name == "world_size":
        try:
            args.world_size = int(value)
        except ValueError:
            raise UserError(f"--world_size {value!r}: not a whole number", "e.g. 2") from None
    elif name == "output-name":
        _put(args, "output.model_name", value, name)
        # It names the run only where no --run_name does: an explicit run name is kept,
        # whichever of the two flags comes first.
        if args.sources.get("output.run_name", f"flag --{name}") == f"flag --{name}":
            _put(args, "output.run_name", value, name)
    else:
        _report_to(args, value)


def _report_to(args: RunArgs, value: str) -> None:
    """The Hugging Face Trainer's `--report_to`: turn the named trackers on, the others off."""
    trackers = [n for n in LOGGERS.names() if n not in KEPT_LOGGERS]
    chosen = {v.strip() for v in value.split(",") if v.strip()}
    unknown = chosen - {*trackers, "all", "none"}
    if unknown or not chosen:
        raise UserError(
            f"--report_to {value}: unknown tracker {sorted(unknown) or value!r}",
            f"use {', '.join(trackers)} (comma-separated), all or none",
        )
    by_name = []
    for tracker in trackers:
        on = "all" in chosen or tracker in chosen
        switch = LOGGERS.get(tracker).switch
        if switch:
            _put(args, f"logging.{switch}", on, "report_to")
        elif on:
            by_name.append(tracker)
    if by_name:
        _put(args, "logging.loggers", by_name, "report_to")


def help_text(command: str) -> str:
    """`trainforge train --help`: the special flags, then the schema's flags by section."""
    lines = [
        f"Usage: trainforge {command} CONFIG [FLAGS]",
        "",
        "Layering: hardware profile < environment < run config file < flags.",
        "",
        "Run:",
    ]
    lines += [f"  --{name:<24} {text}" for name, text in SPECIAL.items()]
    by_section: dict[str, list[str]] = {}
    for name, path in sorted(flag_fields().items(), key=lambda item: item[1]):
        by_section.setdefault(path.split(".")[0], []).append(f"--{name}")
    for section, names in by_section.items():
        lines += ["", f"{section}:"]
        row = "  "
        for name in names:
            if len(row) + len(name) > 98:
                lines.append(row.rstrip())
                row = "  "
            row += name + " "
        lines.append(row.rstrip())
    lines += ["", "Every field also works as --set SECTION.FIELD=VALUE (docs/configuration.md)."]
    return "\n".join(lines)
