"""The JSON API behind every page action (described by the app's OpenAPI document).

Run ids, model names and output names must be plain folder names (`settings.check_name`);
anything else is a 400 before a path is built. Form problems are 422 with an `errors`
mapping of dialog field -> messages (plus FastAPI's usual `detail` list). Progress streams
are server-sent events read from the run folder's metrics file (`RunFolder.metrics`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from trainforge.errors import UserError
from trainforge.observe import series
from trainforge.registry import TASKS
from trainforge.runfolder import resume_command
from trainforge.web.api_models import ErrorsOut, RunOut, TrainRequest
from trainforge.web.app_state import AppState
from trainforge.web.cli_runs import signalable
from trainforge.web.db import RunRecord
from trainforge.web.dialog import FormErrors, TrainForm, defaults, validate_form
from trainforge.web.limits import MAX_NAME, MAX_PATH, cut
from trainforge.web.lookup import run_record
from trainforge.web.model_list import list_models
from trainforge.web.run_files import log_tail, read_records
from trainforge.web.settings import is_plain_name, is_trial_id

router = APIRouter(prefix="/api")
_HEARTBEAT_S = 15.0
_EVENT_STREAM = {200: {"content": {"text/event-stream": {}}, "description": "event stream"}}


def _state(request: Request) -> AppState:
    return request.app.state.trainforge


def _app_run(state: AppState, record: RunRecord, action: str) -> None:
    """409 for a command-line run the app has no process of: it is stopped where it runs.
    A sweep's trial is stopped and resumed with its sweep."""
    if state.registry.get(record.id) is None:
        if is_trial_id(record.id):
            sweep = record.id.partition("/")[0]
            raise HTTPException(
                409, f"{record.id} is a trial of sweep {sweep}: {action} it on /sweeps/{sweep}"
            )
        folder = state.settings.cli_run_folder(record.id)
        where = f"press Ctrl+C where it runs or `kill -INT {record.pid}`" if record.pid else (
            "press Ctrl+C where it runs")  # fmt: skip
        raise HTTPException(
            409,
            f"run {record.id} was started from the command line, so the app cannot {action} "
            f"it; {where} (it saves a checkpoint), then resume it here or "
            f"with `{resume_command(folder)}`",
        )


def _stop_cli_run(state: AppState, record: RunRecord) -> RunOut:
    """SIGINT to a command-line run's process, as Ctrl+C in its terminal: only to the process
    that holds the run folder and runs as this server's user (`cli_runs.signalable`)."""
    folder = state.settings.run_folder(record.id)
    pid = record.pid
    if record.status != "running" or pid is None or is_trial_id(record.id):
        _app_run(state, record, "stop")
    if not signalable(folder, pid):  # another user's, or another machine's
        _app_run(state, record, "stop")
    try:
        os.kill(pid, signal.SIGINT)
    except OSError:
        _app_run(state, record, "stop")
    view = dict(state.run_view(record))
    view["message"] = f"SIGINT sent to process {pid}: it saves a checkpoint and stops"
    return RunOut(**view)


def errors_response(errors: dict[str, list[str]]) -> JSONResponse:
    detail = [
        {"loc": ["body", field], "msg": message, "type": "value_error"}
        for field, messages in errors.items()
        for message in messages
    ]
    errors = {field: [cut(m) for m in messages] for field, messages in errors.items()}
    for item in detail:
        item["msg"] = cut(item["msg"])
    return JSONResponse({"detail": detail, "errors": errors}, status_code=422)


@router.get("/train/defaults")
def train_defaults(
    request: Request,
    config: Annotated[str | None, Query(max_length=MAX_PATH)] = None,
    profile: Annotated[str, Query(max_length=MAX_NAME)] = "auto",
) -> dict[str, Any]:
    """What the Train Model dialog shows, read afresh from the config files."""
    state = _state(request)
    return defaults(state.settings, state.platform, config, profile)


