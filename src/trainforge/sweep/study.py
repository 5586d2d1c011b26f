"""The sweep folder and the study in it: layout, the request, the journal, claiming trials.

`runs/NAME/` holds `sweep.json` (what was asked: config, space, train flags, trials, metric,
direction, pruner), `study.journal` (Optuna's JournalStorage on a file, locked with
`JournalFileOpenLock`, the lock Optuna documents for NFS, where symlinks are not atomic),
one run folder per trial (`trial-NNN/`), each trial's output (`logs/trial-NNN.log`) and the
results (`summary.csv`, `summary.md`, `report.html`).

Liveness. Optuna's heartbeat (`fail_stale_trials`) is implemented for RDBStorage only, not
for JournalStorage; so each running trial holds a lease, an `flock` on
`.leases/trial-NNN.lock`, for as long as its worker lives (the kernel drops it when the
worker dies, kill -9 and preemption included; NFS clients map flock to NFS locks). Claiming
and the stale check happen under the sweep's own flock (`.sweep.lock`), so a trial is
never seen between its `ask` and its lease. A RUNNING trial whose lease is free is failed,
and Optuna's `RetryHeartbeatStaleTrialCallback` queues it again with the same params; the
retry trains in the original trial's folder (`--resume`), and the stale attempt (named in
the retry's `retry_history`) is not counted: the study ends with exactly N counted trials.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainforge.errors import UserError
from trainforge.runfolder import REPORT

SWEEP_JSON = "sweep.json"
REASON_ATTR = "fail_reason"
WORKER_ATTR = "worker"  # host:pid of the sweep process that ran the trial
# A trial whose process keeps dying (the kernel's OOM killer) is failed after this many.
MAX_RETRIES = 3


def need_optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise UserError(
            "sweeps need Optuna, which is not installed",
            "pip install 'trainforge[sweep]'",
        ) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


@dataclass(frozen=True)
class SweepFolder:
    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def request(self) -> Path:
        return self.path / SWEEP_JSON

    @property
    def journal(self) -> Path:
        return self.path / "study.journal"

    @property
    def summary_csv(self) -> Path:
        return self.path / "summary.csv"

    @property
    def summary_md(self) -> Path:
        return self.path / "summary.md"

    @property
    def report(self) -> Path:
        return self.path / REPORT

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def leases(self) -> Path:
        return self.path / ".leases"

    def trial_name(self, number: int) -> str:
        return f"trial-{number:03d}"

    def trial_dir(self, number: int) -> Path:
        return self.path / self.trial_name(number)

    def trial_log(self, number: int) -> Path:
        return self.logs / f"{self.trial_name(number)}.log"

    def is_sweep(self) -> bool:
        return self.request.is_file()

    def read_request(self) -> dict[str, Any]:
        try:
            return json.loads(self.request.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise UserError(
                f"{self.request}: cannot read the sweep record ({err})",
                "name a sweep folder such as runs/NAME that `trainforge sweep` wrote",
            ) from None

    def write_request(self, record: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        # One name per process: the tasks of an array may record the sweep at the same time.
        tmp = self.path / f".{SWEEP_JSON}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(record, indent=2, default=str), encoding="utf-8")
        tmp.replace(self.request)

    @contextlib.contextmanager
    def claim_lock(self) -> Iterator[None]:
        """The sweep-wide lock held while trials are claimed or judged stale."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / ".sweep.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing drops the lock

    def take_lease(self, number: int) -> int:
        """Hold trial `number` for this worker; the fd to close when the trial ends."""
        self.leases.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.leases / f"{self.trial_name(number)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def lease_held(self, number: int) -> bool:
        """Whether a live worker holds trial `number` (this process's own leases count)."""
        path = self.leases / f"{self.trial_name(number)}.lock"
        if not path.exists():
            return False
        fd = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)
        return False


def storage(folder: SweepFolder) -> Any:
    """Optuna's JournalStorage on the sweep's journal file, with the NFS-safe open lock."""
    optuna = need_optuna()
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    folder.path.mkdir(parents=True, exist_ok=True)
    path = str(folder.journal)
    backend = JournalFileBackend(path, lock_obj=JournalFileOpenLock(path))
    return optuna.storages.JournalStorage(backend)


def build_pruner(name: str) -> Any:
    optuna = need_optuna()
    if name == "median":
        # Optuna's defaults: five trials finish before any is judged.
        return optuna.pruners.MedianPruner(n_startup_trials=5)
    if name == "asha":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()


