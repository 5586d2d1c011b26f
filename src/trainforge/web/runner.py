"""Training runs as subprocesses: start, stop, resume, and notice when one ends or vanishes.

The first attempt is `trainforge train CONFIG ARGS` (the Train Model dialog's arguments); a
resumed one is `trainforge train --resume runs/NAME` and nothing else, because the run
recorded its recipe in the run folder's run.json (`runner.attempt_args` covers a run that
died before writing it). Each runs in its own session (so a Ctrl+C in the server's terminal
does not reach it), with stdout and stderr in a log file beside the database, headed by the
command line of the attempt. A watcher thread waits for the exit code and records the outcome; a
crashed run is a failed record, never a problem for the server. Runs still going when the
server restarts are adopted by pid (checked against the process's start time, so a reused
pid is not mistaken for the run) and polled; a run whose process is gone is judged from its
run folder, and without a summary from this attempt it is marked failed.

The queue: `submit` starts a run when fewer than `settings.max_parallel_runs` run now (one
by default, per server and so per device), otherwise records it as queued; whenever a run
ends the oldest queued one starts. A queued run can be cancelled. With more than one run at
a time each child gets `TRAINFORGE_THREADS` = cores / parallel runs (hardware/threads.py),
so together they never start more CPU threads than there are cores.

A run on a cluster target (`record.target`) has no process here and takes no slot: Stop and
Resume go to `targets` (web/targets.py), which acts through the target.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from trainforge.errors import UserError
from trainforge.hardware.oom import previous_end
from trainforge.hardware.threads import THREADS_ENV, usable_cores
from trainforge.runfolder import resume_command
from trainforge.web.db import RUNNING, RunRecord, RunRegistry
from trainforge.web.run_files import checkpoints, log_tail, summary_since
from trainforge.web.settings import TOKEN_ENV, WebSettings

if TYPE_CHECKING:
    from trainforge.web.targets import TargetRuns

STOP_CODES = {128 + signal.SIGINT: "SIGINT", 128 + signal.SIGTERM: "SIGTERM"}
_ADOPT_POLL_S = 1.0


class Runner:
    def __init__(
        self, settings: WebSettings, registry: RunRegistry, launch: Callable | None = None
    ) -> None:
        self.settings = settings
        self.registry = registry
        # How a training process starts: `subprocess.Popen`, or a `Launcher.popen` that
        # starts it at the priority the server was started with (web/priority.py).
        self._launch = launch or subprocess.Popen
        self._lock = threading.Lock()
        # Held while a slot is judged and filled, and by cancel: a queued run starts or is
        # cancelled, never both.
        self._slots = threading.RLock()
        self._children: dict[str, subprocess.Popen] = {}
        self._watched: set[str] = set()
        self._threads: list[threading.Thread] = []  # the watchers of the children started here
        self.targets: TargetRuns | None = None  # the cluster runs (AppState.create sets it)
        settings.logs_path.mkdir(parents=True, exist_ok=True)

    def log_path(self, run_id: str) -> Path:
        mirror = self.settings.mirrors.get(run_id)
        if mirror is not None:  # a cluster run: the log tail its watcher brings home
            return mirror / "log.tail"
        return self.settings.logs_path / f"{run_id}.log"

    def _queued(self) -> list[RunRecord]:
        """The runs waiting for a slot here (a cluster run waits in its target's queue)."""
        return [r for r in self.registry.queued() if not r.target]

    # ------------------------------------------------------------------ queue
    def submit(self, record: RunRecord, *, resume: bool = False) -> RunRecord:
        """Start `record` when a training slot is free and nothing waits before it, else
        record it as queued (it starts when a running one ends)."""
        with self._slots:
            if self._free_slots() > 0 and not self._queued():
                return self.start(record, resume=resume)
            record.status, record.pid, record.pid_started = "queued", None, None
            record.exit_code, record.started_at, record.finished_at = None, None, None
            record.message = "waiting for a free training slot"
            record.queued_at = time.time()
            self.registry.save(record)
            return record

    def cancel(self, run_id: str) -> RunRecord:
        """Take a queued run out of the queue; it never starts."""
        with self._slots:
            record = self._require(run_id)
            if record.status != "queued":
                raise UserError(f"run {run_id} is {record.status}, not queued", "use Stop")
            self.registry.finish_if_active(
                run_id, status="cancelled", message="cancelled while queued",
                finished_at=time.time(),
            )  # fmt: skip
        return self._require(run_id)

    def position(self, run_id: str) -> int | None:
        """1 for the next queued run to start; None when `run_id` is not queued."""
        ids = [r.id for r in self._queued()]
        return ids.index(run_id) + 1 if run_id in ids else None

    def _free_slots(self) -> int:
        running = sum(1 for r in self.registry.active() if r.status in RUNNING and not r.target)
        return int(self.settings.max_parallel_runs or 1) - running

    def start_queued(self) -> None:
        """Start the oldest queued runs while slots are free (after a run ends, at start-up)."""
        with self._slots:
            while self._free_slots() > 0:
                waiting = self._queued()
                if not waiting:
                    return
                record = waiting[0]
                try:  # a run that has run before resumes (`--resume runs/NAME`)
                    self.start(record, resume=record.attempts > 0)
                except OSError as err:
                    self.registry.finish_if_active(
                        record.id, status="failed", message=f"could not start: {err}",
                        finished_at=time.time(),
                    )  # fmt: skip

    def _thread_env(self) -> dict[str, str]:
        """Each child's CPU thread budget when several run at once (one alone decides its
        own, see hardware/threads.py)."""
        parallel = int(self.settings.max_parallel_runs or 1)
        if parallel <= 1 or THREADS_ENV in os.environ:
            return {}
        return {THREADS_ENV: str(max(1, usable_cores() // parallel))}

    # ------------------------------------------------------------------ start / stop
    def attempt_args(self, record: RunRecord, *, resume: bool) -> tuple[list[str], str]:
        """(what follows `trainforge train` in an attempt of `record`, the command line the
        log shows for it).

        A first attempt is the dialog's argument list. A resume is `--resume runs/NAME`,
        exactly the command `trainforge train` itself prints for continuing the run, once
        the run folder holds run.json. Without run.json the process died before recording
        the run: with checkpoints in the folder (a run of a trainforge that wrote no
        run.json) the config is named as well, `CONFIG ARGS --resume runs/NAME`, as the CLI
        asks then; with none there is nothing to resume, so the run starts again from its
        own arguments, with `--overwrite` when the dead attempt left files (an empty
        metrics file, a TensorBoard folder) that a fresh start would refuse to replace.
        """
        args = list(record.argv)
        if record.task == "sweep":  # the same command continues a sweep
            return args, f"$ trainforge sweep {' '.join(args)}"
        if resume:
            folder = self.settings.cli_run_folder(record.id)  # runs/NAME, as the CLI says it
            here = self.settings.run_folder(record.id)
            if here.is_run():
                return ["--resume", str(folder.path)], f"$ {resume_command(folder)}"
            if checkpoints(here):
                args += ["--resume", str(folder.path)]
            elif here.occupied() and "--overwrite" not in args:
                args.append("--overwrite")
        return args, f"$ trainforge train {' '.join(args)}"

    def start(self, record: RunRecord, *, resume: bool = False) -> RunRecord:
        """Launch an attempt of `record` (saved first when new) and watch it."""
        args, shown = self.attempt_args(record, resume=resume)
        command = self.settings.train_command
        if record.task == "sweep":  # `trainforge sweep` instead of `trainforge train`
            command = [*command[:-1], "sweep"]
        argv = [*command, *args]
        env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}  # never hand it on
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self._thread_env())
        log = self.log_path(record.id)
        with self._lock, log.open("ab") as out:
            out.write(shown.encode() + b"\n")
            out.flush()
            process = self._launch(
                argv,
                cwd=self.settings.root,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
            self._children[record.id] = process
        record.status, record.pid, record.exit_code, record.message = (
            "running",
            process.pid,
            None,
            None,
        )
        record.pid_started = _create_time(process.pid)
        record.attempts += 1
        record.started_at, record.finished_at = time.time(), None
        self.registry.save(record)
        watcher = threading.Thread(
            target=self._wait_child, args=(record.id, process), name=f"run-{record.id}", daemon=True
        )
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [watcher]
        watcher.start()
        return record

    def join(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the children this runner started to end and their
        ends to be recorded; True when none is left. A server that drains, or a test that
        removes the registry's folder after, calls it; the watchers are daemon threads
        otherwise (a server that stops leaves its runs going: the next one adopts them)."""
        deadline = time.monotonic() + timeout
        while True:  # a run's end may start a queued one: its watcher joins the list
            with self._lock:
                alive = [t for t in self._threads if t.is_alive()]
            if not alive:
                return True
            if time.monotonic() >= deadline:
                return False
            for thread in alive:
                thread.join(max(0.0, deadline - time.monotonic()))

    def stop(self, run_id: str) -> RunRecord:
        """SIGINT (the trainer checkpoints and exits 130); asked again while stopping, SIGTERM."""
        record = self._require(run_id)
        if record.target and self.targets is not None:
            return self.targets.stop(record)
        if record.status == "queued":
            return self.cancel(run_id)
        if not record.active or record.pid is None:
            raise UserError(f"run {run_id} is {record.status}, not running", "nothing to stop")
        sig = signal.SIGINT if record.status == "running" else signal.SIGTERM
        if not self._alive(record):
            self.reconcile()
            raise UserError(f"run {run_id}: its process has already ended", "reload the page")
        try:
            os.kill(record.pid, sig)
        except ProcessLookupError:
            self.reconcile()
            raise UserError(
                f"run {run_id}: its process has already ended", "reload the page"
            ) from None
        self.registry.update(run_id, status="stopping", message=f"{sig.name} sent")
        return self._require(run_id)

    def resume(self, run_id: str) -> RunRecord:
        record = self._require(run_id)
        if record.active:
            raise UserError(f"run {run_id} is still {record.status}", "stop it first")
        if record.status == "completed":
            raise UserError(f"run {run_id} has completed", "start a new run from Train Model")
        if record.target and self.targets is not None:
            return self.targets.resume(record)
        holder = self.settings.run_folder(run_id).holder()
        if holder is not None:  # e.g. `trainforge train --resume runs/NAME` from a terminal
            folder = self.settings.cli_run_folder(run_id)
            raise UserError(f"{folder.path} is in use by {holder}", "stop that run first")
        return self.submit(record, resume=True)

    def _require(self, run_id: str) -> RunRecord:
        record = self.registry.get(run_id)
        if record is None:
            raise KeyError(run_id)
        return record

    # ------------------------------------------------------------------ watching
    def _wait_child(self, run_id: str, process: subprocess.Popen) -> None:
        code = process.wait()
        with self._lock:
            if self._children.get(run_id) is process:
                del self._children[run_id]
        self._record_end(run_id, code, process.pid)

    def reconcile(self) -> None:
        """Adopt live runs this server did not start; mark vanished ones. Call at start-up."""
        for record in self.registry.active():
            if record.status == "queued" or record.target:  # a cluster run: targets watches it
                continue  # no process yet: start_queued() starts it when a slot is free
            with self._lock:
                mine = record.id in self._children or record.id in self._watched
            if mine:
                continue
            if self._alive(record):
                with self._lock:
                    self._watched.add(record.id)
                threading.Thread(
                    target=self._poll_adopted,
                    args=(record,),
                    name=f"adopt-{record.id}",
                    daemon=True,
                ).start()
            else:
                self._record_end(record.id, None, record.pid)
        self.start_queued()

    def _poll_adopted(self, record: RunRecord) -> None:
        while self._alive(record):
            time.sleep(_ADOPT_POLL_S)
        with self._lock:
            self._watched.discard(record.id)
        self._record_end(record.id, None, record.pid)

    def _alive(self, record: RunRecord) -> bool:
        if record.pid is None:
            return False
        with self._lock:
            child = self._children.get(record.id)
        if child is not None and child.pid == record.pid:
            return child.poll() is None
        try:
            process = psutil.Process(record.pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                return False
            started = process.create_time()
        except psutil.Error:
            return False
        return record.pid_started is None or abs(started - record.pid_started) < 1.0

    def _record_end(self, run_id: str, code: int | None, pid: int | None) -> None:
        record = self.registry.get(run_id)
        if record is None or record.pid != pid:
            return  # a newer attempt owns the record
        status, message = self._outcome(record, code)
        self.registry.finish_if_active(
            run_id, status=status, exit_code=code, message=message, finished_at=time.time()
        )
        self.start_queued()  # the slot this run held goes to the oldest queued run

    def _outcome(self, record: RunRecord, code: int | None) -> tuple[str, str]:
        folder = self.settings.run_folder(record.id)
        if code == 0:
            return "completed", "finished"
        if record.task == "sweep" and code in STOP_CODES:  # its trials saved their own
            return "stopped", "stopped; running trials saved checkpoints, Resume continues"
        if code in STOP_CODES:
            saved = folder.interrupted_checkpoint
            where = f"checkpoint {saved.name} saved" if saved.is_dir() else "no checkpoint yet"
            return "stopped", f"stopped by {STOP_CODES[code]}; {where}"
        killed = previous_end(folder.process_file) if code is None or code < 0 else None
        if killed is not None:  # the kernel's OOM killer: say so, and how to avoid it
            return "failed", killed
        if code is None:  # not our child: judge by the run folder
            summary = summary_since(folder, record.started_at)
            if summary is not None and summary.get("interrupted"):
                return "stopped", f"stopped ({summary.get('signal') or 'signal'})"
            if summary is not None:
                return "completed", str(summary.get("stop_reason") or "finished")
            return "failed", "the training process vanished without finishing"
        if code < 0 and record.status == "stopping" and -code in (signal.SIGINT, signal.SIGTERM):
            # Stopped while Python was still starting, before the trainer's handler existed.
            return "stopped", f"stopped by {_signal_name(-code)} before training began"
        if code < 0:
            return "failed", f"killed by {_signal_name(-code)}"
        lines = log_tail(self.log_path(record.id), 12)
        last = next((line for line in reversed(lines) if not line.startswith(" ")), None)
        return "failed", f"exit code {code}" + (f": {last}" if last else "")


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
