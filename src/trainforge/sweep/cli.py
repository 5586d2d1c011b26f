"""`trainforge sweep`: check the space against the schema, then run (or continue) the sweep;
`trainforge sweep status runs/NAME`: the table of trials.

`trainforge sweep CONFIG --space SPACE.yaml --trials N|+N [--name NAME] [--parallel K]
[--metric NAME] [--direction maximize|minimize] [--pruner median|asha|none]
[--objective METRIC:max --objective latency_ms:min [--export-format onnx|int8]]
[--slurm SLURM OPTIONS [--submit]] [train flags...]`. The train flags (`--max_steps`,
`--set ...`) apply to every trial. Every problem of the space, the config and the flags is
one line, all in one pass, exit 2, and nothing is written. Running the same command again
continues the sweep in `runs/NAME`; `--trials +N` adds N trials to it. Exit codes: 0 when a
trial completed, 1 when none did, 130 when a signal stopped the sweep. The sweep's own
options are read by hand (like `config.flags`), because everything else on the line is a
train flag passed through.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainforge.errors import UserError
from trainforge.sweep.latency import FORMATS as LATENCY_FORMATS
from trainforge.sweep.latency import LATENCY, LATENCY_BUDGET_MS
from trainforge.sweep.space import DIRECTIONS, Space, check_against_schema, read_space, yaml_scalar
from trainforge.sweep.study import SweepFolder, record_sweep

PRUNERS = ("median", "asha", "none")
METRICS = ("accuracy", "loss", "perplexity", "per", "wer")
# --name value options of the sweep itself; --slurm and --submit take none.
_VALUE_OPTS = (
    "space", "trials", "name", "parallel", "metric", "direction", "pruner", "objective",
    "export-format", "latency-budget-ms",
)  # fmt: skip
_DIRECTION_WORDS = {"max": "maximize", "maximize": "maximize", "min": "minimize",
                    "minimize": "minimize"}  # fmt: skip
_SLURM_VALUE_OPTS = (
    "time", "partition", "account", "cpus-per-task", "gpus-per-node", "job-name", "sbatch",
)  # fmt: skip
USAGE = (
    "trainforge sweep CONFIG --space SPACE.yaml --trials N|+N [--name NAME] [--parallel K] "
    "[--metric NAME --direction maximize|minimize] [--pruner median|asha|none] "
    "[--objective accuracy:max --objective latency_ms:min [--export-format onnx|int8] "
    "[--latency-budget-ms MS]] "
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
            if name in ("sbatch", "objective"):
                own.setdefault(name, []).append(inline)
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


def sweep_main(argv: list[str], *, send: Callable[[dict, dict], None] | None = None) -> int:
    """Run `trainforge sweep ARGV`; UserError propagates to the top-level handler. `send`
    submits the job array elsewhere (`--target`: a cluster over SSH) instead of here."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv[0] == "status":
        return status_main(argv[1:])
    own, rest = split_args(argv)
    if send is not None and not (own.get("slurm") and own.get("submit")):
        raise UserError(
            "--target runs the sweep on a cluster as a Slurm job array",
            "add --slurm --time HH:MM:SS --submit",
        )
    plan = prepare(own, rest)
    if send is not None:
        send(plan, own)
        return 0
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
    extend = str(own["trials"]).startswith("+")
    trials = _int_opt({"trials": str(own["trials"]).removeprefix("+")}, "trials", None)
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
    goals, found = parse_objectives(own)
    problems += found
    metric = next((m for m, _ in goals if m != LATENCY), None) or own.get("metric") or space.metric
    base, found = _check_config(args, space, metric)
    problems += found
    if base is not None:
        problems += _reaches_validation(base.config, metric)
    if problems:
        _refuse(problems)
    plan = _request(own, rest, args, space, base, trials)
    return _edge_request(plan, own, goals, extend, trials)


def parse_objectives(own: dict[str, Any]) -> tuple[list[tuple[str, str]], list[str]]:
    """`--objective NAME:max|min`, each once: one training metric, and `latency_ms` besides."""
    goals, problems = [], []
    for text in own.get("objective", []):
        name, _, way = text.partition(":")
        if name not in (*METRICS, LATENCY) or way not in _DIRECTION_WORDS:
            problems.append(
                f"--objective {text}: use NAME:max or NAME:min with NAME one of "
                f"{', '.join((*METRICS, LATENCY))}"
            )
            continue
        goals.append((name, _DIRECTION_WORDS[way]))
    if problems:
        return [], problems
    names = [m for m, _ in goals]
    training = [m for m in names if m != LATENCY]
    if goals and (len(training) != 1 or len(set(names)) != len(names)):
        problems.append(
            f"--objective {' --objective '.join(own['objective'])}: give one training metric, "
            "and latency_ms besides it, e.g. --objective accuracy:max --objective latency_ms:min"
        )
    if goals and (own.get("metric") or own.get("direction")):
        problems.append("--objective names the metric and its direction: leave out --metric "
                        "and --direction")  # fmt: skip
    return goals, problems


