"""Every command in the platform guides runs, so the guides cannot rot.

Each ```bash block in PAGES is either run here, command by command, or preceded by a
`<!-- needs: ... -->` comment naming the hardware it needs that these tests do not have
(a Jetson, a DGX Spark, a Slurm cluster, root on a GPU machine). A command the runner does
not know how to run fails the test: mark it or teach `argv_for` about it.

`trainforge train` commands run with a test-only suffix that keeps them to two optimizer
steps in a temporary output folder (a `--resume` command reuses the folder of the train
command before it) and, for CIFAR-10 configs, reads the tiny CIFAR-10 that the `tiny_cifar`
fixture writes in the real format instead of downloading; they are `slow` cases.
`trainforge doctor` may answer 0 or 1 depending on this machine, so for it the test checks
the report instead of the exit code.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = (
    "docs/dgx_spark.md",
    "docs/troubleshooting.md",
    "docs/hpc_setup.md",
    "docs/jetson_training.md",
    "docs/training_guide.md",
)
# README sections about the platform kits (the rest of the README belongs to other tests).
README_SECTIONS = ("### `trainforge doctor [CONFIG]`", "### Platform scripts")
FENCE = re.compile(r"^\s*```(\w*)\s*$")
NEEDS = re.compile(r"^\s*<!--\s*needs:\s*(.+?)\s*-->\s*$")
# Two optimizer steps of 16 samples, a checkpoint after them for the --resume commands.
TRAIN_SUFFIX = (
    "--set", "training.max_steps=2", "--set", "checkpoint.save_steps=2",
    "--set", "training.per_device_train_batch_size=16",
)  # fmt: skip


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    commands: tuple[str, ...]
    needs: str | None


def read_blocks(page: str, section: str | None = None) -> list[Block]:
    """The ```bash blocks of a page (or of one `section` heading's part of it), with their
    commands (continuation lines joined)."""
    lines = (REPO / page).read_text(encoding="utf-8").splitlines()
    blocks, index = [], 0
    if section is not None:
        index = lines.index(section)
        end_of_section = next(
            (i for i in range(index + 1, len(lines)) if lines[i].startswith("#")), len(lines)
        )
        lines = lines[:end_of_section]
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if FENCE.match(lines[i]))
        if match.group(1) == "bash":
            previous = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
            needs = NEEDS.match(previous)
            text = "\n".join(lines[index + 1 : end]).replace("\\\n", " ")
            commands = tuple(
                line.strip()
                for line in text.splitlines()
                if line.strip() and not line.strip().startswith("#")
            )
            blocks.append(Block(page, index + 1, commands, needs.group(1) if needs else None))
        index = end + 1
    return blocks


def argv_for(command: str) -> list[str] | None:
    """How the test runs a documented command, or None when it does not know."""
    words = shlex.split(command, comments=True)
    if words[0] == "trainforge":
        return [sys.executable, "-m", "trainforge", *words[1:]]
    if words[0] in ("python", "python3") and words[1].startswith("scripts/"):
        return [sys.executable, *words[1:]]
    if words[0] == "bash" and words[1].startswith("scripts/"):
        return ["bash", *words[1:]]
    if words[0].removeprefix("./").startswith("scripts/") and words[0].endswith(".sh"):
        return ["bash", words[0].removeprefix("./"), *words[1:]]
    return None


ALL_BLOCKS = [block for page in PAGES for block in read_blocks(page)] + [
    block for section in README_SECTIONS for block in read_blocks("README.md", section)
]
RUNNABLE = [
    (block, command) for block in ALL_BLOCKS if block.needs is None for command in block.commands
]


def label(item: tuple[Block, str]) -> str:
    block, command = item
    return f"{block.page}:{block.line}:{command[:60]}"


def test_pages_have_commands_and_marked_blocks() -> None:
    for page in PAGES:
        blocks = read_blocks(page)
        assert any(b.needs is None for b in blocks), f"{page}: no command is run by the tests"
    for section in README_SECTIONS:
        assert read_blocks("README.md", section), f"README.md {section}: no commands"
    marked = [b for b in ALL_BLOCKS if b.needs is not None]
    assert marked, "the guides show hardware-only commands; they must be marked"
    for block in marked:
        assert block.commands, f"{block.page}:{block.line}: an empty marked block"
        assert re.match(r"(a|an|root) ", block.needs), f"{block.page}:{block.line}: {block.needs}"


def test_every_unmarked_command_has_a_runner() -> None:
    unknown = [label(item) for item in RUNNABLE if argv_for(item[1]) is None]
    assert not unknown, f"mark these blocks <!-- needs: ... --> or run them: {unknown}"


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO / "src")}
    for name in ("CUDA_VERSION", "TARGETARCH", "WANDB_API_KEY"):
        env.pop(name, None)
    return subprocess.run(
        argv,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def writes_files(command: str) -> bool:
    """Commands that create runs or models: run in order, in a scratch copy of the checkout."""
    words = shlex.split(command, comments=True)
    return words[:2] == ["trainforge", "train"] or words[:3] == ["trainforge", "models", "init"]


FAST = [item for item in RUNNABLE if not writes_files(item[1])]
TRAIN = [item for item in RUNNABLE if writes_files(item[1])]
# Entries of the checkout that writing commands must not touch (they get fresh ones).
USER_CONTENT = {"runs", "models", "data", "outputs", ".git", ".venv"}


def scratch_checkout(tmp_path: Path) -> Path:
    """A folder that looks like the checkout (links to its files) with its own runs/, models/."""
    work = tmp_path / "checkout"
    work.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in USER_CONTENT:
            (work / entry.name).symlink_to(entry)
    return work


def run_in_process(
    argv: list[str], monkeypatch, capsys, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """`python -m trainforge ...` through the real entry point, without a new interpreter."""
    from trainforge import cli

    monkeypatch.chdir(cwd)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(sys, "argv", ["trainforge", *argv[3:]])
    code = 0
    try:
        cli.main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    out = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out.out, out.err)


@pytest.mark.parametrize("item", FAST, ids=[label(item) for item in FAST])
def test_documented_command_runs(item: tuple[Block, str], monkeypatch, capsys) -> None:
    _, command = item
    argv = argv_for(command)
    assert argv is not None, command
    in_process = argv[1:3] == ["-m", "trainforge"]
    result = run_in_process(argv, monkeypatch, capsys) if in_process else run(argv)
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    if argv[1:4] == ["-m", "trainforge", "doctor"]:
        # 0 or 1 depending on this machine; either way a full report, one line per problem.
        assert result.returncode in (0, 1), output
        assert result.stdout.startswith("trainforge doctor: "), output
        problems = result.stdout.count("\nPROBLEM ")
        assert (result.returncode == 1) == (problems > 0), output
    else:
        assert result.returncode == 0, f"{command}\n{output}"
        assert result.stdout.strip(), f"{command} printed nothing"


@pytest.mark.slow
def test_documented_training_commands_run(tmp_path: Path, tiny_cifar, monkeypatch, capsys) -> None:
    assert TRAIN, "the guides show no training command"
    work = scratch_checkout(tmp_path)
    previous: Path | None = None
    for number, (block, command) in enumerate(TRAIN):
        argv = argv_for(command)
        assert argv is not None
        if argv[3:5] == ["models", "init"]:
            result = run_in_process(argv, monkeypatch, capsys, cwd=work)
            assert result.returncode == 0, f"{block.page}:{block.line}: {command}\n{result.stderr}"
            continue
        resumes = "--resume" in argv or "--resume_from" in argv
        if resumes:
            assert previous is not None, f"{block.page}: --resume before any train command"
            out_dir = previous
        else:
            out_dir = tmp_path / f"run{number}"
        suffix = [*TRAIN_SUFFIX, "--set", f"output.dir={out_dir}"]
        if "cifar10" in command:
            data_root = tiny_cifar["extracted"]
            suffix += ["--set", f"data.root={data_root}", "--set", "data.download=false"]
        # In this process, so that tiny_cifar's checksums for torchvision apply.
        result = run_in_process([*argv, *suffix], monkeypatch, capsys, cwd=work)
        assert result.returncode == 0, f"{block.page}:{block.line}: {command}\n{result.stderr}"
        assert "done: " in result.stdout
        if resumes:
            assert "resum" in (result.stdout + result.stderr).lower(), result.stdout
        previous = out_dir
