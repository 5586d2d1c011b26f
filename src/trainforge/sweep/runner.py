"""The sweep loop: workers pull trials from the journal until the study has N of them.

One worker runs trials one after another; `--parallel K` runs K workers in this process,
each training its trial in its own child with cores / K threads (`TRAINFORGE_THREADS`), so
together they start no more threads than the machine has. A Slurm job array runs one
worker per array task, all on the same journal. Optuna's `study.optimize` was considered:
it runs the objective in the calling process and has no lease for JournalStorage, while a
trial here is a child process that must resume in its own folder after a kill, so the loop
uses ask/tell (`study.claim`) instead.

SIGINT / SIGTERM to the sweep: each running trial is signalled too, saves its checkpoint and
goes back to the queue; no new trial starts. Running the same command again continues.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from trainforge.runfolder import RunFolder
from trainforge.sweep import study as studies
from trainforge.sweep.latency import LATENCY
from trainforge.sweep.space import Space
from trainforge.sweep.study import REASON_ATTR, SweepFolder
from trainforge.sweep.trial import COMPLETE, FAIL, PRUNED, Outcome, run_trial


class Sweep:
    def __init__(
        self,
        folder: SweepFolder,
        request: dict[str, Any],
        space: Space,
        *,
        parallel: int = 1,
        threads: int | None = None,
        seed: int = 0,
        say: Callable[[str], None] = print,
    ) -> None:
        self.folder = folder
        self.request = request
        self.space = space
        self.parallel = max(1, parallel)
        self.threads = threads
        self.seed = seed
        self.say = say
        self.stopping = threading.Event()
        self.received: str | None = None  # the signal that stopped the sweep
        self.error: str | None = None  # why a worker could not go on
        self.children: list[subprocess.Popen] = []
        self._say_lock = threading.Lock()

    def run(self) -> bool:
        """Work until the study has all its trials; False when a signal stopped it early."""
        previous = self._install_signals()
        try:
            workers = [
                threading.Thread(target=self._worker, args=(i,), daemon=True)
                for i in range(self.parallel)
            ]
            for w in workers:
                w.start()
            for w in workers:
                while w.is_alive():
                    w.join(0.2)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return not self.stopping.is_set()

    def _install_signals(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}

        def handler(signum: int, _frame: Any) -> None:
            self.received = signal.Signals(signum).name
            self.stopping.set()
            # Each trial saves its checkpoint and stops; the sweep itself requeues a Slurm
            # task after SIGUSR1 (a trial would requeue it too on its own SIGUSR1).
            for child in list(self.children):
                with contextlib.suppress(OSError):
                    child.send_signal(signal.SIGTERM)

        try:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
                previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread: the caller handles signals
            pass
        return previous

    def _worker(self, index: int) -> None:
        try:
            self._work(index)
        except Exception as err:  # a worker that cannot go on stops the sweep, with the reason
            self.error = f"{type(err).__name__}: {err}".splitlines()[0]
            self.stopping.set()

    def _work(self, index: int) -> None:
        # Every worker, task and restart keys its draws by (seed, trial number) alone.
        study = studies.open_study(self.folder, self.request, seed=self.seed)
        while not self.stopping.is_set():
            claimed = studies.claim(self.folder, study, self.request["trials"], self.space)
            if claimed is None:
                return
            trial, values, lease = claimed
            try:
                self._one(study, trial, values)
            finally:
                os.close(lease)

    def _one(self, study: Any, trial: Any, values: dict[str, Any]) -> None:
        number = studies.root_number(study._storage.get_trial(trial._trial_id))
        shown = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items()
        )
        resumed = RunFolder(self.folder.trial_dir(number)).is_run()
        self._say(
            f"{self.folder.trial_name(number)}: {'resuming' if resumed else 'starting'} ({shown})"
        )
        result = run_trial(
            self.request, self.folder, trial, values,
            number=number, threads=self.threads, started=self.children,
        )  # fmt: skip
        self._tell(study, trial, result)
        self._say(f"{self.folder.trial_name(number)}: {_describe(result, self.request['metric'])}")

    def _tell(self, study: Any, trial: Any, result: Outcome) -> None:
        from optuna.trial import TrialState

        if result.state == COMPLETE:
            if result.latency_ms is not None:
                trial.set_user_attr(LATENCY, result.latency_ms)
            values = [
                result.latency_ms if metric == LATENCY else result.value
                for metric, _ in studies.objectives(self.request)
            ]
            study.tell(trial, values if len(values) > 1 else values[0])
        elif result.state == PRUNED:
            study.tell(trial, state=TrialState.PRUNED)
        elif result.state == FAIL:
            trial.set_user_attr(REASON_ATTR, result.reason)
            study.tell(trial, state=TrialState.FAIL)
        # REQUEUE: the trial stays RUNNING; once its lease is let go, the next claim finds it
        # stale and queues it again to resume in its folder.

    def _say(self, line: str) -> None:
        with self._say_lock:
            self.say(line)


def _describe(result: Outcome, metric: str) -> str:
    if result.state == COMPLETE:
        latency = "" if result.latency_ms is None else f", latency {result.latency_ms:.4g} ms"
        return f"complete, {metric} {result.value:.6g}{latency}"
    if result.state == PRUNED:
        return f"pruned ({result.reason})"
    if result.state == FAIL:
        return f"failed: {result.reason}"
    return f"stopped ({result.reason}); it resumes when the sweep goes on"
