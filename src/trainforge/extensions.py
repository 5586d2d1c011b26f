"""Plugins by name: the modules and `.py` files a run config's `extensions` (and each
`--extension`) lists, imported before the config's names are checked.

A plugin is an ordinary module that registers entries (`DATASETS.register(...)`,
`OPTIMIZERS.register(...)`, ... in `trainforge.registry`) when it is imported. This module
owns finding and importing them: a dotted module name is imported as Python would (the
working folder on the path, as `python -m` has it), a path ending in `.py` is loaded from the
file under a module name of its own, and a plugin that fails to import is one line naming
it. Each is imported once per process. The list is part of the recipe (run.json), so
`--resume`, the web app's runs and `export` import the same plugins again.

Layering: like `trainforge.registry`, this sits at the bottom and imports only
`trainforge.errors`. torchtitan's `--experimental.custom_import` and litgpt's `class_path`
are the models; entry points were considered and left out, because they need an installed
distribution per plugin.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path

from trainforge.errors import UserError

_LOADED: dict[str, str] = {}  # spec as given (a file: its resolved path) -> module name
HOW = "pass a module name (my_plugins.optim) or a .py file; see docs/architecture.md"


def listed(value: object) -> list[str]:
    """The config's `extensions` as a list of strings (one string is a list of one)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    raise UserError(f"extensions = {value!r}: not a list of modules or .py files", HOW)


def load_extensions(specs: Iterable[str], base: Path | None = None) -> list[str]:
    """Import every plugin of `specs` not imported yet; the module names, in order.
    A relative `.py` path is looked up in the working folder, then under `base`."""
    return [_load(spec.strip(), base) for spec in specs if spec.strip()]


def _load(spec: str, base: Path | None) -> str:
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        return _load_file(spec, base)
    if spec in _LOADED:
        return _LOADED[spec]
    cwd = str(Path.cwd())
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)  # `python -m` puts the working folder on the path; the script not
    try:
        importlib.import_module(spec)
    except UserError as err:
        raise UserError(f"extension {spec}: {err.message}", err.fix) from None
    except Exception as err:  # an import error, or any error the module raises
        raise UserError(f"extension {spec}: cannot import: {_first_line(err)}", HOW) from None
    _LOADED[spec] = spec
    return spec


def _load_file(spec: str, base: Path | None) -> str:
    path = Path(spec).expanduser()
    if not path.is_absolute() and not path.is_file() and base is not None:
        path = base / path
    if not path.is_file():
        raise UserError(f"extension {spec}: file not found", HOW)
    key = str(path.resolve())
    if key in _LOADED:
        return _LOADED[key]
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    name = f"trainforge_extension_{path.stem}_{digest}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise UserError(f"extension {spec}: not a Python file", HOW)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except UserError as err:
        sys.modules.pop(name, None)
        raise UserError(f"extension {spec}: {err.message}", err.fix) from None
    except Exception as err:
        sys.modules.pop(name, None)
        raise UserError(f"extension {spec}: cannot import: {_first_line(err)}", HOW) from None
    _LOADED[key] = name
    return name


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__
