"""Runs management: a run's display name, tags and note, and deleting a run.

What the user says about a run is stored in the web database (`db.RunRegistry.set_meta`),
keyed by the run id, for the app's runs and command-line runs alike: the run folder's
run.json is the training's record and the app never edits it. Deleting removes the run folder
and the run's rows; it is refused while the run is queued, running or stopping, while any
process holds the folder (a `trainforge train` from a terminal), and for a sweep's trial
(delete the sweep's folder instead). A run's output model under models/ is kept: it is a
model, not the run.
"""

from __future__ import annotations

import shutil
from typing import Annotated

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from trainforge.web.api_models import RunOut
from trainforge.web.app_state import AppState
from trainforge.web.db import RunMeta
from trainforge.web.limits import MAX_NAME, MAX_TEXT
from trainforge.web.lookup import run_record
from trainforge.web.settings import is_trial_id

router = APIRouter(prefix="/api")
MAX_TAGS = 20
MAX_TAG = 40


class MetaRequest(BaseModel):
    """Fields left out keep their value; an empty display name shows the run id again."""

    model_config = ConfigDict(extra="forbid")
    display_name: str | None = Field(None, max_length=MAX_NAME)
    tags: list[Annotated[str, Field(max_length=MAX_TAG)]] | None = Field(None, max_length=MAX_TAGS)
    note: str | None = Field(None, max_length=MAX_TEXT)


def _state(request: Request) -> AppState:
    return request.app.state.trainforge


@router.patch("/runs/{run_id}/meta", responses={400: {}, 404: {}})
def set_meta(request: Request, run_id: str, body: MetaRequest) -> RunOut:
    """Rename a run (its display name), set its tags or its note."""
    state = _state(request)
    record = run_record(state, run_id)
    old = state.registry.meta(record.id)
    tags = old.tags
    if body.tags is not None:
        # One tag per distinct name, in the order given; blank ones dropped.
        tags = tuple(dict.fromkeys(t.strip() for t in body.tags if t.strip()))
    meta = RunMeta(
        display_name=old.display_name if body.display_name is None else body.display_name.strip(),
        tags=tags,
        note=old.note if body.note is None else body.note,
    )
    state.registry.set_meta(record.id, meta)
    return RunOut(**state.run_view(record))


@router.delete("/runs/{run_id}", status_code=204, responses={400: {}, 404: {}, 409: {}})
def delete_run(request: Request, run_id: str) -> None:
    """Delete a finished run: its run folder and its rows. Never while it runs."""
    state = _state(request)
    record = run_record(state, run_id)
    if is_trial_id(record.id):
        sweep = record.id.partition("/")[0]
        raise HTTPException(409, f"{record.id} is a trial of sweep {sweep}: delete the sweep")
    if record.active:
        raise HTTPException(
            409, f"run {record.id} is {record.status}: stop it first, then delete it"
        )
    folder = state.settings.run_folder(record.id)
    holder = folder.holder()
    if holder is not None:
        raise HTTPException(409, f"run {record.id} is in use by {holder}: stop it first")
    runs = state.settings.runs_path.resolve()
    # The path rule (web/paths.py): only a real folder inside the runs folder is removed,
    # never what a symlink there points to.
    if folder.path.is_symlink() or not folder.path.resolve().is_relative_to(runs):
        raise HTTPException(409, f"runs/{record.id} is a link out of the runs folder: not removed")
    if folder.path.is_dir():
        shutil.rmtree(folder.path)
    state.registry.delete(record.id)