@router.post("/runs", status_code=201, responses={422: {"model": ErrorsOut}})
def start_run(request: Request, body: TrainRequest) -> RunOut:
    """Validate the dialog like the CLI does, then start `trainforge train` as a subprocess."""
    state = _state(request)
    form = TrainForm(**body.model_dump())
    try:
        resolved, argv = validate_form(state.settings, state.platform, form)
    except FormErrors as err:
        return errors_response(err.errors)  # type: ignore[return-value]
    # A kind that fine-tunes a base model writes an output model named like the run.
    lm = TASKS.get(resolved.config.task.kind).base_model
    conflict = _name_conflict(state, form, lm)
    if conflict:
        return errors_response({"output_name": [conflict]})  # type: ignore[return-value]
    record = RunRecord(
        id=form.output_name,
        task=resolved.config.task.kind,
        config=form.config,
        profile=resolved.profile.name,
        argv=argv,
        form=body.model_dump(),
        output_model=form.output_name if lm else None,
    )
    return RunOut(**state.run_view(state.runner.submit(record)))


def _name_conflict(state: AppState, form: TrainForm, lm: bool) -> str | None:
    existing = state.registry.get(form.output_name)
    if existing is not None and existing.active:
        return f"run {form.output_name} is {existing.status}; pick another name"
    holder = state.settings.run_folder(form.output_name).holder()
    if holder is not None:  # a `trainforge train` from a terminal is using the folder
        folder = state.settings.cli_run_folder(form.output_name)
        return f"{folder.path} is in use by {holder}; pick another name or stop that run"
    if form.overwrite:
        return None
    found = state.settings.run_folder(form.output_name).occupied()
    if found:
        folder = state.settings.cli_run_folder(form.output_name)
        return (
            f"{folder.path} already holds a run ({', '.join(found)}); pick another name, tick "
            f"Overwrite, or continue it: Resume on the Runs page or `{resume_command(folder)}`"
        )
    if lm and (state.settings.models_path / form.output_name).exists():
        return (
            f"model folder {state.settings.models_dir}/{form.output_name} already exists; "
            "pick another name or tick Overwrite"
        )
    return None


@router.get("/runs")
def list_runs(request: Request) -> list[RunOut]:
    state = _state(request)
    return [RunOut(**state.run_view(r)) for r in state.list_runs()]


# Many clients poll a run's status, so it does no parsing while nothing changed: its reads
# are one SQLite row (WAL mode) and a stat per run file (`AppState.cached_view`), and the JSON
# is encoded once per change. A client that sends the entity tag back (If-None-Match, as
# browsers do) gets an empty 304. `StatusFastPath` answers it ahead of the router.
@router.get("/runs/{run_id}", response_model=RunOut, responses={304: {}, 400: {}, 404: {}})
async def get_run(request: Request, run_id: str) -> Response:
    """A run: status, step, latest metrics per split, checkpoints, report link."""
    state = _state(request)
    return status_response(state, run_record(state, run_id), request.headers.get("if-none-match"))


def status_response(state: AppState, record: RunRecord, if_none_match: str | None) -> Response:
    """The run's status as JSON with its ETag, or an empty 304 when `if_none_match` has it."""
    cached = state.cached_view(record)
    headers = {"ETag": cached.etag, "Cache-Control": "no-cache"}
    if if_none_match and cached.etag in if_none_match.split(", "):
        return Response(status_code=304, headers=headers)
    if cached.body is None:
        cached.body = RunOut(**cached.view).model_dump_json().encode()
    return Response(cached.body, media_type="application/json", headers=headers)


_STATUS_PATH = re.compile(r"/api/runs/([^/]+)")


