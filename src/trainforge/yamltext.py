"""YAML a user wrote, read safely: PyYAML's safe loader, with the expansion of anchors and
aliases bounded.

`yaml.safe_load` builds no objects but plain ones, yet it shares one object for every alias
of an anchor, so nine lines of nested aliases (the "billion laughs" document) load at once
into a value that stands for 9^9 strings. Whatever then walks it (a merge of config layers,
pydantic's validation, a copy) runs for hours: `--set data.options=[...]` or a config file
held the command line, and the web app's override box would hold a server thread.
`load` counts the values a document stands for once its aliases are written out (each node
counted once, so the count itself is linear) and refuses a document above `MAX_VALUES` or
one that contains itself, before anything is built. Real configs are a few hundred values.

Considered: refusing anchors outright (they are a legitimate way to write a config's
repeated parts), and `ruamel.yaml` (a second YAML library for one check).

Files trainforge wrote itself (a run's resolved config, a checkpoint's) are read with
`yaml.safe_load`: they hold no aliases.
"""

from __future__ import annotations

from typing import Any

import yaml

from trainforge.errors import UserError

MAX_VALUES = 100_000


class ExpansionRefused(yaml.YAMLError):
    """A document whose aliases stand for too many values, or for itself. Like PyYAML's own
    errors it has `problem` and `problem_mark`, so a reader that reports those reports it."""

    def __init__(self, problem: str, mark: yaml.Mark | None) -> None:
        self.problem = problem
        self.problem_mark = mark
        super().__init__(problem)


class _BoundedLoader(yaml.SafeLoader):
    def construct_document(self, node: yaml.Node) -> Any:
        _check_expansion(node)
        return super().construct_document(node)


def _check_expansion(root: yaml.Node) -> None:
    sizes: dict[int, int] = {}  # id(node) -> values it stands for, aliases written out
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise ExpansionRefused("an anchor's value contains an alias of itself", node.start_mark)
        open_nodes.add(key)
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(item) for item in node.value)
        else:
            total = 1
        open_nodes.discard(key)
        if total > MAX_VALUES:
            raise ExpansionRefused(
                f"its aliases stand for more than {MAX_VALUES:,} values once written out",
                node.start_mark,
            )
        sizes[key] = total
        return total

    size(root)


def load(text: str) -> Any:
    """`text` read as YAML like `yaml.safe_load`; raises `yaml.YAMLError` on bad syntax and
    `ExpansionRefused` (one of them) on a document too large once its aliases expand."""
    # yaml.load's own body with our loader: the safe loader's constructors, nothing else
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def value(text: str, what: str) -> Any:
    """A command-line or form value read as YAML, so 3, 1e-4, true and [1, 2] work; text
    that is no YAML stays text; blank is None. A value whose aliases expand too far is
    refused in one line naming `what` (the flag or field it came from)."""
    if not text.strip():
        return None
    try:
        return load(text)
    except ExpansionRefused as err:
        raise UserError(f"{what}: {err.problem}", "write the values out, without aliases") from None
    except yaml.YAMLError:
        return text
