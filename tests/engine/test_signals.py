"""Real signals sent to a real `trainforge train` subprocess.

Ctrl+C (SIGINT), SIGTERM and SIGUSR1 finish the micro-batch, write `checkpoint_interrupted`,
say where it is and how to resume, and exit with 128 + the signal number; a second Ctrl+C
aborts at once. Under Slurm, SIGUSR1 also runs `scontrol requeue` (a recorded fake here)
and the restarted job resumes by itself. A child started with SIGINT ignored behaves the same;
the last test checks the handler's hand-over in this process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from trainforge.engine import checkpoint as ckpt
from trainforge.engine import checkpoint_write
from trainforge.engine.callbacks import GracefulStop

REPO = Path(__file__).resolve().parents[2]
TINY = [
    "--set", "model.embedding_dim=32", "--set", "model.num_layers=1",
    "--set", "model.num_heads=2", "--set", "model.mlp_size=32",
    "--set", "training.per_device_train_batch_size=16",
    "--set", "training.gradient_accumulation_steps=2",
    "--set", "logging.logging_steps=2", "--set", "logging.tensorboard=false",
    "--set", "logging.progress_bar=false", "--set", "checkpoint.save_every_epochs=null",
    "--set", "evaluation.eval_every_epochs=null", "--set", "checkpoint.save_best=false",
    "--set", "logging.report=false",  # no test here reads it
]  # fmt: skip


_STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_training_left_behind():
    """A failed test (a deadline passed) kills what it started, so no hung training lingers
    and counts as a running training for every later one on the machine."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def start(
    tmp_path: Path,
    *extra: str,
    env: dict | None = None,
    python: list[str] | None = None,
    sigint: signal.Handlers = signal.SIG_DFL,
) -> subprocess.Popen:
    """The child starts with SIGINT's default action, or ignored (`SIG_IGN`) as a job a script
    puts in the background starts, whatever the test runner itself was started with."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="200", **(env or {}))
    proc = subprocess.Popen(
        [sys.executable, *(python or ["-m", "trainforge"]), "train",
         str(REPO / "config/vit_digits.yaml"),
         "--set", f"output.dir={tmp_path / 'runs'}", "--set", "output.run_name=sig", *TINY,
         *extra],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )  # fmt: skip
    _STARTED.append(proc)
    return proc


# Deadlines are for a hung process, not for speed: a loaded 2-core machine may take minutes to
# import torch and reach the first logged step.
DEADLINE_S = 600


def wait_for_training(tmp_path: Path, proc: subprocess.Popen, timeout: float = DEADLINE_S) -> None:
    metrics = tmp_path / "runs/sig/metrics.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if metrics.exists() and metrics.read_text().count("\n") >= 1:
            return
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.05)
    proc.kill()
    pytest.fail("training did not start")


@pytest.mark.parametrize(
    ("sig", "sigint"),
    [("SIGINT", signal.SIG_DFL), ("SIGINT", signal.SIG_IGN), ("SIGTERM", signal.SIG_DFL),
     ("SIGUSR1", signal.SIG_DFL)],
    ids=["SIGINT", "SIGINT-started-ignored", "SIGTERM", "SIGUSR1"],
)  # fmt: skip
def test_signal_checkpoints_says_how_to_resume_and_exits(tmp_path, sig, sigint):
    proc = start(tmp_path, "--set", "training.max_steps=100000", sigint=sigint)
    wait_for_training(tmp_path, proc)
    proc.send_signal(getattr(signal, sig))
    out, _ = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 128 + getattr(signal, sig), out
    folder = tmp_path / "runs/sig/checkpoints/checkpoint_interrupted"
    assert ckpt.verify(folder) is None
    assert f"{sig}: checkpoint saved to {folder}" in out
    assert f"resume with: trainforge train --resume {tmp_path / 'runs/sig'}\n" in out
    assert "Traceback" not in out


# The real entry point with a checkpoint write that never ends by itself (a big model's on a
# slow disk, taken to the limit): only the second Ctrl+C can end the process, so its exit
# shows that the abort did not wait for the write. It says when that write begins. The write
# stalls the loop itself ("main") or the background writer the loop waits for ("writer").
# A real write returns to Python between chunks, and a signal is acted on when it does.
SLOW_INTERRUPT_SAVE = """
import runpy, sys, time
from trainforge.engine.checkpoint_write import CheckpointWriter
from trainforge.engine.trainer import Trainer

def never_ends():
    sys.stdout.write("writing checkpoint_interrupted\\n")
    sys.stdout.flush()
    while True:
        time.sleep(0.05)

