"""The CPU thread budget: the user's setting, OMP_NUM_THREADS, the web app's budget, and
cores / trainings running here, read by the child process's torch.get_num_threads()."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainforge.hardware.threads import (
    THREADS_ENV,
    live_trainings,
    register_training,
    thread_budget,
)

CHILD = (
    "import torch; from trainforge.hardware.threads import thread_count; "
    "torch.set_num_threads(thread_count(None)); print('threads', torch.get_num_threads())"
)


def child_threads(env: dict[str, str], tmp: Path) -> int:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",
                                                              "TRAINFORGE_THREADS")}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env={**clean, "TMPDIR": str(tmp), **env},
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    return int(out.split("threads")[-1].strip())


def test_the_budget_prefers_the_setting_then_the_environment():
    env = {"OMP_NUM_THREADS": "3", "TRAINFORGE_THREADS": "5"}
    assert thread_budget(2, env=env, cores=8) == (2, "training.num_threads")
    assert thread_budget(None, env=env, cores=8) == (3, "OMP_NUM_THREADS")
    assert thread_budget(None, env={"TRAINFORGE_THREADS": "5"}, cores=8)[0] == 5
    assert thread_budget(None, env={}, cores=8, others=0)[0] is None  # torch's default
    assert thread_budget(None, env={}, cores=8, others=3)[0] == 2
    assert thread_budget(None, env={}, cores=8, default_threads=4, others=1)[0] == 2
    assert thread_budget(None, env={}, cores=2, others=5)[0] == 1  # never below one


def test_live_trainings_counts_markers_of_live_processes(tmp_path: Path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / str(sleeper.pid)).touch()
        (tmp_path / "999999999").touch()  # a training that died without tidying
        assert live_trainings(tmp_path) == 1
        assert not (tmp_path / "999999999").exists()
        register_training(tmp_path)
        assert (tmp_path / str(os.getpid())).exists()
        assert live_trainings(tmp_path) == 1  # this process does not count itself
    finally:
        sleeper.kill()
        sleeper.wait()


def test_child_process_threads_follow_the_budget(tmp_path: Path):
    assert child_threads({"TRAINFORGE_THREADS": "1"}, tmp_path) == 1
    assert child_threads({"OMP_NUM_THREADS": "1", "TRAINFORGE_THREADS": "2"}, tmp_path) == 1


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to halve")
def test_a_second_training_on_the_machine_gets_a_share_of_the_cores(tmp_path: Path):
    alone = child_threads({}, tmp_path)
    folder = tmp_path / f"trainforge-trainings-{os.getuid()}"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / str(sleeper.pid)).touch()  # another training is running here
        assert child_threads({}, tmp_path) == max(1, alone // 2)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_resume_keeps_the_thread_count_the_run_started_with(monkeypatch, capsys):
    import torch

    from trainforge.hardware.threads import thread_count

    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(THREADS_ENV, raising=False)
    try:
        assert thread_count(None, recorded=3) == 3
        assert "cpu threads: 3 (as the run started: an exact resume)" in capsys.readouterr().out
        assert thread_count(2, recorded=3) == 2  # the config's word still wins
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert thread_count(None, recorded=3) == 1  # and the launcher's
    finally:
        torch.set_num_threads(before)


def test_threads_are_set_only_when_the_count_changes(monkeypatch):
    """An explicit `torch.set_num_threads` to the count torch already has slows small CPU
    kernels (attention) several-fold, so the budget is applied only as a change."""
    import torch

    from trainforge.hardware.threads import apply_threads

    calls: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    apply_threads(torch.get_num_threads())
    assert calls == []
    apply_threads(torch.get_num_threads() + 1)
    assert calls == [torch.get_num_threads() + 1]
