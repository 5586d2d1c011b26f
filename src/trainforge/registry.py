"""Registries: every extension point of trainforge, keyed by the string the run config uses.

This module owns the registry type and the one table of registries. Each registry maps a
config string (`optimizer.name: sgd`, `data.dataset: cifar10`, ...) to an entry object that
the package owning that kind defines (a builder function, a dataclass of metadata and
builders). Adding a dataset, an optimizer, a schedule, a logger, an export format, a task
kind or a profile is one file that calls `REGISTRY.register(name, entry)` (or uses it as a
decorator); nothing else lists the names. The config schema checks allowed values, the web
dialog offers choices and the docs list names by reading these registries.

Layering: this module sits at the bottom (it imports only `trainforge.errors`, so scripts
that run without site-packages can import it), so `config` can read the names without
importing the packages that own the entries. Each registry names the modules that register
its built-in entries (`builtins`); they are imported by name on the first lookup, the same
way a plugin system reads entry points. Those modules must not import torch at module level,
so config validation stays light: their heavy builders are named as "module:attribute"
strings that `load_object` imports on use, and packages re-export their heavy names through
`lazy_attributes`.

Entry types (defined by the owning package): optimizers and schedules are builder
functions (`engine.optimizers`, `engine.schedule`); `data.catalog.DatasetEntry`,
`tasks.catalog.TaskEntry`, `observe.loggers.LoggerEntry`, `export.formats.ExportFormat`,
`profiles.ProfileEntry`.

Options: an entry may own an options model (`options`, a frozen `trainforge.options.Options`
class: a dataset's `download`, an optimizer's `momentum`, an export format's `opset`), fed
by the config section or command line that picks the entry (see `trainforge.options`).

Libraries considered: `catalogue` (spaCy's registries) and Python entry points. Entry points
need an installed distribution per plugin (a test's toy optimizer is not one); `catalogue`
adds a dependency for what is a dict, a decorator and a lazy import here.
"""

from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, overload

from trainforge.errors import UserError

T = TypeVar("T")
# A dotted class path, the form a registry may accept besides its names (litgpt's way of
# naming an optimizer: torch.optim.RMSprop).
CLASS_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


class Registry(Generic[T]):
    """Name -> entry for one extension kind; built-ins load on first use."""

    def __init__(self, kind: str, config_key: str, builtins: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.config_key = config_key
        self._builtins = builtins
        self._loaded = False
        self._entries: dict[str, T] = {}

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            for module in self._builtins:
                importlib.import_module(module)

    @overload
    def register(self, name: str, *, replace: bool = False) -> Callable[[T], T]: ...
    @overload
    def register(self, name: str, entry: T, *, replace: bool = False) -> T: ...

    def register(self, name: str, entry: Any = None, *, replace: bool = False) -> Any:
        """Register `entry` under `name`; without `entry`, a decorator that does so. A name
        taken already is refused unless `replace=True` (a plugin replacing a built-in says so)."""

        def add(value: T) -> T:
            if name in self._entries and self._entries[name] is not value and not replace:
                raise UserError(
                    f"{self.kind} {name!r} is registered already",
                    "pick another name, or register it with replace=True to replace it",
                )
            self._entries[name] = value
            return value

        return add if entry is None else add(entry)

    def unregister(self, name: str) -> None:
        """Remove `name` (tests that registered a toy entry clean up with this)."""
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        """The registered names, built-ins first, in registration order."""
        self._load()
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def items(self) -> list[tuple[str, T]]:
        self._load()
        return list(self._entries.items())

    def find(self, name: str) -> T | None:
        """The entry for `name`, or None."""
        self._load()
        return self._entries.get(name)

    def unknown_message(self, name: str) -> str:
        """One line for an unknown name, with the closest known one when there is one."""
        known = self.names()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown {self.kind} {name!r}{hint}; known: {', '.join(known)}"

    def get(self, name: str) -> T:
        """The entry for `name`; an unknown name is a UserError naming the config key. (A
        learning-rate schedule looks its shape up here on every optimizer step: one call.)"""
        entry = self._entries.get(name) if self._loaded else self.find(name)
        if entry is None:
            raise UserError(
                f"{self.config_key} = {name!r}: {self.unknown_message(name)}",
                f"Use one of {', '.join(self.names())}, or register your own "
                f"(see docs/architecture.md, 'how to add a {self.kind}').",
            )
        return entry


def load_object(target: str | Any) -> Any:
    """`"package.module:attribute"` imported on use; anything else is returned as it is.

    Built-in entries name their torch-heavy builders by this string so that registering them
    (and validating a config) imports nothing heavy; a plugin may give the callable itself.
    """
    if not isinstance(target, str):
        return target
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def lazy_attributes(package: str, modules: dict[str, tuple[str, ...]]) -> Callable[[str], Any]:
    """A package's module `__getattr__` (PEP 562): each name in `modules[module]` is imported
    from that module on first use, so importing the package (e.g. to reach its registry
    entries) costs nothing heavy."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name]), name)

    return __getattr__


# The table of registries. Each line names the config key it serves and the module(s) whose
# import registers the built-in entries.
OPTIMIZERS: Registry[Any] = Registry(
    "optimizer", "optimizer.name", ("trainforge.engine.optimizers",)
)
SCHEDULES: Registry[Any] = Registry(
    "learning-rate schedule", "schedule.lr_scheduler_type", ("trainforge.engine.schedule",)
)
DATASETS: Registry[Any] = Registry("dataset", "data.dataset", ("trainforge.data.catalog",))
TASKS: Registry[Any] = Registry("task", "task.kind", ("trainforge.tasks.catalog",))
LOGGERS: Registry[Any] = Registry("logger", "logging.loggers", ("trainforge.observe.loggers",))
EXPORT_FORMATS: Registry[Any] = Registry(
    "export format", "export --format", ("trainforge.export.formats",)
)
PROFILES: Registry[Any] = Registry("hardware profile", "profile", ("trainforge.profiles",))


def all_registries() -> dict[str, Registry[Any]]:
    """Every registry in this module, by kind (the contract tests walk this)."""
    return {r.kind: r for r in globals().values() if isinstance(r, Registry)}
