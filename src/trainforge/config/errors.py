"""Config error messages: one line per problem with dotted path, bad value, reason and fix."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from trainforge.config.schema import flat_alias_paths, leaf_paths
from trainforge.errors import UserError


class ConfigError(UserError):
    """One or more config problems; each element of `lines` is a complete one-line message."""

    def __init__(self, lines: Sequence[str], salvaged: Any = None) -> None:
        self.lines = list(lines)
        # The config with the bad values left at their defaults (None: none could be
        # built), so cross-field rules can still be judged in the same pass.
        self.salvaged = salvaged
        super().__init__("\n".join(self.lines))

    def line(self) -> str:
        return "\n".join(self.lines)


# Words users type for a field, from other trainers and habit -> the fields they mean. When a
# word names several fields, the one in the section the user wrote it in wins.
ALIASES: dict[str, tuple[str, ...]] = {
    "lr": ("optimizer.learning_rate",),
    "learning_rate": ("optimizer.learning_rate",),
    "bs": ("training.per_device_train_batch_size", "evaluation.per_device_eval_batch_size"),
    "batch_size": ("training.per_device_train_batch_size", "evaluation.per_device_eval_batch_size"),
    "batch": ("training.per_device_train_batch_size",),
    "train_batch_size": ("training.per_device_train_batch_size",),
    "micro_batch_size": ("training.per_device_train_batch_size",),
    "eval_batch_size": ("evaluation.per_device_eval_batch_size",),
    "epochs": ("training.num_train_epochs",),
    "num_epochs": ("training.num_train_epochs",),
    "max_epochs": ("training.num_train_epochs",),
    "steps": ("training.max_steps",),
    "num_steps": ("training.max_steps",),
    "total_steps": ("training.max_steps",),
    "wd": ("optimizer.weight_decay",),
    "warmup": ("schedule.warmup_steps",),
    "warmup_ratio": ("schedule.warmup_epochs",),
    "scheduler": ("schedule.lr_scheduler_type",),
    "lr_scheduler": ("schedule.lr_scheduler_type",),
    "grad_accum": ("training.gradient_accumulation_steps",),
    "accumulation_steps": ("training.gradient_accumulation_steps",),
    "grad_clip": ("training.max_grad_norm",),
    "clip_grad_norm": ("training.max_grad_norm",),
    "max_norm": ("training.max_grad_norm",),
    "fp16": ("training.precision",),
    "bf16": ("training.precision",),
    "amp": ("training.precision",),
    "mixed_precision": ("training.precision",),
    "num_workers": ("data.dataloader_num_workers",),
    "workers": ("data.dataloader_num_workers",),
    "beta1": ("optimizer.adam_beta1",),
    "beta2": ("optimizer.adam_beta2",),
    "eps": ("optimizer.adam_epsilon",),
    "hidden_size": ("model.embedding_dim",),
    "d_model": ("model.embedding_dim",),
    "dim": ("model.embedding_dim",),
    "layers": ("model.num_layers",),
    "depth": ("model.num_layers",),
    "heads": ("model.num_heads",),
    "model_name": ("model.model_name_or_path",),
    "base_model": ("model.model_name_or_path",),
    "data_file": ("data.options.train_file",),
    "eval_file": ("data.options.validation_file",),
    "max_length": ("data.options.max_seq_length",),
    "seq_len": ("data.options.max_seq_length",),
    "output_dir": ("output.dir",),
    "logging_dir": ("output.dir",),
    "log_every": ("logging.logging_steps",),
    "log_steps": ("logging.logging_steps",),
    "save_every": ("checkpoint.save_steps",),
    "checkpoint_steps": ("checkpoint.save_steps",),
    "eval_every": ("evaluation.eval_steps",),
    "evaluation_steps": ("evaluation.eval_steps",),
}


def _alias_word(word: str) -> str:
    """The alias a word is, ignoring underscores (`batchsize` is `batch_size`)."""
    if word in ALIASES:
        return word
    squashed = {alias.replace("_", ""): alias for alias in ALIASES}
    return squashed.get(word.replace("_", ""), word)


def suggest_path(key: str, candidates: Sequence[str]) -> str | None:
    """The nearest full dotted path for a key a user wrote (`optimizer.lr` ->
    `optimizer.learning_rate`): an alias users type, then a close leaf name in the same
    section, then a close leaf name anywhere, then the nearest section (for a bare key)."""
    known = set(candidates)
    leaves = [c for c in candidates if "." in c]
    section, _, leaf = key.rpartition(".")
    word = leaf.lower().replace("-", "_")
    targets = [t for t in ALIASES.get(_alias_word(word), ()) if t in known]
    if targets:
        same = [t for t in targets if t.startswith(section + ".")] if section else []
        return (same or targets)[0]
    if section:
        in_section = {c.rpartition(".")[2]: c for c in leaves if c.startswith(section + ".")}
        close = difflib.get_close_matches(word, list(in_section), n=1, cutoff=0.6)
        if close:
            return in_section[close[0]]
    else:  # a bare key: a misspelt section first (`trainig` -> `training`)
        sections = sorted(known - set(leaves))
        close = difflib.get_close_matches(word, sections, n=1, cutoff=0.75)
        if close:
            return close[0]
    by_leaf: dict[str, str] = {}
    for c in leaves:
        by_leaf.setdefault(c.rpartition(".")[2], c)
    close = difflib.get_close_matches(word, list(by_leaf), n=1, cutoff=0.7)
    if close:
        return by_leaf[close[0]]
    close = difflib.get_close_matches(key, leaves, n=1, cutoff=0.6)
    return close[0] if close else None


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
    from trainforge.config.schema import RunConfig

    paths = leaf_paths(RunConfig) + flat_alias_paths()
    sections = sorted({p.split(".")[0] for p in paths})
    return paths + sections


def blame(path: str, label: str, sources: Mapping[str, str], names: Mapping[str, str]) -> str:
    """Who set a value, as the user wrote it: the flag (`--max_steps: training.max_steps`),
    else the file with the key it uses (`FILE: device_preference (training.device)`)."""
    origin = sources.get(path, "")
    if origin.startswith("flag "):
        flag = origin.removeprefix("flag ")
        flag = "--set" if flag.startswith("--set ") else flag
        return f"{flag}: {path}"
    if path in names and origin.startswith("file "):
        return f"{label}: {names[path]} ({path})"
    return f"{label}: {path}"


def blame_problem(
    problem: str, label: str, sources: Mapping[str, str], names: Mapping[str, str]
) -> str:
    """A cross-field rule's line (`training.device = 'cuda': ...`) blamed like a bad value:
    on the flag that set the field, or on the file's own key for it."""
    path = problem.split(" ", 1)[0].removesuffix(":")
    if path not in sources:
        return f"{label}: {problem}"
    rest = problem[len(path) :]
    if path in names and sources[path].startswith("file "):
        rest = rest.replace(f"set {path}=", f"set {names[path]} to ")
    return blame(path, label, sources, names) + rest


