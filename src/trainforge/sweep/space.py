"""The search space: the space file, its checks against the run-config schema, and the
values one trial draws.

```yaml
metric: accuracy            # optional: default evaluation.metric_for_best_model
direction: maximize         # optional: default from the metric (accuracy up, others down)
lr: fine-tuning             # optional preset: from-scratch | fine-tuning | transfer
params:
  optimizer.learning_rate: {log_uniform: [1.0e-4, 1.0e-2]}
  model.embedding_dim: {choice: [64, 128, 192]}
  schedule.warmup_epochs: {int: [1, 5]}
  model.mlp_dropout: {uniform: [0.0, 0.2]}
```

Every problem is found in one pass and reported one line each: the file's shape (unknown
keys, a distribution that is not one of the kinds, bounds that are not numbers, low not
below high, a log range that is not above 0, an empty choice), then each field path against
the schema (with the nearest known name), then every value a trial could get (both bounds,
every choice) put through the same validation as `trainforge train --set PATH=VALUE`, so a
wrong type or a value the cross-field rules refuse is caught before any trial runs.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainforge import yamltext
from trainforge.errors import UserError

KINDS = ("log_uniform", "uniform", "int", "log_int", "choice")
DIRECTIONS = ("maximize", "minimize")
LR_FIELD = "optimizer.learning_rate"
# The learning-rate guidelines of the training-pipeline assets README as search ranges:
# from scratch 1e-3 with warmup (searched half a decade either side), fine-tuning
# 1e-4 to 5e-4, transfer learning 1e-5 to 1e-4; log-uniform, as rates are.
LR_PRESETS: dict[str, tuple[float, float]] = {
    "from-scratch": (3.0e-4, 3.0e-3),
    "fine-tuning": (1.0e-4, 5.0e-4),
    "transfer": (1.0e-5, 1.0e-4),
}
_TOP_KEYS = ("metric", "direction", "lr", "params")


@dataclass(frozen=True)
class Param:
    """One searched field: `kind` is one of KINDS; bounds for ranges, `choices` for choice."""

    path: str
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    choices: tuple[Any, ...] = ()

    def probe_values(self) -> list[Any]:
        """The values whose validity stands for the whole range: both ends, every choice."""
        return list(self.choices) if self.kind == "choice" else [self.low, self.high]

    def describe(self) -> str:
        if self.kind == "choice":
            return f"choice {list(self.choices)}"
        return f"{self.kind} [{self.low}, {self.high}]"


@dataclass(frozen=True)
class Space:
    params: tuple[Param, ...]
    metric: str | None = None
    direction: str | None = None
    source: str = "space"
    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def paths(self) -> list[str]:
        return [p.path for p in self.params]


def read_space(path: Path) -> tuple[Space, list[str]]:
    """The space file's params and every problem of its shape (no schema yet)."""
    label = str(path)
    try:
        data = yamltext.load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise UserError(
            f"--space {path}: cannot read it ({err.strerror})", "give a YAML file"
        ) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None)  # PyYAML's marked errors name the problem
        where += f": {problem}" if problem else ""
        raise UserError(
            f"{label}: not valid YAML{where}", "fix the file; see docs/sweeps.md"
        ) from None
    if not isinstance(data, dict):
        raise UserError(f"{label}: expected a mapping with params:", "see docs/sweeps.md")
    return parse_space(data, label)


def parse_space(data: Mapping[str, Any], label: str) -> tuple[Space, list[str]]:
    problems = [
        f"{label}: unknown key {key!r}; known: {', '.join(_TOP_KEYS)}"
        for key in data
        if key not in _TOP_KEYS
    ]
    raw_params = data.get("params") or {}
    if not isinstance(raw_params, dict):
        problems.append(f"{label}: params must be a mapping of field path to distribution")
        raw_params = {}
    params = []
    for name, spec in raw_params.items():
        param, found = _param(str(name), spec, label)
        problems += found
        if param is not None:
            params.append(param)
    preset = data.get("lr")
    if preset is not None:
        if preset not in LR_PRESETS:
            problems.append(
                f"{label}: lr: {preset!r} is not a preset; use {' | '.join(LR_PRESETS)}"
            )
        elif LR_FIELD in raw_params:
            problems.append(f"{label}: lr: {preset} and params.{LR_FIELD} both set; keep one")
        else:
            low, high = LR_PRESETS[preset]
            params.insert(0, Param(LR_FIELD, "log_uniform", low, high))
    metric, direction = data.get("metric"), data.get("direction")
    if direction is not None and direction not in DIRECTIONS:
        problems.append(f"{label}: direction: {direction!r}; use maximize or minimize")
    if not params and not problems:
        problems.append(f"{label}: no params to search; add params: or lr: PRESET")
    space = Space(tuple(params), metric, direction, label, dict(data))
    return space, problems


