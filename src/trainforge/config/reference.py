"""The configuration reference (docs/configuration.md), generated from the schema itself
and from the registries (`trainforge.registry`): every section's fields, every name each
extension point knows with its one-line description, then the options each entry owns
(`data.options`, `optimizer.args`, `logging.options.NAME`, `export --option`).

A test fails when the file is stale; regenerate with `python -m trainforge.config.reference`.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from trainforge.config.schema import (
    FLAT_SPELLINGS_UNTIL,
    RunConfig,
    describe,
    flat_alias_paths,
    owned_path,
)
from trainforge.options import options_model
from trainforge.registry import (
    DATASETS,
    EXPORT_FORMATS,
    LOGGERS,
    OPTIMIZERS,
    Registry,
    all_registries,
)

INTRO = """# Configuration reference

A run config (YAML or JSON) is the recipe: *what* to train, with its effective batch and
learning rate; a hardware profile says only *how* to run it on a given machine (the
micro-batch cap `hardware.micro_batch_size`, precision, loader workers). Values are layered:
built-in profile < environment (the trackers' own variables) < run config file <
command-line flags (`--max_steps`, `--batch_size`, `--set a.b=value`, ...). The plan (micro-batch,
accumulation, learning rate, precision, device) is resolved from them before the run: see
[recipe.md](recipe.md). `trainforge config show FILE` prints every resolved value with its
source. Unknown keys are errors with a did-you-mean suggestion. YAML anchors and aliases
work in a config file and in `--set`; a value whose aliases stand for more than 100,000
values once written out (the "billion laughs" document) is refused in one line.

Names follow Hugging Face `TrainingArguments` where one exists
(`per_device_train_batch_size`, `gradient_accumulation_steps`, `max_grad_norm`, ...).

Profiles (`trainforge profiles`) may set only the sections `training`, `data`, `evaluation`,
`checkpoint`, `logging` and `hardware`, and not the fields that say what is trained
(`data.dataset`, `data.root`, `training.num_train_epochs`, `training.max_steps`, and the
batch: `training.per_device_train_batch_size`, `gradient_accumulation_steps`,
`global_batch_size`).

This page is generated from the schema (`python -m trainforge.config.reference`).
"""


def _type_name(annotation: object) -> str:
    text = str(annotation).replace("typing.", "").replace("<class '", "").replace("'>", "")
    return text.replace("NoneType", "null")


def render() -> str:
    lines = [INTRO]
    for name, info in RunConfig.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            lines.append(f"\n## `{name}`\n")
            lines.extend(field_table(annotation, f"{name}."))
        else:
            lines.append(f"\n`{name}` (top level, default `{info.default}`): {info.description}\n")
    lines.extend(registry_lines())
    lines.extend(options_lines())
    lines.extend(flat_spelling_lines())
    return "\n".join(lines).rstrip() + "\n"


def field_table(model: type[BaseModel], prefix: str) -> list[str]:
    """A markdown table of `model`'s fields: dotted name, type, default, meaning."""
    lines = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for field, finfo in model.model_fields.items():
        default = finfo.get_default(call_default_factory=True)
        shown = "null" if default is None else default
        kind = _type_name(finfo.annotation).replace("|", "\\|")
        if kind == "Any":
            kind = "mapping"
        lines.append(f"| `{prefix}{field}` | `{kind}` | `{shown}` | {finfo.description or ''} |")
    return lines


# Each registry whose entries own options -> (heading, where the options are given).
OWNERS: list[tuple[Registry, str, str]] = [
    (DATASETS, "Dataset options", "data.options."),
    (OPTIMIZERS, "Optimizer arguments", "optimizer.args."),
    (LOGGERS, "Logger options", "logging.options.{name}."),
    (EXPORT_FORMATS, "Export format options", "--option "),
]


def options_lines() -> list[str]:
    """Every registered entry's own options, under the key that feeds them."""
    lines = []
    for registry, heading, where in OWNERS:
        lines.append(f"\n## {heading}\n")
        lines.append(
            f"What each {registry.kind} takes (its entry's options model; an unknown key is "
            "an error with the nearest name)."
        )
        owners = [
            (n, options_model(e)) for n, e in registry.items() if options_model(e).model_fields
        ]
        for name, model in owners:
            lines.append(f"\n### {registry.kind} `{name}`\n")
            lines.extend(field_table(model, where.format(name=name)))
        if not owners:
            lines.append(f"\nNo built-in {registry.kind} takes options.")
    return lines


def flat_spelling_lines() -> list[str]:
    """The old flat spellings of the built-ins' options, what they are now, and when they go."""
    lines = [
        "\n## Old flat spellings\n",
        "The built-in entries' options were flat fields of their section once. A config "
        "file, the environment or `--set` may still spell them so until trainforge "
        f"{FLAT_SPELLINGS_UNTIL}: the value goes to the entry's options (where the entry "
        "takes it) and the run prints one line naming each old spelling and where it lives "
        f"now. trainforge {FLAT_SPELLINGS_UNTIL} removes them: they are unknown fields "
        "then. Flags with the same names (`--train_file`, `--max_seq_length`, "
        "`--val_fraction`) stay and print nothing.",
        "",
        "| old spelling | write |",
        "|---|---|",
    ]
    lines += [f"| `{path}` | `{owned_path(path)}` |" for path in flat_alias_paths()]
    return lines


def registry_lines() -> list[str]:
    """The registered names of every extension point, as a markdown section."""
    lines = [
        "\n## Registered names\n",
        "Each extension point is a registry keyed by the name the config uses "
        "(`trainforge.registry`); a project adds its own with `REGISTRY.register(name, entry)` "
        "(see docs/architecture.md).",
    ]
    for kind, registry in all_registries().items():
        entries = registry.items()
        if entries:
            lines.append(f"\n### {kind} (`{registry.config_key}`)\n")
        for name, entry in entries:
            text = describe(entry)
            lines.append(f"- `{name}`: {text}" if text else f"- `{name}`")
    return lines


def write(path: Path) -> None:
    path.write_text(render(), encoding="utf-8")


if __name__ == "__main__":
    write(Path(__file__).resolve().parents[3] / "docs" / "configuration.md")
