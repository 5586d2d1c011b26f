"""The rendered scripts' torchrun wrapper, with the real torchrun and Slurm-style signals.

Slurm signals every process of a job step (torchrun and its workers alike). The stand-in
workers here handle a signal the way the training loop does (record it, put the previous
disposition back, so a second copy would abort), then rank 1 leaves at once while rank 0
needs two more seconds (saving, `scontrol requeue`). Both must finish: torchrun must neither
forward a second copy nor stop rank 0 when rank 1 exits first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainforge.launch.slurm import TORCHRUN_SIGNALS_TO_HANDLE, TORCHRUN_WRAPPER

TORCHRUN = Path(sys.executable).parent / "torchrun"

WORKER = """\
import os, signal, sys, time
rank, out = os.environ["RANK"], os.environ["OUT"]
received, previous = [], {}

def handler(signum, frame):
    received.append(signum)
    signal.signal(signum, previous[signum])  # as the training loop: a second copy aborts

for sig in (signal.SIGTERM, signal.SIGUSR1):
    previous[sig] = signal.signal(sig, handler)
with open(f"{out}/{rank}.pid", "w") as f:
    f.write(str(os.getpid()))
deadline = time.monotonic() + 60
while not received and time.monotonic() < deadline:
    time.sleep(0.01)
with open(f"{out}/{rank}.log", "a") as f:
    f.write(f"stopping on {signal.Signals(received[0]).name}\\n")
time.sleep(2.0 if rank == "0" else 0.0)  # rank 0 saves and requeues; rank 1 leaves
with open(f"{out}/{rank}.log", "a") as f:
    f.write("finished\\n")
sys.exit(128 + received[0])
"""


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is installed with torch")
@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM])
def test_every_training_process_gets_the_step_signal_once_and_finishes(tmp_path, sig):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    env = dict(os.environ, OUT=str(tmp_path), PET_SIGNALS_TO_HANDLE=TORCHRUN_SIGNALS_TO_HANDLE)
    proc = subprocess.Popen(
        [*TORCHRUN_WRAPPER, str(TORCHRUN), "--standalone", "--nproc-per-node", "2", str(worker)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    pids = [tmp_path / "0.pid", tmp_path / "1.pid"]
    deadline = time.monotonic() + 120
    while not all(p.exists() and p.read_text() for p in pids):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"workers did not start:\n{proc.communicate()[0]}")
        time.sleep(0.05)
    for pid in [proc.pid, *(int(p.read_text()) for p in pids)]:  # the whole step, as Slurm
        os.kill(pid, sig)
    out, _ = proc.communicate(timeout=120)
    name = signal.Signals(sig).name
    for rank in ("0", "1"):
        path = tmp_path / f"{rank}.log"
        log = path.read_text().splitlines() if path.exists() else []  # [] if killed at once
        assert log == [f"stopping on {name}", "finished"], f"rank {rank}: {log}\n{out}"
    # torchrun stayed up until rank 0 was done, then reported the non-zero exits.
    assert proc.returncode == 1, out
    assert f"exitcode  : {128 + sig}" in out


LAUNCHER = [sys.executable, "-m", "trainforge.launch.torchrun"]


def start_launcher(tmp_path: Path, worker: str) -> subprocess.Popen:
    """The scripts' launch: the signal wrapper, then trainforge's torchrun, 2 processes."""
    script = tmp_path / "worker.py"
    script.write_text(worker)
    env = dict(os.environ, OUT=str(tmp_path), PET_SIGNALS_TO_HANDLE=TORCHRUN_SIGNALS_TO_HANDLE)
    env.pop("OMP_NUM_THREADS", None)  # as on a GPU node: torchrun would print its banner
    return subprocess.Popen(
        [*TORCHRUN_WRAPPER, *LAUNCHER, "--standalone", "--nproc-per-node", "2", str(script)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM])
def test_a_planned_stop_is_one_trainforge_line_not_torchruns_crash_report(tmp_path, sig):
    """Both processes save and exit 128 + signal, as the training loop does; the launcher says
    so in one line, exits with their status, and prints none of torchrun's report."""
    proc = start_launcher(tmp_path, WORKER)
    pids = [tmp_path / "0.pid", tmp_path / "1.pid"]
    deadline = time.monotonic() + 120
    while not all(p.exists() and p.read_text() for p in pids):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"workers did not start:\n{proc.communicate()[0]}")
        time.sleep(0.05)
    for pid in [proc.pid, *(int(p.read_text()) for p in pids)]:  # the whole step, as Slurm
        os.kill(pid, sig)
    out, _ = proc.communicate(timeout=120)
    name = signal.Signals(sig).name
    for rank in ("0", "1"):  # each process finished its save
        assert (tmp_path / f"{rank}.log").read_text().splitlines()[-1] == "finished", out
    assert out.splitlines() == [
        f"trainforge: 2 training processes stopped on {name} (exit {128 + sig}) after saving "
        "their checkpoints, as their lines above say"
    ], out
    assert proc.returncode == 128 + sig


def test_a_real_failure_still_shows_torchruns_report_without_a_traceback(tmp_path):
    crash = "import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n"
    proc = start_launcher(tmp_path, crash)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out
    assert "failed (exitcode: 3) local_rank: 1" in out  # torchrun's own log line
    assert "exitcode  : 3" in out and "rank      : 1" in out  # its failure table
    assert "Traceback" not in out and "trainforge:" not in out
    assert "Setting OMP_NUM_THREADS" not in out


def test_the_stopped_line_is_worded_for_one_process_and_for_several():
    from trainforge.launch.torchrun import stopped_line

    assert stopped_line(1, "SIGUSR1", 138) == (
        "trainforge: 1 training process stopped on SIGUSR1 (exit 138) after saving its "
        "checkpoint, as its lines above say"
    )
    assert "2 training processes stopped on SIGINT (exit 130) after saving their " in (
        stopped_line(2, "SIGINT", 130)
    )