class StatusFastPath:
    """Pure ASGI middleware: `GET /api/runs/{id}` of a known run answered without the
    router, its dependency solving and exception layers, which cost more CPU than the answer
    (about 40 % of the server's time under 50 polling clients, benchmarks/web_load.py).
    Anything else, a bad or unknown id included, goes on to the app. Installed inside the
    access guard, so the token and Host checks still come first."""

    def __init__(self, app: ASGIApp, state: AppState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            found = _STATUS_PATH.fullmatch(scope["path"])
            if found and is_plain_name(found[1]):
                record = self.state.get_run(found[1])
                if record is not None:
                    condition = Headers(scope=scope).get("if-none-match")
                    await status_response(self.state, record, condition)(scope, receive, send)
                    return
        await self.app(scope, receive, send)


@router.post("/runs/{run_id}/stop", status_code=202, responses={400: {}, 404: {}, 409: {}})
def stop_run(request: Request, run_id: str) -> RunOut:
    """SIGINT: the run finishes its step, saves checkpoint_interrupted and exits 130.
    Asked again while it is stopping: SIGTERM. A queued run is cancelled. A command-line
    run gets SIGINT where this server may signal its process (same user), else 409."""
    state = _state(request)
    record = run_record(state, run_id)
    if state.registry.get(record.id) is None:
        return _stop_cli_run(state, record)
    try:
        record = state.runner.stop(run_id)
    except UserError as err:
        raise HTTPException(409, err.line()) from None
    return RunOut(**state.run_view(record))


@router.post("/runs/{run_id}/cancel", status_code=202, responses={400: {}, 404: {}, 409: {}})
def cancel_run(request: Request, run_id: str) -> RunOut:
    """Take a queued run out of the queue before it starts (a running one: use stop)."""
    state = _state(request)
    _app_run(state, run_record(state, run_id), "cancel")
    try:
        record = state.runner.cancel(run_id)
    except UserError as err:
        raise HTTPException(409, err.line()) from None
    return RunOut(**state.run_view(record))


@router.post("/runs/{run_id}/resume", status_code=202, responses={400: {}, 404: {}, 409: {}})
def resume_run(request: Request, run_id: str) -> RunOut:
    """Start the run again as `trainforge train --resume runs/NAME`: its newest good
    checkpoint, with the recipe recorded in the run folder's run.json."""
    state = _state(request)
    record = run_record(state, run_id)
    recorded = state.settings.run_folder(record.id).is_run()
    if not recorded and not (state.settings.root / record.config).is_file():
        # Without run.json the attempt names the config file again (runner.attempt_args).
        raise HTTPException(409, f"the run's config {record.config} no longer exists")
    if state.registry.get(record.id) is None:
        if record.active:  # started from the command line and still training there
            _app_run(state, record, "resume")
        state.registry.save(record)  # from now on the app runs it
    try:
        record = state.runner.resume(run_id)
    except UserError as err:
        raise HTTPException(409, err.line()) from None
    return RunOut(**state.run_view(record))


@router.get("/runs/{run_id}/metrics", responses={400: {}, 404: {}})
def run_metrics(request: Request, run_id: str, offset: int = Query(0, ge=0)) -> dict[str, Any]:
    """The run's metrics records after byte `offset`, and the offset to ask from next."""
    state = _state(request)
    return metrics_after(state, run_record(state, run_id), offset)


def metrics_after(state: AppState, record: RunRecord, offset: int) -> dict[str, Any]:
    records, end = read_records(state.settings.run_folder(record.id).metrics, offset)
    return {"records": records, "offset": end}


@router.get("/runs/{run_id}/series", responses={400: {}, 404: {}})
def run_series(
    request: Request,
    run_id: str,
    lo: int | None = Query(None, ge=0),
    hi: int | None = Query(None, ge=0),
) -> dict[str, Any]:
    """The run's metrics as at most 1,000 min/max/last buckets per series (W&B's scheme),
    the newest record per split, and the byte offset the event stream continues from. With
    `lo` and `hi`: that step window, as raw points when it holds 1,000 or fewer a series."""
    state = _state(request)
    return series_answer(state, run_record(state, run_id), lo, hi)


def series_answer(
    state: AppState, record: RunRecord, lo: int | None, hi: int | None
) -> dict[str, Any]:
    path = state.settings.run_folder(record.id).metrics
    buckets = _SERIES.get(path)
    answer: dict[str, Any] = {"offset": buckets.offset, "lo": lo, "hi": hi,
                              "latest": buckets.latest()}  # fmt: skip
    if lo is None or hi is None or not path.is_file():
        return {**answer, "raw": buckets.width == 1, "origin": 0, **buckets.view()}
    if hi < lo:
        raise HTTPException(400, "hi must not be below lo")
    return {**answer, **series.window(path, lo, hi)}


_SERIES = series.Cache()


@router.get("/runs/{run_id}/log", responses={400: {}, 404: {}})
def run_log(request: Request, run_id: str, lines: int = Query(40, ge=1, le=1000)) -> dict:
    state = _state(request)
    record = run_record(state, run_id)
    return {"lines": log_tail(state.runner.log_path(record.id), lines)}


@router.get("/runs/{run_id}/events", response_class=StreamingResponse, responses=_EVENT_STREAM)
async def run_events(
    request: Request,
    run_id: str,
    offset: int = Query(0, ge=0),
    last_event_id: str | None = Header(None),
) -> StreamingResponse:
    """Server-sent events: `metrics` (new metrics records), `status` (the run),
    `end` once the run is no longer active and every record was sent."""
    state = _state(request)
    return event_stream(request, state, run_record(state, run_id), offset, last_event_id)


def event_stream(
    request: Request, state: AppState, record: RunRecord, offset: int, last_event_id: str | None
) -> StreamingResponse:
    if last_event_id and last_event_id.isdigit():
        offset = int(last_event_id)
    stream = _run_stream(request, state, record.id, offset)
    return StreamingResponse(stream, media_type="text/event-stream", headers=_NO_BUFFER)


_NO_BUFFER = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _sse(event: str, data: Any, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n"


async def _run_stream(
    request: Request, state: AppState, run_id: str, offset: int
) -> AsyncIterator[str]:
    path = state.settings.run_folder(run_id).metrics
    last_status: str | None = None
    beat = time.monotonic()
    while not await request.is_disconnected():
        record = state.get_run(run_id)
        if record is None:
            return
        records, offset = read_records(path, offset)
        if records:
            yield _sse("metrics", records, offset)
        view = state.run_view(record)
        status_key = json.dumps(
            [view["status"], view["message"], view["attempts"], view["total_steps"]]
        )
        if status_key != last_status:
            last_status = status_key
            yield _sse("status", RunOut(**view).model_dump())
        if not record.active:
            records, offset = read_records(path, offset)  # what was written before the exit
            if records:
                yield _sse("metrics", records, offset)
            yield _sse("end", {"status": record.status, "offset": offset})
            return
        if time.monotonic() - beat > _HEARTBEAT_S:
            beat = time.monotonic()
            yield ": keep-alive\n\n"
        await asyncio.sleep(state.settings.poll_interval_s)


@router.get("/events", response_class=StreamingResponse, responses=_EVENT_STREAM)
async def events(request: Request) -> StreamingResponse:
    """Server-sent `runs` events whenever a run starts, stops, completes or fails."""
    state = _state(request)

    async def stream() -> AsyncIterator[str]:
        seen: dict[str, str] | None = None
        beat = time.monotonic()
        while not await request.is_disconnected():
            now = {r.id: r.status for r in state.list_runs()}
            if now != seen:
                changed = [k for k, v in now.items() if seen is None or seen.get(k) != v]
                seen = now
                yield _sse("runs", {"runs": now, "changed": changed})
            elif time.monotonic() - beat > _HEARTBEAT_S:
                beat = time.monotonic()
                yield ": keep-alive\n\n"
            await asyncio.sleep(state.settings.poll_interval_s)

    return StreamingResponse(stream(), media_type="text/event-stream", headers=_NO_BUFFER)


@router.get("/models")
def models(request: Request) -> list[dict[str, Any]]:
    """Hugging Face folders under models/: size, architecture, trainforge.json summary."""
    return list_models(_state(request).settings.models_path)


@router.get("/system")
def system(request: Request) -> dict[str, Any]:
    state = _state(request)
    return {**state.system.facts(), "telemetry": state.system.telemetry()}
