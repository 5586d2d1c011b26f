"""The Sweeps page and its API: start a sweep through the training queue, watch its trials and
their validation curves, stop it; and the Compare runs view (`web.compare`) beside it.

A sweep started here is a queue entry like a training run (task `sweep`, id = the sweep's
name): the runner starts `trainforge sweep CONFIG --space FILE --trials N --name NAME ...`
when a training slot is free, so a sweep and single runs never train at once on one device
beyond `--max-parallel`. Stop sends the sweep SIGINT (each running trial saves a checkpoint);
Resume queues the same command again, which continues the sweep. The space file the form
gives is kept beside the server's database (`sweeps/NAME.yaml`). What the page shows is read
from the sweep folder (`sweep.summary`), never from the sweep's printed lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, Field

from trainforge import __version__
from trainforge.errors import UserError
from trainforge.runfolder import RunFolder
from trainforge.sweep.study import SweepFolder
from trainforge.web.db import RunRecord
from trainforge.web.settings import check_name

HERE = Path(__file__).parent
router = APIRouter(prefix="/api")


class SweepRequest(BaseModel):
    config: str = Field(description="Run config file, relative to the server's folder.")
    space: str = Field(description="The space file's YAML text (see docs/sweeps.md).")
    trials: int = Field(ge=1, le=10000, description="Trials in the study.")
    name: str = Field(description="The sweep folder's name under the runs folder.")
    pruner: Literal["median", "asha", "none"] = Field("median", description="The pruner.")
    args: list[str] = Field(default_factory=list, description="Train flags for every trial.")


def _state(request: Request) -> Any:
    return request.app.state.trainforge


def _plain(name: str) -> str:
    try:
        return check_name(name, "sweep name")
    except UserError as err:
        raise HTTPException(400, err.line()) from None


def _sweep_folder(state: Any, name: str) -> Any:
    from trainforge.sweep.study import SweepFolder

    return SweepFolder(state.settings.runs_path / _plain(name))


def sweep_view(state: Any, name: str) -> dict[str, Any]:
    """A sweep's record, its trials (the status table's rows) and their validation curves."""
    from trainforge.sweep.report import curves
    from trainforge.sweep.summary import rows

    folder = _sweep_folder(state, name)
    if not folder.is_sweep():
        raise HTTPException(404, f"no sweep named {name}")
    record = state.registry.get(name)
    found, request = rows(folder)
    metric = request["metric"]
    trials = [
        {**{k: getattr(r, k) for k in ("trial", "number", "state", "value", "steps", "best",
                                       "reason")},
         "params": r.params,
         "curve": curves(RunFolder(folder.path / r.trial)).get(f"val_{metric}", [])}
        for r in found
    ]  # fmt: skip
    return {
        "name": name, "metric": metric, "direction": request["direction"],
        "trials_total": request["trials"], "pruner": request["pruner"],
        "status": record.status if record else "not started here",
        "message": record.message if record else None, "trials": trials,
    }  # fmt: skip


@router.get("/sweeps")
def list_sweeps(request: Request) -> list[dict[str, Any]]:
    """Every sweep folder under the runs folder, with its queue status when started here."""
    state = _state(request)
    root = state.settings.runs_path
    request = SweepFolder(root).request.name  # a sweep folder holds its request
    found = sorted(p.parent.name for p in root.glob(f"*/{request}")) if root.is_dir() else []
    out = []
    for name in found:
        record = state.registry.get(name)
        out.append({"name": name, "status": record.status if record else "not started here"})
    return out


@router.get("/sweeps/{name}", responses={404: {}})
def get_sweep(request: Request, name: str) -> dict[str, Any]:
    return sweep_view(_state(request), name)


@router.post("/sweeps", status_code=201, responses={409: {}, 422: {}})
def start_sweep(request: Request, body: SweepRequest) -> JSONResponse:
    """Check the space and the config (every problem, one line each), then queue the sweep."""
    from trainforge.sweep.cli import prepare, split_args

    state = _state(request)
    name = _plain(body.name)
    existing = state.registry.get(name)
    if existing is not None and existing.active:
        raise HTTPException(409, f"sweep {name} is {existing.status}")
    space_path = state.settings.logs_path.parent / "sweeps" / f"{name}.yaml"
    space_path.parent.mkdir(parents=True, exist_ok=True)
    space_path.write_text(body.space, encoding="utf-8")
    argv = [body.config, "--space", str(space_path), "--trials", str(body.trials),
            "--name", name, "--pruner", body.pruner, *body.args]  # fmt: skip
    try:
        own, rest = split_args(argv)
        prepare(own, rest)  # reads files relative to the server's folder, as the run will
    except (UserError, OSError, ValueError) as err:
        space_path.unlink(missing_ok=True)  # a refused sweep leaves nothing behind
        lines = err.line().splitlines() if isinstance(err, UserError) else [str(err)]
        return JSONResponse({"errors": lines}, status_code=422)
    record = RunRecord(id=name, task="sweep", config=body.config, profile="auto", argv=argv,
                       form=body.model_dump())  # fmt: skip
    state.runner.submit(record)
    return JSONResponse(sweep_view(state, name) if _sweep_folder(state, name).is_sweep()
                        else {"name": name, "status": record.status}, status_code=201)  # fmt: skip


@router.post("/sweeps/{name}/stop", responses={404: {}, 409: {}})
def stop_sweep(request: Request, name: str) -> dict[str, Any]:
    state = _state(request)
    if state.registry.get(name) is None:
        raise HTTPException(404, f"sweep {name} was not started here")
    try:
        record = state.runner.stop(name)
    except UserError as err:
        raise HTTPException(409, err.line()) from None
    return {"name": name, "status": record.status}


def add_pages(app: Any, state: Any) -> None:
    """/sweeps, /sweeps/NAME/report and /compare, rendered with the app's base page."""
    from trainforge.web.compare import add_compare

    templates = Jinja2Templates(directory=HERE / "templates")

    def page(request: Request, name: str, active: str, **context: Any) -> HTMLResponse:
        context.update(active=active, version=__version__, platform=state.platform)
        return templates.TemplateResponse(request, name, context)

    @app.get("/sweeps", response_class=HTMLResponse, include_in_schema=False)
    def sweeps_page(request: Request) -> HTMLResponse:
        configs = sorted(str(p.relative_to(state.settings.root))
                         for p in state.settings.config_path.glob("*.y*ml"))  # fmt: skip
        return page(request, "sweeps.html", "sweeps", configs=configs)

    @app.get("/sweeps/{name}/report", include_in_schema=False)
    def sweep_report(name: str) -> FileResponse:
        from trainforge.sweep.report import write_report
        from trainforge.sweep.summary import rows

        folder = _sweep_folder(state, name)
        if not folder.is_sweep():
            raise HTTPException(404, f"no sweep named {name}")
        found, request = rows(folder)
        return FileResponse(write_report(folder, found, request), media_type="text/html")

    add_compare(app, state, page)
