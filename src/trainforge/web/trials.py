"""A sweep's trials as runs: each trial's run folder (`runs/SWEEP/trial-NNN`) has a run page
at `/runs/SWEEP/trial-NNN` and the run API under `/api/runs/SWEEP/trials/trial-NNN` (status,
metrics, log, events), read from its folder as a command-line run is (`cli_runs`). A trial
is stopped and resumed with its sweep, on the sweep's page."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response, StreamingResponse

from trainforge.sweep.study import SweepFolder
from trainforge.web.api import event_stream, metrics_after, series_answer, status_response
from trainforge.web.api_models import RunOut
from trainforge.web.app_state import AppState
from trainforge.web.lookup import trial_record
from trainforge.web.run_files import log_tail

router = APIRouter(prefix="/api/runs/{sweep}/trials/{trial}")
_EVENT_STREAM = {200: {"content": {"text/event-stream": {}}, "description": "event stream"}}


def _state(request: Request) -> AppState:
    return request.app.state.trainforge


@router.get("", response_model=RunOut, responses={304: {}, 400: {}, 404: {}})
def get_trial(request: Request, sweep: str, trial: str) -> Response:
    """A trial's run: status, step, latest metrics per split, checkpoints."""
    state = _state(request)
    record = trial_record(state, sweep, trial)
    return status_response(state, record, request.headers.get("if-none-match"))


@router.get("/metrics", responses={400: {}, 404: {}})
def trial_metrics(
    request: Request, sweep: str, trial: str, offset: int = Query(0, ge=0)
) -> dict[str, Any]:
    state = _state(request)
    return metrics_after(state, trial_record(state, sweep, trial), offset)


@router.get("/series", responses={400: {}, 404: {}})
def trial_series(
    request: Request,
    sweep: str,
    trial: str,
    lo: int | None = Query(None, ge=0),
    hi: int | None = Query(None, ge=0),
) -> dict[str, Any]:
    """The trial's metrics as chart buckets, as for a run (`api.run_series`)."""
    state = _state(request)
    return series_answer(state, trial_record(state, sweep, trial), lo, hi)


@router.get("/log", responses={400: {}, 404: {}})
def trial_log(
    request: Request, sweep: str, trial: str, lines: int = Query(40, ge=1, le=1000)
) -> dict[str, list[str]]:
    """The trial's output, as the sweep wrote it (`SweepFolder.trial_log`)."""
    state = _state(request)
    trial_record(state, sweep, trial)
    number = int(trial.removeprefix("trial-"))
    log = SweepFolder(state.settings.runs_path / sweep).trial_log(number)
    return {"lines": log_tail(log, lines)}


@router.get("/events", response_class=StreamingResponse, responses=_EVENT_STREAM)
async def trial_events(
    request: Request,
    sweep: str,
    trial: str,
    offset: int = Query(0, ge=0),
    last_event_id: str | None = Header(None),
) -> StreamingResponse:
    """Server-sent events of the trial, as for a run (`metrics`, `status`, `end`)."""
    state = _state(request)
    return event_stream(request, state, trial_record(state, sweep, trial), offset, last_event_id)
