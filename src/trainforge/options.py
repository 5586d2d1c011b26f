"""Options owned by an extension's entry: the base model and the one check of given values.

An entry of a registry (`trainforge.registry`) may own an options model: its `options`
attribute, a subclass of `Options` here (frozen, unknown keys refused). The config section
or command line that picks the entry feeds it: `data.options` (a dataset), `optimizer.args`
(an optimizer builder), `logging.options.NAME` (a logger), `export --option KEY=VALUE` (an
export format). `check_options` validates given values against the model in one pass and
turns each problem into (option, value, reason) with the nearest known name, which the
config errors and the export command print as one line each.

Layering: at the bottom beside `trainforge.registry`; it imports pydantic only, so entries
can be declared without importing the packages that use them.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


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
