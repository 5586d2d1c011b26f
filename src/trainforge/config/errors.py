"""Config error messages: one line per problem with dotted path, bad value, reason and fix."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from trainforge.errors import UserError


class ConfigError(UserError):
    """One or more config problems; each element of `lines` is a complete one-line message."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = list(lines)
        super().__init__("\n".join(self.lines))

    def line(self) -> str:
        return "\n".join(self.lines)


def suggest_path(key: str, candidates: Sequence[str]) -> str | None:
    """Nearest valid dotted path: same section first, then the leaf name anywhere."""
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if close:
        return close[0]
    leaf = key.rsplit(".", 1)[-1]
    by_leaf = {c.rsplit(".", 1)[-1]: c for c in candidates}
    close = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.7)
    return by_leaf[close[0]] if close else None


def _lookup(data: Any, loc: Sequence[Any]) -> Any:
    node = data
    for part in loc:
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and part < len(node)
        if in_dict or in_list:
            node = node[part]
        else:
            return None
    return node


def _known_paths() -> list[str]:
    from trainforge.config.loading import leaf_paths
    from trainforge.config.schema import RunConfig

    paths = leaf_paths(RunConfig)
    sections = sorted({p.split(".")[0] for p in paths})
    return paths + sections


def format_validation_error(err: ValidationError, label: str, data: Any) -> list[str]:
    lines = []
    for item in err.errors():
        loc = [p for p in item["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
        path = ".".join(str(p) for p in loc) or "(top level)"
        kind = item["type"]
        if kind == "extra_forbidden":
            hint = suggest_path(path, _known_paths())
            fix = f"did you mean {hint}?" if hint else "remove it (see `trainforge config show`)"
            lines.append(f"{label}: {path}: unknown key; {fix}")
            continue
        value = _lookup(data, loc) if kind != "missing" else None
        reason = item["msg"].removeprefix("Value error, ")
        shown = f" = {value!r}" if value is not None and not isinstance(value, dict) else ""
        if kind == "value_error" and not loc:
            lines.append(f"{label}: {reason}")
        else:
            lines.append(f"{label}: {path}{shown}: {reason}")
    return lines
