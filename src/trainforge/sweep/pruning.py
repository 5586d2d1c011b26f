"""Inside a trial's training process: each validation reported to the study's pruner.

The sweep starts `trainforge train` for a trial with `TRAINFORGE_SWEEP_TRIAL` naming the
journal, the study, the trial, the metric and the pruner. `callbacks_from_env()` then adds
`PruningCallback` to the run's callbacks: after each full validation it reports the metric
at that step (`Trial.report`) and, when the pruner says so (`Trial.should_prune`), stops the
run the way any stop does: the loop ends at that step, the last checkpoint is written, and
summary.json's stop reason starts with `pruned`, which the sweep records as PRUNED.
Optuna's own integration callbacks (optuna-integration) hang off Lightning, Keras and the
like, not this loop, so this small one is written here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from trainforge.engine.callbacks import Callback

TRIAL_ENV = "TRAINFORGE_SWEEP_TRIAL"
PRUNED_PREFIX = "pruned"


class PruningCallback(Callback):
    def __init__(self, trial: Any, metric: str) -> None:
        self.trial = trial
        self.metric = metric

    def on_eval_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        value = metrics.get(self.metric)
        if value is None or trainer.should_stop:
            return
        step = trainer.state.global_step
        self.trial.report(float(value), step)
        if trainer.all_steps_done():
            return  # the closing validation: the trial is complete, nothing left to save
        if self.trial.should_prune():
            trainer.stop(f"{PRUNED_PREFIX} by the sweep's pruner at step {step}")


def trial_env(
    journal: str, study: str, trial_id: int, metric: str, pruner: str, *, report: bool = True
) -> str:
    """`report` false: a study of several objectives, where Optuna takes no intermediate
    values (and prunes nothing)."""
    return json.dumps(
        {"journal": journal, "study": study, "trial_id": trial_id, "metric": metric,
         "pruner": pruner, "report": report}
    )  # fmt: skip


def callbacks_from_env(env: Mapping[str, str] | None = None) -> list[Callback]:
    """The pruning callback when this process trains a sweep's trial, else nothing."""
    text = (os.environ if env is None else env).get(TRIAL_ENV)
    if not text:
        return []
    spec = json.loads(text)
    if not spec.get("report", True):
        return []
    from trainforge.sweep.study import build_pruner, need_optuna

    optuna = need_optuna()
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    backend = JournalFileBackend(spec["journal"], lock_obj=JournalFileOpenLock(spec["journal"]))
    study = optuna.load_study(
        study_name=spec["study"],
        storage=optuna.storages.JournalStorage(backend),
        pruner=build_pruner(spec["pruner"]),
    )
    return [PruningCallback(optuna.trial.Trial(study, int(spec["trial_id"])), spec["metric"])]
