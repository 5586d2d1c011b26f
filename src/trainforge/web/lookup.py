"""The run a URL names, or its 400/404: one lookup for the run API (`web.api`), the run pages
and files (`web.links`, `web.artefacts`, `web.run_manage`) and a sweep's trials
(`web.sweeps`, `web.trials`). A name that is not one is a 400 before any path is built from
it; a name with no run behind it is a 404.

FastAPI's dependency injection (`Depends`) was considered: the pages and the API take the
name from different path parameters (`{run_id}`, `{sweep}/{trial}`), and a plain function
called with the state keeps the rule testable without a request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import HTTPException

from trainforge.web.db import RunRecord
from trainforge.web.paths import shown
from trainforge.web.settings import is_plain_name, is_trial_id


def _lookup(
    state: Any, run_id: str, valid: Callable[[str], bool], wrong: str, what: str
) -> RunRecord:
    if not valid(run_id):
        raise HTTPException(400, wrong)
    record = state.get_run(run_id)
    if record is None:
        raise HTTPException(404, f"no {what} {shown(run_id)}")
    return record


def run_record(state: Any, run_id: str) -> RunRecord:
    """A run by its plain name (the app's, or one started from the command line)."""
    wrong = f"run id {shown(run_id)} is not a plain name"
    return _lookup(state, run_id, is_plain_name, wrong, "run")


def trial_record(state: Any, sweep: str, trial: str) -> RunRecord:
    """A sweep's trial as a run (`SWEEP/trial-NNN`)."""
    run_id = f"{sweep}/{trial}"
    return _lookup(state, run_id, is_trial_id, f"{shown(run_id)} is not SWEEP/trial-NNN", "trial")
