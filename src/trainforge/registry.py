"""Registries: every extension point of trainforge, keyed by the string the run config uses.

This module owns the registry type and the one table of registries. Each registry maps a
config string (`optimizer.name: sgd`, `data.dataset: cifar10`, ...) to an entry object that
the package owning that kind defines (a builder function, a dataclass of metadata and
builders). Adding a dataset, an optimizer, a schedule, a logger, an export format, a task
kind or a profile is one file that calls `REGISTRY.register(name, entry)` (or uses it as a
decorator); nothing else lists the names. The config schema checks allowed values, the web
dialog offers choices and the docs list names by reading these registries.

Layering: this module sits at the bottom (it imports only pydantic and `trainforge.errors`),
so `config` can read the names without importing the packages that own the entries. Each registry
names the modules that register its built-in entries (`builtins`); they are imported by
name on the first lookup, the same way a plugin system reads entry points. Those modules
must not import torch at module level, so config validation stays light: their heavy
builders are named as "module:attribute" strings that `load_object` imports on use, and
packages re-export their heavy names through `lazy_attributes`.

Entry types (defined by the owning package): optimizers and schedules are builder
functions (`engine.optimizers`, `engine.schedule`); `data.catalog.DatasetEntry`,
`tasks.catalog.TaskEntry`, `observe.loggers.LoggerEntry`, `export.formats.ExportFormat`,
`profiles.ProfileEntry`.

Options: an entry may own an options model (`options`, a frozen pydantic `Options` class:
a dataset's `download`, an optimizer's `momentum`, an export format's `opset`). The config
section or command line that picks the entry feeds it (`data.options`, `optimizer.args`,
`logging.options.NAME`, `export --option k=v`); `check_options` validates the values
against the entry's model and answers each problem in one line with a did-you-mean.

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

from pydantic import BaseModel, ConfigDict, ValidationError

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
        """The entry for `name`; an unknown name is a UserError naming the config key."""
        entry = self.find(name)
        if entry is None:
            raise UserError(
                f"{self.config_key} = {name!r}: {self.unknown_message(name)}",
                f"Use one of {', '.join(self.names())}, or register your own "
                f"(see docs/architecture.md, 'how to add a {self.kind}').",
            )
        return entry


class Options(BaseModel):
    """Base of an entry's own options: unknown keys are errors, values frozen once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoOptions(Options):
    """The options of an entry that takes none."""


# One problem with an entry's options: (option name, the value given or None, the reason).
Problem = tuple[str, Any, str]


def options_model(entry: object) -> type[BaseModel]:
    """The options model an entry (or builder function) owns; `NoOptions` when it has none."""
    model = getattr(entry, "options", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else NoOptions


def check_options(
    model: type[BaseModel], given: Any, owner: str
) -> tuple[BaseModel | None, list[Problem]]:
    """`given` (a mapping, or a model instance already read) validated against `model`: the
    options, or None with every problem found in one pass. `owner` names the entry
    (`dataset cifar10`) in the reasons."""
    if isinstance(given, model):
        return given, []
    if isinstance(given, BaseModel):
        given = given.model_dump()
    if given is None:
        given = {}
    if not isinstance(given, dict):
        return None, [("", given, f"must be a mapping of option: value for {owner}")]
    try:
        return model.model_validate(given), []
    except ValidationError as err:
        return None, [_problem(model, given, item, owner) for item in err.errors()]


def _problem(model: type[BaseModel], given: dict, item: Any, owner: str) -> Problem:
    key = ".".join(str(p) for p in item["loc"])
    known = list(model.model_fields)
    if item["type"] == "extra_forbidden":
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        if close:
            return key, None, f"unknown option of {owner}; did you mean {close[0]}?"
        takes = f"its options: {', '.join(known)}" if known else "it takes no options"
        return key, None, f"unknown option of {owner}; {takes}"
    reason = str(item["msg"]).removeprefix("Value error, ")
    return key, given.get(key) if key in given else None, f"{reason} ({owner})"


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