save = Trainer.save_checkpoint
def slow(self, name, **kwargs):
    if name == "checkpoint_interrupted":
        if sys.argv[1] == "main":
            never_ends()
        CheckpointWriter._run = lambda writer, job: never_ends()
    return save(self, name, **kwargs)
Trainer.save_checkpoint = slow
sys.argv = ["trainforge", *sys.argv[2:]]
runpy.run_module("trainforge", run_name="__main__")
"""


@pytest.mark.parametrize(
    ("sigint", "stalled"),
    [(signal.SIG_DFL, "main"), (signal.SIG_IGN, "main"), (signal.SIG_IGN, "writer")],
    ids=["default", "ignored", "ignored-background-write"],
)
def test_double_ctrl_c_aborts_at_once(tmp_path, sigint, stalled):
    script = tmp_path / "slow_save.py"
    script.write_text(SLOW_INTERRUPT_SAVE)
    steps = ["--set", "training.max_steps=100000"]
    proc = start(tmp_path, *steps, python=[str(script), stalled], sigint=sigint)
    watchdog = threading.Timer(2 * DEADLINE_S, proc.kill)  # only for a hung process
    watchdog.start()
    try:
        wait_for_training(tmp_path, proc)
        proc.send_signal(signal.SIGINT)
        before = []
        for line in proc.stdout:  # the first Ctrl+C was handled: its checkpoint is under way
            before.append(line)
            if line.strip() == "writing checkpoint_interrupted":
                break
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=DEADLINE_S)  # the write alone would never end
    finally:
        watchdog.cancel()
    out = "".join(before) + out
    assert proc.returncode == 130, out  # not -9: the watchdog did not have to kill it
    assert out.splitlines()[-1] == (
        f"aborted by a second Ctrl+C; `trainforge train --resume {tmp_path / 'runs/sig'}` "
        "continues from the newest complete checkpoint"
    )
    assert "Traceback" not in out
    assert "checkpoint saved" not in out and "resume with" not in out
    root = tmp_path / "runs/sig/checkpoints"
    assert not (root / "checkpoint_interrupted").exists()
    assert not [p for p in root.glob(".*")] if root.exists() else True


# A run that fails while a periodic checkpoint is being written: the write goes on only once
# the error is on its way out, so the process must wait for it before it exits.
CRASH_MID_WRITE = """
import runpy, sys, threading
from trainforge.engine.callbacks import CheckpointCadence
from trainforge.engine.checkpoint_write import CheckpointWriter

failing = threading.Event()
submit = CheckpointWriter.submit
def submit_after_the_failure(self, job):
    def late():
        failing.wait()
        job()
    submit(self, late)
CheckpointWriter.submit = submit_after_the_failure
on_step_end = CheckpointCadence.on_step_end
def save_then_fail(self, trainer):
    on_step_end(self, trainer)
    if trainer.state.global_step == 4:
        failing.set()
        raise RuntimeError("failed while checkpoint-4 was being written")