def _reaches_validation(config: Any, metric: str | None) -> list[str]:
    """A trial that never validates reports no metric: refused before the first trial."""
    e = config.evaluation
    if e.eval_steps is None and e.eval_every_epochs is None:
        return [
            f"evaluation: no trial would validate, so none would report "
            f"{metric or e.metric_for_best_model}; "
            "set evaluation.eval_steps=N (or evaluation.eval_every_epochs=N)"
        ]
    return []


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


def _edge_request(
    plan: dict[str, Any], own: dict[str, Any], goals: list[tuple[str, str]], extend: bool,
    trials: int | None,
) -> dict[str, Any]:  # fmt: skip
    """The objectives (and for `latency_ms` the export format and budget) and the total of
    trials (`--trials +N`: N more than the sweep in the folder has) added to the request."""
    from trainforge.sweep.space import num_points

    if goals:
        plan["metric"], plan["direction"] = next(g for g in goals if g[0] != LATENCY)
    plan["objectives"] = [list(g) for g in goals] or [[plan["metric"], plan["direction"]]]
    problems = []
    if len(plan["objectives"]) > 1:
        if own.get("pruner", "none") != "none":
            problems.append(f"--pruner {own['pruner']}: Optuna prunes no study of several "
                            "objectives; leave --pruner out")  # fmt: skip
        plan["pruner"] = "none"
    problems += _latency_options(plan, own, [m for m, _ in goals])
    if extend:
        folder = SweepFolder(Path(plan["folder"]))
        if not folder.is_sweep():
            problems.append(f"--trials +{trials}: {folder.path} holds no sweep to extend; "
                            f"give --trials {trials}")  # fmt: skip
        else:
            plan["trials"] = int(folder.read_request().get("trials") or 0) + int(trials or 0)
    points = num_points(plan["_space"])
    if points is not None and points < plan["trials"]:
        problems.append(
            f"--trials {plan['trials']}: the space has {points} distinct points and a sweep "
            f"draws each once; use --trials {points} or widen the space"
        )
    if problems:
        _refuse(problems)
    return plan


def _latency_options(plan: dict[str, Any], own: dict[str, Any], names: list[str]) -> list[str]:
    if LATENCY not in names:
        given = [f"--{k}" for k in ("export-format", "latency-budget-ms") if k in own]
        return [f"{' and '.join(given)}: only with --objective latency_ms:min"] if given else []
    fmt = own.get("export-format", "onnx")
    problems = [] if fmt in LATENCY_FORMATS else [
        f"--export-format {fmt}: use {' or '.join(LATENCY_FORMATS)}"]  # fmt: skip
    try:
        budget = float(own.get("latency-budget-ms", LATENCY_BUDGET_MS))
    except ValueError:
        budget = -1.0
    if not budget > 0:
        problems.append(f"--latency-budget-ms {own['latency-budget-ms']}: a time in ms above 0")
    plan["export_format"], plan["latency_budget_ms"] = fmt, budget
    return problems


def run_sweep(plan: dict[str, Any]) -> int:
    """Run (or continue) the sweep: 0 when at least one trial completed, 1 when none did,
    130 when a signal stopped it (2, a user error, when a worker could not go on)."""
    from trainforge.hardware.threads import usable_cores
    from trainforge.sweep.runner import Sweep
    from trainforge.sweep.summary import status

    folder = record_sweep(plan)
    parallel = plan["parallel"]
    threads = max(1, usable_cores() // parallel) if parallel > 1 else None
    goals = " and ".join(f"{m} ({d})" for m, d in plan["objectives"])
    print(
        f"sweep {folder.path}: {plan['trials']} trials, {goals}, "
        f"pruner {plan['pruner']}, {parallel} at a time"
        + (f", {threads} cpu threads each" if threads else "")
    )
    sweep = Sweep(folder, folder.read_request(), plan["_space"], parallel=parallel,
                  threads=threads, seed=plan["seed"])  # fmt: skip
    finished = sweep.run()
    for line in status(folder):
        print(line)
    if finished:
        return _verdict(folder)
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


def _verdict(folder: SweepFolder) -> int:
    """0 when a trial completed; else one line on stderr with the first reason and the fix."""
    from trainforge.sweep.summary import counts, rows

    found, request = rows(folder)
    if counts(found)["completed"]:
        return 0
    reasons = [r.reason for r in found if r.reason]
    why = f" ({reasons[0]})" if reasons else ""
    if any("no validation" in r for r in reasons):
        fix = "validate within each trial: a shorter evaluation.eval_steps, or more --max_steps"
    elif counts(found)["pruned"] and not reasons:
        fix = "every trial was pruned: try --pruner none or a wider space"
    else:
        first = next((r.trial for r in found if r.reason), found[0].trial if found else "")
        fix = f"see {folder.logs}/{first}.log, fix the cause, and start a sweep with a new --name"
    ended = ", ".join(f"{n} {k}" for k, n in counts(found).items() if n and k != "completed")
    print(
        f"sweep {folder.path}: 0 of {request['trials']} trials completed: {ended}{why}. Fix: {fix}",
        file=sys.stderr,
    )
    return 1
