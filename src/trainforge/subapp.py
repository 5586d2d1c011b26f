"""Running a typer sub-application behind one `trainforge` command (export, bench-infer,
slurm): usage errors become one line and exit 2, like every other user-facing error."""

from __future__ import annotations

import sys

import typer
from typer.exceptions import TyperException


def run_subapp(app: typer.Typer, argv: list[str], prog: str) -> int:
    """Run `app` on `argv` as `prog`; returns the exit code (UserError propagates)."""
    try:
        app(args=argv, prog_name=prog, standalone_mode=False)
    except typer.Exit as done:
        return int(done.exit_code)
    except TyperException as err:  # usage errors (typer's own click)
        message = err.format_message() if hasattr(err, "format_message") else str(err)
        print(f"{prog}: {message.rstrip('.')}. See {prog} --help", file=sys.stderr)
        return 2
    return 0