def _param(name: str, spec: Any, label: str) -> tuple[Param | None, list[str]]:
    where = f"{label}: params.{name}"
    if name == "lr" and spec in LR_PRESETS:  # the preset written where the fields go
        return None, [
            f"{where}: {spec} is a learning-rate preset, a top-level key of the space file; "
            f"move `lr: {spec}` out of params: (beside it)"
        ]
    if not isinstance(spec, dict) or len(spec) != 1:
        return None, [f"{where}: expected one distribution, e.g. {{log_uniform: [1.0e-4, 1.0e-2]}}"]
    kind, args = next(iter(spec.items()))
    if kind not in KINDS:
        return None, [f"{where}: unknown distribution {kind!r}; use {', '.join(KINDS)}"]
    if kind == "choice":
        if not isinstance(args, list) or not args:
            return None, [f"{where}: choice needs a non-empty list of values"]
        return Param(name, kind, choices=tuple(args)), []
    if not isinstance(args, list) or len(args) != 2:
        return None, [f"{where}: {kind} needs [low, high]"]
    low, high = args
    integer = kind in ("int", "log_int")
    number = (int,) if integer else (int, float)
    if any(isinstance(v, bool) or not isinstance(v, number) for v in (low, high)):
        what = "whole numbers" if integer else "numbers"
        return None, [f"{where}: {kind} bounds must be {what}, got [{low!r}, {high!r}]"]
    if not all(math.isfinite(v) for v in (low, high)):
        return None, [f"{where}: {kind} bounds must be finite, got [{low}, {high}]"]
    problems = []
    if low >= high:
        problems.append(f"{where}: low {low} is not below high {high}; write [low, high]")
    if kind.startswith("log") and low <= 0:
        problems.append(f"{where}: a log range must be above 0, got low {low}")
    if problems:
        return None, problems
    if not integer:
        low, high = float(low), float(high)
    return Param(name, kind, low, high), []


def _whole_numbers_only(annotation: Any) -> bool:
    """Whether a field takes whole numbers only (int, int | None), not fractions."""
    args = typing.get_args(annotation) or (annotation,)
    kinds = {a for a in args if a is not type(None)}
    return int in kinds and float not in kinds and bool not in kinds


def check_against_schema(
    space: Space, field_types: Mapping[str, Any], probe: Callable[[str, Any], list[str]]
) -> list[str]:
    """Problems of the space against the run-config schema (`field_types`: dotted path ->
    annotation): unknown paths (with the nearest known one), a fractional distribution on a
    whole-number field, then every value a trial could get that `probe(path, value)`
    refuses."""
    from trainforge.config.errors import suggest_path

    problems: list[str] = []
    for param in space.params:
        where = f"{space.source}: params.{param.path}"
        if param.path not in field_types:
            near = suggest_path(param.path, list(field_types))
            hint = f"; did you mean {near}?" if near else ""
            problems.append(f"{where}: unknown field{hint}")
            continue
        fractional = param.kind in ("uniform", "log_uniform")
        if fractional and _whole_numbers_only(field_types[param.path]):
            whole = "log_int" if param.kind == "log_uniform" else "int"
            problems.append(
                f"{where}: {param.kind} draws fractions but the field takes whole numbers; "
                f"use {{{whole}: [{int(param.low)}, {int(param.high)}]}}"
            )
            continue
        for value in param.probe_values():
            for line in probe(param.path, value):
                problems.append(f"{where} = {value!r} is refused: {line}")
    return problems


def draw(trial: Any, space: Space) -> dict[str, Any]:
    """The values one Optuna trial draws from the space (Optuna records them on the trial)."""
    values: dict[str, Any] = {}
    for p in space.params:
        if p.kind == "choice":
            values[p.path] = trial.suggest_categorical(p.path, list(p.choices))
        elif p.kind in ("int", "log_int"):
            values[p.path] = trial.suggest_int(p.path, p.low, p.high, log=p.kind == "log_int")
        else:
            values[p.path] = trial.suggest_float(p.path, p.low, p.high, log=p.kind == "log_uniform")
    return values


def yaml_scalar(value: Any) -> str:
    """A value written so that YAML (as `--set` reads it) gives back exactly this value:
    floats by their shortest round-trip repr, with the `.0` YAML 1.1 wants before an
    exponent (`1e-05` would read as text)."""
    if isinstance(value, float):
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent}"
        return text
    if isinstance(value, str):
        return yaml.safe_dump(value, default_style='"').strip()
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("\n...")


def set_flags(values: Mapping[str, Any]) -> list[str]:
    """`--set PATH=VALUE` for each drawn value, as `trainforge train` takes them."""
    out: list[str] = []
    for path, value in values.items():
        out += ["--set", f"{path}={yaml_scalar(value)}"]
    return out


def distributions(space: Space) -> dict[str, Any]:
    """The space as Optuna distributions, exactly as `draw` suggests them (so a point the
    sampler draws for the whole space is taken by each `suggest_*` as it is)."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    out: dict[str, Any] = {}
    for p in space.params:
        if p.kind == "choice":
            out[p.path] = CategoricalDistribution(list(p.choices))
        elif p.kind in ("int", "log_int"):
            out[p.path] = IntDistribution(int(p.low), int(p.high), log=p.kind == "log_int")
        else:
            out[p.path] = FloatDistribution(p.low, p.high, log=p.kind == "log_uniform")
    return out


def num_points(space: Space) -> int | None:
    """How many distinct points the space has: a count when every param is a choice or a
    whole number, None when one is a continuous range."""
    count = 1
    for p in space.params:
        if p.kind == "choice":
            count *= len(set(map(repr, p.choices)))
        elif p.kind in ("int", "log_int"):
            count *= int(p.high) - int(p.low) + 1
        else:
            return None
    return count
