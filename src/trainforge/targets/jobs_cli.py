"""`trainforge jobs`: the runs this machine started on targets, in one list, and what can be
done to each: submit, logs, stop (a checkpoint and a clean end), resume, pull (bring the run
folder home and continue it here)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from trainforge.targets.jobs import FINAL

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Runs on targets: list them, submit, follow the log, stop, resume, bring home.",
)
TargetsFile = Annotated[
    Path | None, typer.Option("--targets", help="The targets file (default: the user's).")
]


def _refresh(targets: Path | None) -> list:
    """Every job, after one poll of each target that has unfinished ones."""
    from trainforge.targets.jobs import all_jobs, update_jobs
    from trainforge.targets.store import load_targets
    from trainforge.targets.watch import poll_target

    records = all_jobs()
    known = load_targets(targets)
    for name in sorted({r.target for r in records if r.state not in FINAL}):
        if name in known:
            update_jobs(poll_target(known[name], [r for r in records if r.target == name]))
    return all_jobs()


@app.callback(invoke_without_command=True)
def list_command(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the records as JSON.")] = False,
    targets: TargetsFile = None,
) -> None:
    """Every run started from here on a target, with its state, step and last metric."""
    if ctx.invoked_subcommand is not None:
        return
    records = _refresh(targets)
    if as_json:
        print(json.dumps([asdict(r) for r in records], indent=1))
        return
    if not records:
        print("no jobs yet: trainforge jobs submit CONFIG --target NAME --time HH:MM:SS")
        return
    print(f"{'name':<20} {'target':<10} {'job':>8}  {'state':<22} {'step':>7}  metric")
    for r in records:
        state = f"{r.state} ({r.reason})" if r.reason and r.state == "pending" else r.state
        metric = ", ".join(f"{k} {v:.4g}" for k, v in r.metric.items())
        badge = f"  [unreachable: {r.unreachable}]" if r.unreachable else ""
        step = "" if r.step is None else str(r.step)
        print(f"{r.name:<20} {r.target:<10} {r.job_id:>8}  {state:<22} {step:>7}  {metric}{badge}")


@app.command("submit")
def submit_command(
    config: Annotated[Path, typer.Argument(help="The run config (a path in this project).")],
    target: Annotated[str, typer.Option("--target", help="A target of the targets file.")],
    time_limit: Annotated[str, typer.Option("--time", help="Slurm time limit HH:MM:SS.")],
    nodes: Annotated[int, typer.Option("--nodes", help="Nodes.")] = 1,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", help="0: CPU job.")] = 0,
    procs_per_node: Annotated[
        int | None, typer.Option("--procs-per-node", help="CPU jobs: processes per node.")
    ] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="Hardware profile.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a field.")] = None,
    targets: TargetsFile = None,
) -> None:
    """Validate here, copy the config and its inputs, sbatch it on the target, record it."""
    from trainforge.targets.store import get_target
    from trainforge.targets.submit import submit_run

    record = submit_run(
        get_target(target, targets), config, nodes=nodes, gpus_per_node=gpus_per_node,
        time=time_limit, procs_per_node=procs_per_node, profile=profile, overrides=set_ or [],
    )  # fmt: skip
    print(f"Submitted batch job {record.job_id} on {target}: run {record.name}")
    print(f"follow: trainforge jobs logs {record.name} -f   list: trainforge jobs")


@app.command("logs")
def logs_command(
    name: Annotated[str, typer.Argument(help="The job (its run name).")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until it ends.")
    ] = False,
    targets: TargetsFile = None,
) -> None:
    """The job's log tail; with -f, new lines as they come, until the job ends."""
    from trainforge.targets.jobs import get_job, update_jobs
    from trainforge.targets.store import get_target
    from trainforge.targets.watch import log_tail, watch

    record = get_job(name)
    shown = 0

    def show(polled: list) -> None:
        nonlocal shown
        update_jobs(polled)
        lines = log_tail(record).splitlines()
        # The tail is the last lines: print those not printed yet.
        new = lines[shown:] if len(lines) >= shown else lines
        for line in new:
            print(line)
        sys.stdout.flush()
        shown = len(lines)

    target = get_target(record.target, targets)
    watch(target, [record], until=lambda rs: not follow or rs[0].state in FINAL, on_poll=show)
    if follow:
        print(
            f"job {record.job_id}: {record.state}"
            + (f" ({record.reason})" if record.reason else "")
        )


@app.command("stop")
def stop_command(
    name: Annotated[str, typer.Argument(help="The job.")], targets: TargetsFile = None
) -> None:
    """Ask the run to save a checkpoint and end (SIGTERM to its processes; no requeue)."""
    from trainforge.errors import UserError
    from trainforge.targets.jobs import get_job, save_job
    from trainforge.targets.remote import Remote
    from trainforge.targets.store import get_target

    record = get_job(name)
    if record.state in FINAL:
        raise UserError(
            f"job {name} is already {record.state}", f"resume it: trainforge jobs resume {name}"
        )
    done = Remote(get_target(record.target, targets)).run(f"scancel {record.job_id}", timeout=120)
    if done.code != 0:
        raise UserError(
            f"scancel {record.job_id} failed: {done.err.strip()}", "see trainforge jobs"
        )
    record.state = "stopping"
    save_job(record)
    print(f"job {record.job_id}: stopping; the run saves a checkpoint and ends (trainforge jobs)")


@app.command("resume")
def resume_command(
    name: Annotated[str, typer.Argument(help="The job.")], targets: TargetsFile = None
) -> None:
    """Submit the run again on its target, continuing from its newest checkpoint."""
    from trainforge.errors import UserError
    from trainforge.targets.jobs import get_job
    from trainforge.targets.store import get_target
    from trainforge.targets.submit import submit_run

    old = get_job(name)
    if old.options.get("sweep"):
        raise UserError(
            f"{name} is a sweep", "continue it with the same trainforge sweep command (--target)"
        )
    if old.state not in FINAL:
        raise UserError(
            f"job {name} is {old.state}", "wait for it, or stop it: trainforge jobs stop"
        )
    record = submit_run(
        get_target(old.target, targets), Path(old.config), resume=True, **old.options
    )
    print(f"Submitted batch job {record.job_id} on {record.target}: run {name} continues")


@app.command("pull")
def pull_command(
    name: Annotated[str, typer.Argument(help="The job.")],
    folder: Annotated[
        Path | None, typer.Argument(help="Where (default: its run folder path here).")
    ] = None,
    targets: TargetsFile = None,
) -> None:
    """Bring the run folder home; `trainforge train --resume FOLDER` continues it here."""
    from trainforge.errors import UserError
    from trainforge.targets.jobs import get_job
    from trainforge.targets.remote import Remote
    from trainforge.targets.store import get_target

    record = get_job(name)
    if record.state not in FINAL:
        raise UserError(
            f"job {name} is {record.state}", f"stop it first: trainforge jobs stop {name}"
        )
    where = folder or Path(record.run_dir)
    where.mkdir(parents=True, exist_ok=True)
    remote = Remote(get_target(record.target, targets))
    done = remote.rsync([remote.rsync_destination(record.run_dir) + "/", f"{where}/"], timeout=3600)
    if done.code != 0:
        raise UserError(f"copying {record.run_dir} failed: {done.err.strip()[-300:]}", "try again")
    print(f"run {name} is in {where}")
    print(f"continue it here: trainforge train --resume {where}")


def main(argv: list[str]) -> int:
    from trainforge.subapp import run_subapp

    return run_subapp(app, argv, "trainforge jobs")
