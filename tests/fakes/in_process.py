"""Run the real `trainforge` entry point inside the test process (so monkeypatches and
fixtures such as tiny_cifar apply) and collect its exit code and output."""

from __future__ import annotations

import sys

from trainforge import cli


def run_in_process(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["trainforge", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err