def format_validation_error(
    err: ValidationError,
    label: str,
    data: Any,
    sources: Mapping[str, str] | None = None,
    names: Mapping[str, str] | None = None,
) -> list[str]:
    """One line per problem. `sources` (dotted path -> where the value came from) blames a
    bad value on the flag that set it; `names` gives the file's own key for a field (the
    Jetson guide's `device_preference` for training.device)."""
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
        if kind == "entry_options":
            lines.extend(_option_lines(item, path, label, data, sources or {}, names or {}))
            continue
        value = _lookup(data, loc) if kind != "missing" else None
        reason = item["msg"].removeprefix("Value error, ")
        shown = f" = {value!r}" if value is not None and not isinstance(value, dict) else ""
        if kind == "value_error" and (not loc or reason.startswith(path + ".")):
            lines.append(f"{label}: {reason}")  # the reason names its own field
        else:
            where = blame(path, label, sources or {}, names or {})
            lines.append(f"{where}{shown}: {reason}")
    return lines


def _option_lines(
    item: Any,
    path: str,
    label: str,
    data: Any,
    sources: Mapping[str, str],
    names: Mapping[str, str],
) -> list[str]:
    """One line per problem an entry found with its options (`data.options.downlod: unknown
    option of dataset cifar10; did you mean download?`)."""
    lines = []
    for key, value, reason in item["ctx"]["problems"]:
        where = f"{path}.{key}" if key else path
        if where not in sources:  # set by its old flat spelling (data.download), or below
            flat = f"{path.rpartition('.')[0]}.{key}"
            below = [s for s in sources if s.startswith(where + ".")]
            where = flat if flat in sources else below[0] if below else where
        shown = f" = {value!r}" if value is not None and not isinstance(value, dict) else ""
        lines.append(f"{blame(where, label, sources, names)}{shown}: {reason}")
    return lines
