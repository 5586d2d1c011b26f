"""`trainforge sweep`: check the space against the schema, then run (or continue) the sweep;
`trainforge sweep status runs/NAME`: the table of trials.

`trainforge sweep CONFIG --space SPACE.yaml --trials N [--name NAME] [--parallel K]
[--metric NAME] [--direction maximize|minimize] [--pruner median|asha|none]
[--slurm SLURM OPTIONS [--submit]] [train flags...]`. The train flags (`--max_steps`,
`--set ...`) apply to every trial. Every problem of the space, the config and the flags is
one line, all in one pass, exit 2, and nothing is written. Running the same command again
continues the sweep in `runs/NAME`. The sweep's own options are read by hand (like
`config.flags`), because everything else on the line is a train flag passed through.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainforge.errors import UserError
from trainforge.sweep.space import DIRECTIONS, Space, check_against_schema, read_space, yaml_scalar
from trainforge.sweep.study import SweepFolder, record_sweep

PRUNERS = ("median", "asha", "none")
METRICS = ("accuracy", "loss", "perplexity", "per", "wer")
# --name value options of the sweep itself; --slurm and --submit take none.
_VALUE_OPTS = ("space", "trials", "name", "parallel", "metric", "direction", "pruner")
_SLURM_VALUE_OPTS = (
    "time", "partition", "account", "cpus-per-task", "gpus-per-node", "job-name", "sbatch",
)  # fmt: skip
USAGE = (
    "trainforge sweep CONFIG --space SPACE.yaml --trials N [--name NAME] [--parallel K] "
    "[--metric NAME --direction maximize|minimize] [--pruner median|asha|none] "
    "[--slurm --time HH:MM:SS [--partition P] [--submit]] [train flags...]\n"
    "trainforge sweep status runs/NAME"
)


def split_args(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """(the sweep's own options, the train flags), `--opt=value` and `--opt value` alike."""
    own: dict[str, Any] = {"sbatch": []}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        name, eq, inline = token[2:].partition("=") if token.startswith("--") else ("", "", "")
        if name in ("slurm", "submit"):
            own[name] = True
        elif name in _VALUE_OPTS or name in _SLURM_VALUE_OPTS:
            if not eq:
                if i + 1 >= len(argv):
                    raise UserError(f"--{name} needs a value", USAGE.splitlines()[0])
                i += 1
                inline = argv[i]
            if name == "sbatch":
                own["sbatch"].append(inline)
            else:
                own[name] = inline
        else:
            rest.append(token)
        i += 1
    return own, rest


def _int_opt(own: dict, name: str, default: int | None) -> int | None:
    if name not in own:
        return default
    try:
        value = int(own[name])
    except ValueError:
        value = 0
    if value < 1:
        raise UserError(f"--{name} {own[name]}: must be a whole number of at least 1", USAGE)
    return value


def sweep_main(argv: list[str]) -> int:
    """Run `trainforge sweep ARGV`; UserError propagates to the top-level handler."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv[0] == "status":
        return status_main(argv[1:])
    own, rest = split_args(argv)
    plan = prepare(own, rest)
    if own.get("slurm"):
        from trainforge.sweep.slurm import slurm_sweep

        return slurm_sweep(plan, own)
    return run_sweep(plan)


def status_main(argv: list[str]) -> int:
    from trainforge.sweep.summary import status

    if len(argv) != 1:
        raise UserError("sweep status needs one sweep folder", "trainforge sweep status runs/NAME")
    folder = SweepFolder(Path(argv[0]))
    if not folder.is_sweep():
        raise UserError(
            f"{folder.path}: not a sweep folder (no sweep.json)",
            "name the folder `trainforge sweep` made, e.g. runs/NAME",
        )
    for line in status(folder):
        print(line)
    return 0


def prepare(own: dict[str, Any], rest: list[str]) -> dict[str, Any]:
    """Check everything (one line per problem, all at once) and return the sweep's request."""
    from trainforge.config import flags as run_flags

    if "space" not in own or "trials" not in own:
        raise UserError("sweep needs --space SPACE.yaml and --trials N", USAGE.splitlines()[0])
    trials = _int_opt(own, "trials", None)
    args = run_flags.parse(rest)
    if args.config is None:
        raise UserError("no run config given", USAGE.splitlines()[0])
    if args.resume is not None:
        raise UserError(
            "sweep: --resume is not a train flag for trials",
            "run the same sweep command again to continue it",
        )
    problems = [f"--pruner {own['pruner']}: use {', '.join(PRUNERS)}"] if own.get(
        "pruner", "median"
    ) not in PRUNERS else []  # fmt: skip
    if own.get("direction") and own["direction"] not in DIRECTIONS:
        problems.append(f"--direction {own['direction']}: use maximize or minimize")
    space, found = read_space(Path(own["space"]))
    problems += found
    metric = own.get("metric") or space.metric
    base, found = _check_config(args, space, metric)
    problems += found
    if problems:
        _refuse(problems)
    return _request(own, rest, args, space, base, trials)


def _check_config(args: Any, space: Space, metric: str | None) -> tuple[Any, list[str]]:
    """The resolved base config and the problems of the config, of the metric asked for
    (one the task reports, judged as `evaluation.metric_for_best_model`) and of every space
    value."""
    from trainforge.config import ConfigError, validate
    from trainforge.config.flags import leaf_types
    from trainforge.config.schema import option_types
    from trainforge.hardware import detect

    platform = detect()

    def resolve(extra: list[str]) -> Any:
        return validate(
            args.config, platform=platform, profile=args.profile,
            overrides=[*args.overrides, *extra], flags=dict(args.flags),
            flag_sources=args.sources,
        )  # fmt: skip

    try:
        base = resolve([])
    except ConfigError as err:
        return None, list(err.lines)
    except UserError as err:
        return None, [err.line()]

    def probe(path: str, value: Any) -> list[str]:
        try:
            resolve([f"{path}={yaml_scalar(value)}"])
        except ConfigError as err:
            return [_reason(line, path, value) for line in err.lines]
        except UserError as err:
            return [err.line()]
        return []

    problems = []
    if metric is not None:
        problems = [f"metric: {line}" for line in probe("evaluation.metric_for_best_model", metric)]
    # An entry's options (`data.options.val_fraction`, `optimizer.args.momentum`) are fields
    # of the entries the base config picked.
    fields = {**leaf_types(), **option_types(base.config)}
    return base, problems + check_against_schema(space, fields, probe)


def _reason(line: str, path: str, value: Any) -> str:
    """A validation line without its file label, and without the `PATH = VALUE: ` the
    caller names itself."""
    text = line.split(": ", 1)[-1]
    for shown in {str(value), repr(value), yaml_scalar(value)}:
        if text.startswith(f"{path} = {shown}: "):
            return text[len(f"{path} = {shown}: ") :]
    return text


def _refuse(problems: list[str]) -> None:
    seen: list[str] = []
    for line in problems:
        if line not in seen:
            seen.append(line)
    raise UserError("\n".join(seen))


def _request(
    own: dict, rest: list[str], args: Any, space: Space, base: Any, trials: int | None
) -> dict[str, Any]:
    config = base.config
    metric = own.get("metric") or space.metric or config.evaluation.metric_for_best_model
    if metric not in METRICS:
        _refuse([f"metric {metric!r}: use one of {', '.join(METRICS)}"])
    up = metric == "accuracy"
    if metric == config.evaluation.metric_for_best_model and config.evaluation.greater_is_better:
        up = config.evaluation.greater_is_better
    direction = own.get("direction") or space.direction or ("maximize" if up else "minimize")
    name = own.get("name") or f"{Path(args.config).stem}-sweep"
    if "/" in name or name.startswith("."):
        _refuse([f"--name {name}: a plain folder name, e.g. lr-search"])
    train_args = [a for a in rest if a != str(args.config)]
    return {
        "format": 1,
        "name": name,
        "config": str(args.config),
        "train_args": train_args,
        "space": dict(space.raw),
        "space_file": str(own["space"]),
        "params": [p.describe() for p in space.params],
        "trials": trials,
        "metric": metric,
        "direction": direction,
        "pruner": own.get("pruner", "median"),
        "cwd": os.getcwd(),
        "folder": str(Path(config.output.dir) / name),
        "seed": config.training.seed,
        "parallel": _int_opt(own, "parallel", 1),
        "_space": space,
    }


def run_sweep(plan: dict[str, Any]) -> int:
    from trainforge.hardware.threads import usable_cores
    from trainforge.sweep.runner import Sweep
    from trainforge.sweep.summary import status

    folder = record_sweep(plan)
    parallel = plan["parallel"]
    threads = max(1, usable_cores() // parallel) if parallel > 1 else None
    print(
        f"sweep {folder.path}: {plan['trials']} trials, {plan['metric']} ({plan['direction']}), "
        f"pruner {plan['pruner']}, {parallel} at a time"
        + (f", {threads} cpu threads each" if threads else "")
    )
    sweep = Sweep(folder, folder.read_request(), plan["_space"], parallel=parallel,
                  threads=threads, seed=plan["seed"])  # fmt: skip
    finished = sweep.run()
    for line in status(folder):
        print(line)
    if finished:
        return 0
    if sweep.error:
        raise UserError(
            f"sweep {folder.path} stopped: {sweep.error}",
            "fix that, then run the same command again to continue",
        )
    print(f"sweep stopped; run the same command again to continue {folder.path}")
    if sweep.received == "SIGUSR1":  # Slurm's warning before the time limit
        from trainforge.sweep.slurm import requeue_own_task

        requeue_own_task()
    return 130
