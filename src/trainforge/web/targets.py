"""Runs on cluster targets from the web app: submitted, watched, stopped and resumed through
the target, listed with the runs of this machine.

A cluster run is a row of the run registry with `target` set; its Slurm side is the job
record the command line keeps too (`targets.jobs`, so `trainforge jobs` lists it), and its
charts read the local mirror (`settings.mirrors`, refreshed by `targets.watch`).

The server never waits on SSH: submit, stop and resume record what was asked and hand the
SSH work to a thread; one watcher thread polls every target with live runs (one round trip
per target, `targets.watch.poll_target`) with back-off, 2 s doubling to 60 s while nothing
changes, woken at once by a submit or a stop. A target that does not answer is a badge on
its runs (`unreachable`); the runs keep their last known state and the pages stay as fast.
Considered: asyncio tasks in the server's event loop. The SSH calls are blocking OpenSSH
subprocesses (`targets.remote`), so threads keep them off the loop without a second
implementation of the transport.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainforge.errors import UserError
from trainforge.targets.jobs import FINAL, JobRecord, all_jobs, mirror_path, save_job, update_jobs
from trainforge.targets.spec import Target
from trainforge.targets.store import load_targets
from trainforge.targets.watch import Backoff, poll_target
from trainforge.web.db import RunRecord, RunRegistry
from trainforge.web.settings import WebSettings

# A job's state (targets.jobs.STATES) as a run's status on the pages.
STATUS = {
    "queued": "queued", "pending": "queued", "running": "running", "requeued": "running",
    "stopping": "stopping", "stopped": "stopped", "completed": "completed", "failed": "failed",
}  # fmt: skip


class TargetRuns:
    """The app's runs on cluster targets."""

    def __init__(self, settings: WebSettings, registry: RunRegistry) -> None:
        self.settings = settings
        self.registry = registry
        self._jobs: dict[str, JobRecord] = {}  # run id -> the job as last seen
        self._badges: dict[str, str] = {}  # target -> the last poll's connection problem
        # Runs being (re)submitted: not polled until the new job is recorded, so the old
        # job's final state is never carried onto the run again.
        self._submitting: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        mine = {r.id: r for r in registry.list() if r.target}
        for record in mine.values():
            settings.mirrors[record.id] = mirror_path(record.target or "", record.id)
        with contextlib.suppress(UserError):  # an unreadable jobs file: said by `trainforge jobs`
            self._jobs = {j.name: j for j in all_jobs() if j.name in mine}

    # ------------------------------------------------------------------ what the pages show
    def targets(self) -> dict[str, Target]:
        return load_targets(self.settings.targets_file)

    def choices(self) -> list[dict[str, Any]]:
        """The dialog's Target list: this machine, then each cluster target."""
        found = [{"name": "local", "where": "this machine", "partition": None}]
        for name, target in self.targets().items():
            if target.kind == "slurm":
                found.append({"name": name, "where": target.where(), "partition": target.partition})
        return found

    def view(self, record: RunRecord) -> dict[str, Any]:
        """What a run's row shows of its target: name, Slurm job, why it waits, the badge."""
        if not record.target:
            return {"target": "local", "job_id": "", "reason": "", "unreachable": ""}
        with self._lock:
            job = self._jobs.get(record.id)
            badge = self._badges.get(record.target, "")
        return {
            "target": record.target,
            "job_id": job.job_id if job else "",
            "reason": job.reason if job and job.state == "pending" else "",
            "unreachable": badge,
        }

    def stamp(self, record: RunRecord) -> tuple:
        view = self.view(record)
        return (view["job_id"], view["reason"], view["unreachable"])

    # ------------------------------------------------------------------ actions
    def submit(self, record: RunRecord, config: str, options: dict[str, Any]) -> RunRecord:
        """Record the run as queued and submit it in the background (validated already)."""
        assert record.target
        self.settings.mirrors[record.id] = mirror_path(record.target, record.id)
        record.status, record.message = "queued", f"submitting to {record.target}"
        record.queued_at = time.time()
        self.registry.save(record)
        self._background(self._submit, record.id, record.target, config, options, False)
        return record

    def submit_sweep(self, record: RunRecord, argv: list[str]) -> RunRecord:
        """Record the sweep as queued and send its job array in the background; `argv` is
        the `trainforge sweep` command line (with `--slurm --time T --submit`)."""
        assert record.target
        self.settings.mirrors[record.id] = mirror_path(record.target, record.id)
        record.status, record.message = "queued", f"submitting to {record.target}"
        record.queued_at = time.time()
        self.registry.save(record)
        self._background(self._submit_sweep, record.id, record.target, argv)
        return record

    def _submit_sweep(self, run_id: str, name: str, argv: list[str]) -> None:
        from trainforge.sweep.cli import prepare, split_args
        from trainforge.targets.submit import submit_sweep

        try:
            target = self.targets().get(name)
            if target is None:
                raise UserError(f"target {name} is no longer in the targets file", "add it back")
            own, rest = split_args(argv)
            job, _ = submit_sweep(target, prepare(own, rest), own)
        except UserError as err:
            self._failed(run_id, err.line().replace("\n", " "))
        else:
            with self._lock:
                self._jobs[run_id] = job
            self.registry.update(
                run_id, message=f"Slurm job array {job.job_id} on {name}", started_at=time.time()
            )
        finally:
            with self._lock:
                self._submitting.discard(run_id)
        self._wake.set()

    def stop(self, record: RunRecord) -> RunRecord:
        """scancel in the background: the run saves a checkpoint and ends (no requeue)."""
        job = self._job(record.id)
        if not record.active or job is None:
            raise UserError(f"run {record.id} is {record.status}, not running", "nothing to stop")
        self.registry.update(record.id, status="stopping", message=f"stopping job {job.job_id}")
        self._background(self._stop, record.id, record.target, job)
        return self.registry.get(record.id) or record

    def resume(self, record: RunRecord) -> RunRecord:
        """Submit the run again on its target, from its newest checkpoint."""
        job = self._job(record.id)
        if job is None:
            raise UserError(f"run {record.id} was never submitted", "start it from Train Model")
        if job.options.get("sweep"):
            raise UserError(f"{record.id} is a sweep", "start it again from the Sweeps page")
        self.registry.update(
            record.id, status="queued", message=f"resubmitting to {record.target}",
            attempts=record.attempts + 1, finished_at=None, exit_code=None, queued_at=time.time(),
        )  # fmt: skip
        self._background(self._submit, record.id, record.target, job.config, job.options, True)
        return self.registry.get(record.id) or record

    def _job(self, run_id: str) -> JobRecord | None:
        with self._lock:
            job = self._jobs.get(run_id)
        return job or next((j for j in all_jobs() if j.name == run_id), None)

    def _background(self, work: Callable, *args: Any) -> None:
        self._ensure_watching()
        if work in (self._submit, self._submit_sweep):
            with self._lock:
                self._submitting.add(args[0])
        threading.Thread(target=work, args=args, name="target-action", daemon=True).start()

    def _submit(self, run_id: str, name: str, config: str, options: dict, resume: bool) -> None:
        try:
            self._submit_now(run_id, name, config, options, resume)
        finally:
            with self._lock:
                self._submitting.discard(run_id)
        self._wake.set()

    def _submit_now(self, run_id: str, name: str, config: str, options: dict, resume: bool) -> None:
        from trainforge.config import ConfigError
        from trainforge.targets.submit import submit_run

        try:
            target = self.targets().get(name)
            if target is None:
                raise UserError(f"target {name} is no longer in the targets file", "add it back")
            job = submit_run(target, Path(config), resume=resume, **dict(options))
        except ConfigError as err:  # before UserError, which it is
            self._failed(run_id, " ".join(err.lines))
            return
        except UserError as err:
            self._failed(run_id, err.line())
            return
        with self._lock:
            self._jobs[run_id] = job
        self.registry.update(
            run_id, message=f"Slurm job {job.job_id} submitted to {name}", started_at=time.time()
        )

    def _failed(self, run_id: str, line: str) -> None:
        self.registry.finish_if_active(
            run_id, status="failed", message=line, finished_at=time.time()
        )

    def _stop(self, run_id: str, name: str, job: JobRecord) -> None:
        from trainforge.targets.remote import Remote

        try:
            target = self.targets()[name]
            done = Remote(target).run(f"scancel {job.job_id}", timeout=120)
            said = done.err.strip() if done.code else ""
        except (UserError, KeyError) as err:
            said = err.line() if isinstance(err, UserError) else f"no target {name}"
        if said:
            self.registry.update(run_id, status="running", message=f"stop failed: {said}")
            return
        current = next((j for j in all_jobs() if j.name == run_id), job)  # the newest poll's
        current.state = "stopping"
        save_job(current)
        self._wake.set()

    # ------------------------------------------------------------------ watching
    def start(self) -> None:
        """Start watching when the app has cluster runs (else at the first submission)."""
        if any(r.target for r in self.registry.list()):
            self._ensure_watching()

    def _ensure_watching(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name="target-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self._wake.set()

    def _loop(self) -> None:
        backoff = Backoff()
        while not self._closed.is_set():
            try:
                changed = self.poll_once()
            except Exception as err:  # a bad targets file, a full disk: said on the runs
                try:
                    changed = self._set_badges(f"watching failed: {err}")
                except Exception:  # the database itself is gone: nothing left to watch
                    return
            self._wake.wait(backoff.next(changed))
            if self._wake.is_set():
                self._wake.clear()
                backoff.wait = backoff.first

    def poll_once(self) -> bool:
        """One poll of each target with live runs; whether anything changed."""
        with self._lock:
            busy = set(self._submitting)
        runs = {r.id: r for r in self.registry.list() if r.target and r.active and r.id not in busy}
        if not runs:
            return False
        jobs = [j for j in all_jobs() if j.name in runs and j.target == runs[j.name].target]
        known = self.targets()
        changed = False
        for name in sorted({j.target for j in jobs}):
            mine = [j for j in jobs if j.target == name]
            if name not in known:
                changed |= self._badge(name, f"target {name} is not in the targets file")
                continue
            polled = poll_target(known[name], mine)
            update_jobs(polled)
            changed |= self._badge(name, next((j.unreachable for j in polled if j.unreachable), ""))
            for job in polled:
                changed |= self._apply(runs[job.name], job)
        return changed

    def _badge(self, name: str, line: str) -> bool:
        with self._lock:
            old = self._badges.get(name, "")
            self._badges[name] = line
        return old != line

    def _set_badges(self, line: str) -> bool:
        names = {r.target for r in self.registry.list() if r.target and r.active}
        return any([self._badge(name, line) for name in names])

    def _apply(self, record: RunRecord, job: JobRecord) -> bool:
        """Carry the job's state onto the run; whether the run changed."""
        with self._lock:
            old = self._jobs.get(record.id)
            self._jobs[record.id] = job
        status = STATUS.get(job.state, record.status)
        if job.state == "pending":
            message = f"pending: {job.reason or 'waiting'} (Slurm job {job.job_id})"
        elif job.state in FINAL:
            message = job.reason or job.state
        else:
            message = f"{job.state} (Slurm job {job.job_id} on {job.target})"
        if job.state in FINAL:
            return self.registry.finish_if_active(
                record.id, status=status, message=message, finished_at=time.time()
            )
        if (status, message) == (record.status, record.message) and old is not None:
            return old.step != job.step
        self.registry.update(record.id, status=status, message=message)
        return True
