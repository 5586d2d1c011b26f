"""No orphans: torchrun's agent SIGKILLed (its workers run in sessions of their own, so the
kill reaches none of them); every training process notices at its next step boundary, says
so in one line and ends within seconds, writing nothing more; the run folder then resumes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from tests.parallel.test_ddp import REPO, TINY

from trainforge.engine import checkpoint as ckpt

DEADLINE_S = 600  # a hang, not speed


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.dist
def test_workers_of_a_killed_agent_stop_and_the_folder_resumes(tmp_path):
    run_dir = tmp_path / "orphan"
    sets = [*TINY, f"output.dir={tmp_path}", "output.run_name=orphan",
            "training.per_device_train_batch_size=64", "training.max_steps=100000",
            "checkpoint.save_steps=5", "logging.logging_steps=1"]  # fmt: skip
    train = [str(REPO / "config/vit_digits.yaml"), *(a for s in sets for a in ("--set", s))]
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    agent = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "-m", "trainforge", "train", *train],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    workers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + DEADLINE_S  # waits for an event; the deadline is a hang
        while not ckpt.list_checkpoints(run_dir / "checkpoints"):
            assert agent.poll() is None, agent.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "no checkpoint was saved"
            time.sleep(0.1)
        workers = psutil.Process(agent.pid).children(recursive=True)
        assert len(workers) == 2 and all(w.ppid() == agent.pid for w in workers)
        assert all(os.getsid(w.pid) != os.getsid(agent.pid) for w in workers)  # setsid'd
        os.kill(agent.pid, signal.SIGKILL)  # the agent alone: its workers are not told
        agent.wait(timeout=60)
        killed_at = time.monotonic()
        while not all(gone(w.pid) for w in workers):
            assert time.monotonic() - killed_at < 30, "a worker outlived its agent by 30 s"
            time.sleep(0.1)
        output = agent.stdout.read()  # the workers held the pipe: it ends with them
    finally:
        for process in [agent, *workers]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
    assert f"the launcher (process {agent.pid}) is gone; stopping at step" in output, output
    assert "Traceback" not in output, output[-3000:]

    last = ckpt.list_checkpoints(run_dir / "checkpoints")[-1].global_step
    resumed = subprocess.run(
        [sys.executable, "-m", "trainforge", "train", "--resume", str(run_dir),
         "--max_steps", str(last + 2)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resumed from " in resumed.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["global_step"] >= last + 2
    assert all(ckpt.verify(c.path) is None for c in ckpt.list_checkpoints(run_dir / "checkpoints"))


def test_a_parent_that_ends_is_not_watched_outside_a_launcher():
    """A run started from a shell (`nohup`, a closed terminal) trains on when its parent
    ends; under torchrun the agent is the launcher watched."""
    from trainforge.engine.callbacks import launcher_pid

    assert launcher_pid({}) is None
    assert launcher_pid({"TORCHELASTIC_RUN_ID": "job"}) == os.getppid()


def test_the_watch_stops_only_when_the_parent_changed(tmp_path: Path):
    """In a child process: the watch passes while its parent lives (or a stop already saved
    and is ending the run) and ends the process with one line and exit code 2 once the
    recorded launcher is not its parent any more."""
    script = (
        "import os\n"
        "from types import SimpleNamespace\n"
        "from trainforge.engine.callbacks import LauncherWatch\n"
        "trainer = SimpleNamespace(state=SimpleNamespace(global_step=7), should_stop=False)\n"
        "gone = LauncherWatch(os.getppid() + 100000, 'trainforge train --resume runs/x')\n"
        "LauncherWatch(os.getppid(), 'trainforge train --resume runs/x').on_step_end(trainer)\n"
        "gone.on_step_end(SimpleNamespace(state=trainer.state, should_stop=True))\n"
        "print('still training', flush=True)\n"  # a stop under way ends by itself
        "gone.on_step_end(trainer)\n"
        "print('not reached', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=DEADLINE_S
    )
    assert done.returncode == 2 and done.stdout == "still training\n", done.stdout + done.stderr
    assert done.stderr.strip() == (
        f"trainforge: the launcher (process {os.getpid() + 100000}) is gone; stopping at step 7 "
        "without saving. continue the run from its newest checkpoint with "
        "`trainforge train --resume runs/x`"
    )