CheckpointCadence.on_step_end = save_then_fail
sys.argv = ["trainforge", *sys.argv[1:]]
runpy.run_module("trainforge", run_name="__main__")
"""


def test_a_run_that_fails_mid_write_finishes_that_checkpoint_first(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text(CRASH_MID_WRITE)
    sets = ["--set", "training.max_steps=8", "--set", "checkpoint.save_steps=4"]
    proc = start(tmp_path, *sets, python=[str(script)])
    out, _ = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 1 and "failed while checkpoint-4 was being written" in out, out
    assert ckpt.verify(tmp_path / "runs/sig/checkpoints/checkpoint-4") is None, out


def test_slurm_sigusr1_requeues_and_the_restart_resumes_by_itself(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "scontrol.log"
    fake = bin_dir / "scontrol"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    fake.chmod(0o755)
    env = {"SLURM_JOB_ID": "4242", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = start(tmp_path, "--set", "training.max_steps=100000", env=env)
    wait_for_training(tmp_path, proc)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 128 + signal.SIGUSR1, out
    assert log.read_text().split() == ["requeue", "4242"]
    assert "Slurm job 4242 requeued" in out
    step = ckpt.read_meta(tmp_path / "runs/sig/checkpoints/checkpoint_interrupted")["global_step"]

    # The requeued job runs the same command line (no --resume) with a later stop.
    restart = start(tmp_path, "--set", f"training.max_steps={step + 3}", env=env)
    out, _ = restart.communicate(timeout=DEADLINE_S)
    assert restart.returncode == 0, out
    assert "resuming the run's newest checkpoint" in out
    assert f"step {step})" in out  # "resumed from ... (epoch E, step N)"
    assert "training.max_steps: 100000 -> " in out  # the changed key is named
    summary = json.loads((tmp_path / "runs/sig/summary.json").read_text())
    assert summary["global_step"] == step + 3


def test_ranks_agree_on_the_signal_and_prefer_the_requeue_signal(monkeypatch):
    """A rank that got no signal (or SIGTERM) takes SIGUSR1 when another rank got it, so
    rank 0 requeues the Slurm job whichever rank Slurm's signal reached first."""
    from types import SimpleNamespace

    from trainforge import parallel
    from trainforge.engine.callbacks import GracefulStop

    seen: list[int] = []

    def other_rank_got_usr1(value: int) -> int:
        seen.append(value)
        return max(value, GracefulStop.SIGNALS.index("SIGUSR1") + 1)

    monkeypatch.setattr(parallel, "agree_max", other_rank_got_usr1)
    monkeypatch.setattr(parallel, "context", lambda: SimpleNamespace(enabled=True))
    saved: list[str] = []
    stopped_by: list[str | None] = []
    loop = SimpleNamespace(
        should_stop=False,
        save_checkpoint=lambda name, wait: saved.append(name),
        stop=lambda reason, signal=None: stopped_by.append(signal),
    )
    for mine in (None, "SIGTERM"):
        stop = GracefulStop()
        stop.received = mine
        stop.on_step_end(loop)
        assert stopped_by[-1] == "SIGUSR1"
    assert seen == [0, GracefulStop.SIGNALS.index("SIGTERM") + 1]
    assert saved == ["checkpoint_interrupted"] * 2


@pytest.mark.parametrize("name", GracefulStop.SIGNALS)
def test_a_signal_ignored_at_start_is_caught_once_then_aborts_and_is_ignored_again_after(name):
    """In this process: whatever the signal did before (ignored here), the first is recorded,
    the second aborts (KeyboardInterrupt for SIGINT, the default action for the others), and
    the end of fit puts "ignored" back."""
    sig = getattr(signal, name)
    before = signal.signal(sig, signal.SIG_IGN)
    try:
        stop = GracefulStop()
        stop.on_fit_start(None)
        assert signal.getsignal(sig) == stop._handler
        signal.raise_signal(sig)
        assert stop.received == name
        second = signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL
        assert signal.getsignal(sig) is second
        stop.on_fit_end(None)
        assert signal.getsignal(sig) is signal.SIG_IGN
    finally:
        signal.signal(sig, before)


WAITS = ("join", "_wait_for_tstate_lock")  # Thread.join's frames (the second before 3.13)


def test_waiting_for_a_checkpoint_write_lets_a_signal_through():
    """A signal the kernel hands to another thread (it may: the signal is the process's)
    only marks Python's handler as due; an untimed join sleeps on past it until the write
    ends. The writer's wait must raise the second Ctrl+C's KeyboardInterrupt while the write
    is still going (the write here ends only when the test lets it, or after a minute)."""
    release, written = threading.Event(), threading.Event()

    def slow_write():
        release.wait()
        written.set()

    write = threading.Thread(target=slow_write, name="slow-write")
    write.start()
    main = threading.get_ident()

    def second_ctrl_c(signum, frame):
        raise KeyboardInterrupt

    def signal_once_the_main_thread_waits():
        while not release.is_set():
            frame = sys._current_frames().get(main)  # Thread.join's own, then into its lock
            code = frame.f_code if frame is not None else None
            if code and code.co_filename == threading.__file__ and code.co_name in WAITS:
                time.sleep(0.05)  # into the lock's blocking wait
                signal.pthread_kill(write.ident, signal.SIGUSR2)
                return
            time.sleep(0.005)

    previous = signal.signal(signal.SIGUSR2, second_ctrl_c)
    sender = threading.Thread(target=signal_once_the_main_thread_waits)
    giving_up = threading.Timer(60, release.set)  # without the fix: the write ends, then
    giving_up.start()  # the handler runs, and the assertion below fails instead of hanging
    try:
        sender.start()
        with pytest.raises(KeyboardInterrupt):
            checkpoint_write.join(write)
        # (not `is_alive()`: Python 3.11 marks a thread whose join was interrupted stopped)
        assert not written.is_set(), "the wait raised only after the write had ended"
    finally:
        giving_up.cancel()
        release.set()
        for thread in (write, sender):
            thread.join()
        signal.signal(signal.SIGUSR2, previous)
