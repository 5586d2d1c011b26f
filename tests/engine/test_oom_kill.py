"""A run the kernel's OOM killer ends (root, as CI runs): a real cgroup v1 memory limit below
what the run takes once a thread starts hoarding memory after the first checkpoint (the
`fakes/hog` start-up hook). The next start names the OOM with the limit and the fix, and
`--resume` outside the limit finishes the run from its last checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.cgroups import cgroup_v1
from fakes.cli_args import DIGITS_TINY
from trainforge.hardware import oom
from trainforge.runfolder import RunFolder

pytestmark = pytest.mark.slow
HOG = Path(__file__).resolve().parents[1] / "fakes" / "hog"
LIMIT_BYTES = 3 << 28  # 0.75 GiB: the tiny run fits, the hoard does not
TRAIN = [sys.executable, "-m", "trainforge", "train"]


def run(command: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, **env}
    )


def test_a_run_the_oom_killer_ends_is_named_at_the_next_start_and_resumes(tmp_path):
    folder = RunFolder(tmp_path / "vit_digits")
    args = [*DIGITS_TINY, "--set", f"output.dir={tmp_path}", "--set", "training.max_steps=30"]
    hook = {
        "PYTHONPATH": os.pathsep.join([str(HOG), os.environ.get("PYTHONPATH", "")]),
        "TRAINFORGE_TEST_HOG_AFTER": str(folder.checkpoints / "checkpoint-2"),
    }
    with cgroup_v1(memory_bytes=LIMIT_BYTES) as groups:
        killed = run(groups.command([*TRAIN, *args]), **hook)
        assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
        assert groups.oom_kills() >= 1
        line = oom.previous_end(folder.process_file)
        assert line == f"killed: out of memory (limit 0.75 GiB); {oom.FIX}"
        # the next start, with more memory (outside the limit), while the evidence is there
        resumed = run([*TRAIN, "--resume", str(folder.path)])
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"{line}; resuming continues it from its last checkpoint" in resumed.stdout
    assert f"resumed from {folder.checkpoints}/checkpoint-" in resumed.stdout
    assert json.loads(folder.summary.read_text())["global_step"] == 30
    assert not folder.process_file.exists()  # a run that ends by itself leaves no record
