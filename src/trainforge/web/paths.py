"""The web app's one path rule, for every request field that names a file or folder: run
configs, data sets, base models, extensions, and any config setting that is a path (in the
dialog's overrides box and in a sweep's train flags).

A path a request gives is relative to the project folder the server runs in; it is refused
when it is empty, absolute, holds `..` or a backslash, or when, resolved (symlinks followed),
it lands outside the folder it belongs to (config/ for run configs, models/ for base models,
the project folder for the rest). A refusal is one line that names the field and the path as
given, cut to a few dozen characters, and says nothing about the file: nothing is read from
a path before the rule let it through, so no value of a file the request may not read can
reach an error message.

`pathlib.Path.resolve` and `is_relative_to` do the work; werkzeug's `safe_join` was
considered, but it checks the text only and follows no symlink.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from trainforge import yamltext
from trainforge.errors import UserError
from trainforge.web.settings import WebSettings

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
# Config settings whose value is a path (or a list of them), in one list for the path rule
# and for the dialog: the rule applies to each, and the value says who may set it. "user":
# the dialog's overrides box may; "dialog": the dialog's own fields or the server's folders
# set it, so the box refuses it (`web.dialog.RESERVED_PREFIXES`). A plain module name in
# `extensions` (no '/', not a .py file) imports an installed package.
PATH_SETTINGS: dict[str, str] = {
    "extensions": "user",
    "data.root": "dialog",
    "data.options.train_file": "dialog",
    "data.options.validation_file": "dialog",
    "data.options.test_file": "dialog",
    "data.train_file": "dialog",  # the old flat spellings of the same three
    "data.validation_file": "dialog",
    "data.test_file": "dialog",
    "model.model_name_or_path": "dialog",
    "model.init_from": "user",
    "logging.wandb_dir": "user",
    "output.dir": "dialog",
    "output.models_dir": "dialog",
    "hardware.swap_directory": "dialog",
}
SHOWN_CHARS = 40


class PathRefused(Exception):
    """One line: the field, the path as given (cut), and the fix."""

    def __init__(self, field: str, line: str) -> None:
        self.field = field
        super().__init__(line)


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """`value` as an error line quotes it: repr, cut to `limit` characters."""
    text = repr(value) if isinstance(value, str) else repr(str(value))
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _where(settings: WebSettings, folder: str | None) -> str:
    return f"{folder}/" if folder else f"the project folder {settings.root}"


def inside(settings: WebSettings, value: str, field: str, folder: str | None = None) -> Path:
    """The resolved path `value` names, when it is inside the project's `folder` (a folder
    name under the project, None: the project folder itself); else PathRefused."""
    base = (settings.root / folder).resolve() if folder else settings.root
    where = _where(settings, folder)
    path = PurePosixPath(value) if isinstance(value, str) else None
    if path is None or not value.strip() or "\\" in value or "\x00" in value:
        raise PathRefused(field, f"{field} {shown(value)}: not a path; give one inside {where}")
    if path.is_absolute() or ".." in path.parts:
        raise PathRefused(
            field,
            f"{field} {shown(value)}: give a path relative to the project folder, inside "
            f"{where} (no absolute path, no '..')",
        )
    resolved = (settings.root / value).resolve()
    if not resolved.is_relative_to(base):
        raise PathRefused(
            field, f"{field} {shown(value)}: leads out of {where} (a symlink); copy the file in"
        )
    return resolved


def config_file(settings: WebSettings, value: str, field: str = "config") -> Path:
    """A run config the request may use: a .yaml/.yml/.json file in config/ (as
    `config/NAME.yaml`), resolved inside config/."""
    path = inside(settings, value, field, settings.config_dir)
    parts = PurePosixPath(value).parts
    if (
        len(parts) != 2
        or parts[0] != settings.config_dir
        or path.suffix not in CONFIG_SUFFIXES
        or parts[1].startswith(".")
        or not path.is_file()
    ):
        raise PathRefused(
            field,
            f"{field} {shown(value)} is not a run config in {settings.config_dir}/; pick one "
            f"of {settings.config_dir}/*.yaml",
        )
    return path


def config_files(settings: WebSettings) -> list[str]:
    """The run configs in config/ the rule lets a request use, as `config/NAME.yaml`."""
    folder = settings.config_path
    if not folder.is_dir():
        return []
    found = []
    for p in sorted(folder.iterdir()):
        name = f"{settings.config_dir}/{p.name}"
        try:
            config_file(settings, name)
        except PathRefused:
            continue
        found.append(name)
    return found


def setting_problem(settings: WebSettings, key: str, value: Any, field: str) -> str | None:
    """Why the config setting `key` = `value` (as parsed from YAML) names a path the rule
    refuses, or None."""
    if key not in PATH_SETTINGS and not (key == "profile" and _looks_like_file(value)):
        return None
    for item in value if isinstance(value, list) else [value]:
        if item is None or (key == "extensions" and not _looks_like_file(item)):
            continue
        try:
            inside(settings, str(item), f"{field} {key}")
        except PathRefused as err:
            return str(err)
    return None


def override_problem(settings: WebSettings, item: str, field: str) -> str | None:
    """The rule on one `KEY=VALUE` override (the dialog's box, a sweep's `--set`)."""
    key, _, text = item.partition("=")
    try:
        value = yamltext.value(text, f"{field} {key.strip()}")
    except UserError as err:
        return err.line()
    return setting_problem(settings, key.strip(), value, field)


def _looks_like_file(value: Any) -> bool:
    text = str(value)
    return "/" in text or "\\" in text or text.endswith((".py", *CONFIG_SUFFIXES))
