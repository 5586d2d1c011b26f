"""Run the real `trainforge` entry point inside the test process (so monkeypatches and
fixtures such as tiny_cifar apply) and collect its exit code and output.

`run_main` is the in-process stand-in for `run_cli` (a `python -m trainforge` child): the
same `returncode` / `stdout` / `stderr` answer at a fraction of the cost (a child pays
1-2 s of interpreter and library start-up for a one-line refusal). It runs `cli.main()` with
the process state a command may change put back afterwards: os.environ, the working
directory, sys.argv, torch's thread count, the root logger's handlers and level and the
signal handlers. The quiet console (observe.quiet) stays installed: it is set up once per
process, as a real process keeps it. pytest's own `subprocess.CompletedProcess` was the
model for the answer; no library runs a Typer app in-process with all of that restored
(Typer's CliRunner swaps the streams only and does not run trainforge's `main()` error
handling)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from trainforge import cli

REPO = Path(__file__).resolve().parents[2]
# The signals a command may take over (Ctrl+C, Slurm's preemption, a web Stop).
SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGHUP")
    if hasattr(signal, name)
)  # fmt: skip


def run_in_process(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["trainforge", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@dataclass
class Ran:
    """What `run_cli` answers (the fields tests read of a CompletedProcess)."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def _exit_code(exit_: SystemExit) -> int:
    if exit_.code is None:
        return 0
    if isinstance(exit_.code, int):
        return exit_.code
    print(exit_.code, file=sys.stderr)  # sys.exit("text"): the interpreter prints it, exit 1
    return 1


@contextlib.contextmanager
def restored_process_state() -> Iterator[None]:
    """Whatever a command changes in the process is put back when the block ends."""
    environ, cwd, argv = dict(os.environ), os.getcwd(), list(sys.argv)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    signals = {number: signal.getsignal(number) for number in SIGNALS}
    threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
        sys.argv[:] = argv
        root.handlers[:] = handlers
        root.setLevel(level)
        for number, handler in signals.items():
            if handler is not None:
                signal.signal(number, handler)
        if "torch" in sys.modules:
            torch = sys.modules["torch"]
            torch.set_num_threads(threads or torch.get_num_threads())


def run_main(*args: str, cwd: Path | None = None, env: dict | None = None) -> Ran:
    """`trainforge ARGS` through `cli.main()` in this process, as `run_cli` runs it in a child:
    in `cwd` (the clone by default), with `env` added and the console 200 columns wide."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with restored_process_state():
        os.environ.update({"COLUMNS": "200", **(env or {})})
        os.chdir(cwd or REPO)
        sys.argv[:] = ["trainforge", *args]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main()
            except SystemExit as exit_:
                code = _exit_code(exit_)
    return Ran(["trainforge", *args], code, out.getvalue(), err.getvalue())
