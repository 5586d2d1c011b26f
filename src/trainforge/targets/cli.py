"""`trainforge targets list|add|check`: the targets file from the command line.

The top-level command forwards its arguments here (`main(argv)`); nothing here imports torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainforge.targets.spec import Target
from trainforge.targets.store import add_target, default_path, get_target, load_targets

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Where runs execute: this machine, or Slurm here or on a login node over SSH.",
)
TargetsFile = Annotated[
    Path | None,
    typer.Option(
        "--targets", help="The targets file (default: ~/.config/trainforge/targets.yaml)."
    ),
]


@app.command("list")
def list_command(targets: TargetsFile = None) -> None:
    """Every target with where it runs (`local` is always there)."""
    path = targets or default_path()
    found = load_targets(path)
    width = max(len(name) for name in found)
    for name, target in found.items():
        extra = [f"partition {target.partition}"] if target.partition else []
        extra += [f"in {target.remote_dir}"] if target.remote_dir else []
        kind = "slurm over ssh" if target.remote else target.kind
        print(f"{name:<{width}}  {kind:<14}  {target.where()}" + "".join(f", {e}" for e in extra))
    if len(found) == 1:
        print(
            f"no cluster targets in {path}; add one: trainforge targets add NAME --host LOGIN_NODE"
        )


@app.command("add")
def add_command(
    name: Annotated[str, typer.Argument(help="What --target NAME will call it.")],
    host: Annotated[
        str | None, typer.Option("--host", help="Login node (or an ssh config alias); empty: here.")
    ] = None,
    user: Annotated[str | None, typer.Option("--user", help="SSH user.")] = None,
    port: Annotated[int | None, typer.Option("--port", help="SSH port.")] = None,
    identity_file: Annotated[
        str | None, typer.Option("--identity-file", help="Private key for ssh -i.")
    ] = None,
    ssh_option: Annotated[
        list[str] | None, typer.Option("--ssh-option", help="More ssh -o KEY=VALUE (repeat).")
    ] = None,
    remote_dir: Annotated[
        str | None, typer.Option("--remote-dir", help="The project folder on the cluster.")
    ] = None,
    partition: Annotated[
        str | None, typer.Option("--partition", help="sbatch --partition.")
    ] = None,
    account: Annotated[str | None, typer.Option("--account", help="sbatch --account.")] = None,
    qos: Annotated[str | None, typer.Option("--qos", help="sbatch --qos.")] = None,
    setup: Annotated[
        str | None, typer.Option("--setup", help="Shell line run first there (module load ...).")
    ] = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="Overwrite a target of that name.")
    ] = False,
    targets: TargetsFile = None,
) -> None:
    """Add a Slurm target (over SSH with --host), then check it: `targets check NAME`."""
    from pydantic import ValidationError

    from trainforge.errors import UserError

    fields = {
        "name": name, "host": host, "user": user, "port": port, "identity_file": identity_file,
        "ssh_options": tuple(ssh_option or ()), "remote_dir": remote_dir,
        "partition": partition, "account": account, "qos": qos, "setup": setup,
    }  # fmt: skip
    try:
        target = Target.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(x) for x in first["loc"]).replace("_", "-")
        raise UserError(f"targets add {name}: --{key}: {first['msg']}", "fix that value") from None
    path = add_target(target, targets, replace=replace)
    print(f"target {name} ({target.where()}) saved in {path}")
    print(
        f"check it: trainforge targets check {name}" + (f" --targets {targets}" if targets else "")
    )


@app.command("check")
def check_command(
    name: Annotated[str, typer.Argument(help="The target to check.")],
    targets: TargetsFile = None,
) -> None:
    """Log in, find sbatch, sinfo and the remote trainforge, and print the partitions."""
    from trainforge.targets.check import check_target

    for line in check_target(get_target(name, targets)):
        print(line)
    print(f"target {name}: ready")


def main(argv: list[str]) -> int:
    from trainforge.subapp import run_subapp

    return run_subapp(app, argv, "trainforge targets")