def objectives(request: dict[str, Any]) -> list[tuple[str, str]]:
    """(metric, direction) of each objective; a sweep recorded before objectives had one."""
    found = request.get("objectives") or [[request["metric"], request["direction"]]]
    return [(str(m), str(d)) for m, d in found]


def open_study(folder: SweepFolder, request: dict[str, Any], *, seed: int | None = None) -> Any:
    """The sweep's study (created on first use), with its keyed sampler and pruner."""
    optuna = need_optuna()
    from trainforge.sweep.sampler import KeyedSampler
    from trainforge.sweep.space import distributions, parse_space

    space, _ = parse_space(request.get("space") or {}, folder.name)
    seed = int(request.get("seed") or 0) if seed is None else seed
    directions = [d for _, d in objectives(request)]
    return optuna.create_study(
        study_name=folder.name,
        storage=storage(folder),
        directions=directions,
        sampler=KeyedSampler(distributions(space), seed),
        pruner=build_pruner(request["pruner"]),
        load_if_exists=True,
    )


def root_number(trial: Any) -> int:
    """The trial whose folder this one trains in: a retry trains in its original's."""
    return int(trial.system_attrs.get("failed_trial", trial.number))


def retried(trials: list[Any]) -> set[int]:
    """The numbers of the stale attempts that were queued again (each retry lists them)."""
    return {n for t in trials for n in t.system_attrs.get("retry_history", [])}


def counted(trials: list[Any]) -> list[Any]:
    """The trials that count toward N: every one but the stale attempts that were retried."""
    stale = retried(trials)
    return [t for t in trials if t.number not in stale]


def requeue_stale(folder: SweepFolder, study: Any) -> list[int]:
    """Fail each RUNNING trial no live worker holds, and queue it again (same params, same
    folder); the caller holds the claim lock. Returns the folders' trial numbers."""
    optuna = need_optuna()
    from optuna.storages import RetryHeartbeatStaleTrialCallback
    from optuna.trial import TrialState

    with warnings.catch_warnings():  # experimental in Optuna since 2.8; the interface is used
        warnings.simplefilter("ignore")
        retry = RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES)
    found = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if folder.lease_held(trial.number):
            continue
        try:
            study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another worker ended it meanwhile
        retry(study, study._storage.get_trial(trial._trial_id))
        found.append(root_number(trial))
    return found


def claim(
    folder: SweepFolder, study: Any, total: int, space: Any
) -> tuple[Any, dict[str, Any], int] | None:
    """The next trial for this worker, its drawn values and its lease; None when the study
    has all its trials (counted ones running or finished, nothing queued) or when a space of
    choices and whole numbers has every point in the study. The values are drawn under the
    claim lock, so the sampler sees every other worker's points (see `sweep.sampler`)."""
    from optuna.trial import TrialState

    from trainforge.sweep.space import draw, num_points

    with folder.claim_lock():
        requeue_stale(folder, study)
        trials = study.get_trials(deepcopy=False)
        waiting = any(t.state == TrialState.WAITING for t in trials)
        if not waiting and len(counted(trials)) >= total:
            return None
        points = num_points(space)
        if not waiting and points is not None and len(distinct_points(trials)) >= points:
            return None
        trial = study.ask()
        values = draw(trial, space)
        trial.set_user_attr(WORKER_ATTR, f"{socket.gethostname()}:{os.getpid()}")
        return trial, values, folder.take_lease(trial.number)


def distinct_points(trials: list[Any]) -> set[tuple[tuple[str, str], ...]]:
    from trainforge.sweep.sampler import point_key

    return {point_key(t.params) for t in trials if t.params}


def record_sweep(plan: dict[str, Any]) -> SweepFolder:
    """Write sweep.json, or check that the sweep already there is this one."""
    folder = SweepFolder(Path(plan["folder"]))
    kept = {k: v for k, v in plan.items() if not k.startswith("_") and k != "parallel"}
    if folder.is_sweep():
        before = folder.read_request()
        for key in ("config", "space", "metric", "direction", "pruner", "train_args",
                    "objectives", "export_format"):  # fmt: skip
            if key == "objectives" and objectives(before) == objectives(kept):
                continue
            if before.get(key) != kept.get(key):
                raise UserError(
                    f"{folder.path} holds a sweep with another {key}",
                    "run it with its own command, or pick another --name",
                )
        kept["trials"] = max(int(before.get("trials") or 0), kept["trials"])
    folder.write_request(kept)
    return folder
