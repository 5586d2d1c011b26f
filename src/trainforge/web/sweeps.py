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
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, Field

from trainforge import __version__
from trainforge.errors import UserError
from trainforge.profiles import list_profiles
from trainforge.runfolder import RunFolder
from trainforge.sweep.study import SweepFolder
from trainforge.web.db import RunRecord
from trainforge.web.limits import (
    MAX_ITEM,
    MAX_ITEMS,
    MAX_NAME,
    MAX_PATH,
    MAX_TEXT,
    cut,
    yaml_alias,
)
from trainforge.web.lookup import trial_record
from trainforge.web.paths import (
    PathRefused,
    config_file,
    config_files,
    override_problem,
    setting_problem,
    shown,
)
from trainforge.web.settings import check_name

HERE = Path(__file__).parent
router = APIRouter(prefix="/api")


class SweepRequest(BaseModel):
    config: str = Field(max_length=MAX_PATH, description="Run config file under config/.")
    space: str = Field(
        max_length=MAX_TEXT, description="The space file's YAML text (see docs/sweeps.md)."
    )
    trials: int = Field(ge=1, le=10000, description="Trials in the study.")
    name: str = Field(max_length=MAX_NAME, description="The sweep folder's name under runs/.")
    pruner: Literal["median", "asha", "none"] = Field("median", description="The pruner.")
    args: list[Annotated[str, Field(max_length=MAX_ITEM)]] = Field(
        default_factory=list, max_length=MAX_ITEMS, description="Train flags for every trial."
    )
    target: str = Field(
        "local", max_length=MAX_NAME, description="local, or a cluster target: a job array."
    )
    time: str = Field("01:00:00", max_length=32, description="A target's Slurm time limit.")
    parallel: int = Field(2, ge=1, le=256, description="A target's array tasks at once.")


# A trial that ended; a sweep whose trials all ended with none COMPLETE found nothing.
_ENDED = ("COMPLETE", "PRUNED", "FAIL")
NO_TRIAL_COMPLETED = "no trial completed"


def _state(request: Request) -> Any:
    return request.app.state.trainforge


def _plain(name: str) -> str:
    try:
        return check_name(name, "sweep name")
    except UserError as err:
        raise HTTPException(400, err.line()) from None


def _sweep_folder(state: Any, name: str) -> Any:
    """The sweep's folder here, or for a sweep on a cluster target its local mirror."""
    from trainforge.sweep.study import SweepFolder

    mirror = state.settings.mirrors.get(_plain(name))
    return SweepFolder(mirror or state.settings.runs_path / name)


def is_sweep(state: Any, name: str) -> bool:
    """A sweep's folder, or a sweep the app queued (its folder is made when it starts)."""
    record = state.registry.get(name)
    return _sweep_folder(state, name).is_sweep() or (record is not None and record.task == "sweep")


def sweep_view(state: Any, name: str) -> dict[str, Any]:
    """A sweep's record, its trials (the status table's rows) and their validation curves
    (each as the chart's buckets, `compare.bucketed_curves`)."""
    from trainforge.sweep.summary import rows
    from trainforge.web.compare import bucketed_curves

    folder = _sweep_folder(state, name)
    record = state.registry.get(name)
    if not folder.is_sweep():
        if record is None or record.task != "sweep":
            raise HTTPException(404, f"no sweep named {name}")
        return {"name": name, "metric": "", "direction": "", "trials_total": None,
                "pruner": "", "status": record.status, "message": record.message,
                "trials": []}  # fmt: skip  # queued: its folder is made when it starts
    found, request = rows(folder)
    status, message = outcome(record, found, request["trials"])
    metric = request["metric"]
    trials = [
        {**{k: getattr(r, k) for k in ("trial", "number", "state", "value", "steps", "best",
                                       "reason")},
         "params": r.params,
         "page": f"/runs/{name}/{r.trial}",
         "curve": bucketed_curves(RunFolder(folder.path / r.trial)).get(f"val_{metric}")}
        for r in found
    ]  # fmt: skip
    return {
        "name": name, "metric": metric, "direction": request["direction"],
        "trials_total": request["trials"], "pruner": request["pruner"],
        "status": status, "message": message, "trials": trials,
    }  # fmt: skip


def outcome(record: RunRecord | None, found: list[Any], total: int) -> tuple[str, str | None]:
    """(status, message) of a sweep: its queue entry's, except that a sweep that ended with
    no trial COMPLETE (every one failed or was pruned) has failed, whatever its process
    printed or returned. Read from the trials' states in the journal."""
    status = record.status if record else "not started here"
    message = record.message if record else None
    states = [r.state for r in found]
    if record is not None:
        ended = status in ("completed", "failed")
    else:
        ended = len(states) >= total and all(s in _ENDED for s in states)
    if ended and "COMPLETE" not in states:
        return "failed", NO_TRIAL_COMPLETED
    return status, message


def sweep_outcome(state: Any, name: str, record: RunRecord | None) -> tuple[str, str | None]:
    """`outcome` of the sweep `name` without its curves, for the lists. The journal is read
    again only when it or the queue entry changed: the Sweeps page asks every 2 s."""
    from trainforge.sweep.summary import rows

    folder = _sweep_folder(state, name)
    plain = (record.status, record.message) if record else ("not started here", None)
    if (record is not None and record.active) or not folder.is_sweep():
        return plain
    try:
        info = folder.journal.stat()
    except OSError:
        return plain
    stamp = (info.st_size, info.st_mtime_ns, plain)
    cached = _OUTCOMES.get(folder.path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        found, request = rows(folder)
    except (OSError, ValueError, UserError):
        return plain
    _OUTCOMES[folder.path] = (stamp, outcome(record, found, request["trials"]))
    return _OUTCOMES[folder.path][1]


_OUTCOMES: dict[Path, tuple[tuple, tuple[str, str | None]]] = {}


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
        status = sweep_outcome(state, name, record)[0]
        out.append({"name": name, "status": status, "page": f"/sweeps/{name}"})
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
    config, problems = _request_problems(state.settings, body)
    problems += _target_problems(state, body)
    if problems:  # nothing was read from a path the rule refused
        return JSONResponse({"errors": [cut(line) for line in problems]}, status_code=422)
    space_path = state.settings.logs_path.parent / "sweeps" / f"{name}.yaml"
    space_path.parent.mkdir(parents=True, exist_ok=True)
    space_path.write_text(body.space, encoding="utf-8")
    own_args = ["--space", str(space_path), "--trials", str(body.trials), "--name", name,
                "--pruner", body.pruner]  # fmt: skip
    if body.target != "local":
        return _start_on_target(state, body, name, space_path)
    argv = [body.config, *own_args, *body.args]
    try:
        own, rest = split_args([str(config), *own_args, *body.args])
        prepare(own, rest)  # the config by its checked path; the rest as the run reads it
    except (UserError, OSError, ValueError) as err:
        space_path.unlink(missing_ok=True)  # a refused sweep leaves nothing behind
        lines = err.line().splitlines() if isinstance(err, UserError) else [str(err)]
        lines = [cut(line.replace(str(config), body.config)) for line in lines]
        return JSONResponse({"errors": lines}, status_code=422)
    record = RunRecord(id=name, task="sweep", config=body.config, profile="auto", argv=argv,
                       form=body.model_dump())  # fmt: skip
    state.runner.submit(record)
    return JSONResponse(sweep_view(state, name) if _sweep_folder(state, name).is_sweep()
                        else {"name": name, "status": record.status}, status_code=201)  # fmt: skip


def _target_problems(state: Any, body: SweepRequest) -> list[str]:
    """The Target fields' problems (judged for a local sweep too: every field is checked)."""
    from trainforge.launch.slurm import parse_time

    problems = []
    try:
        known = state.targets.targets()
    except UserError as err:
        known, problems = {}, [err.line()]
    if body.target != "local" and body.target not in known:
        problems.append(f"target {shown(body.target)}: not in the targets file")
    try:
        parse_time(body.time)
    except UserError as err:
        problems.append(err.line())
    return problems


def _start_on_target(state: Any, body: SweepRequest, name: str, space: Path) -> JSONResponse:
    """The sweep as a job array on a cluster target (`trainforge sweep --slurm --submit
    --target`): checked here like any sweep, sent in the background."""
    from trainforge.sweep.cli import prepare, split_args

    root = state.settings.root
    if not space.is_relative_to(root):  # copied to the same relative place on the cluster
        space.unlink(missing_ok=True)
        return JSONResponse({"errors": ["a sweep on a target needs the server's database "
                                        "inside the project folder (serve --db)"]},
                            status_code=422)  # fmt: skip
    argv = [body.config, "--space", str(space.relative_to(root)), "--trials", str(body.trials),
            "--name", name, "--pruner", body.pruner, *body.args, "--slurm", "--time", body.time,
            "--parallel", str(body.parallel), "--submit"]  # fmt: skip
    try:
        own, rest = split_args(argv)
        prepare(own, rest)
    except UserError as err:
        space.unlink(missing_ok=True)
        return JSONResponse({"errors": [cut(x) for x in err.line().splitlines()]},
                            status_code=422)  # fmt: skip
    record = RunRecord(id=name, task="sweep", config=body.config, profile="auto", argv=argv,
                       form=body.model_dump(), target=body.target)  # fmt: skip
    state.targets.submit_sweep(record, argv)
    return JSONResponse({"name": name, "status": record.status, "target": body.target},
                        status_code=201)  # fmt: skip


def _request_problems(settings: Any, body: SweepRequest) -> tuple[Path | None, list[str]]:
    """(the run config's checked path, every problem found before anything is read: a
    path the web app's rule refuses (the config, any path the train flags name), a YAML
    alias in the space or a flag)."""
    from trainforge.config import flags as run_flags

    try:
        config = config_file(settings, body.config)
    except PathRefused as err:
        return None, [str(err)]
    aliased = [a for a in body.args if yaml_alias(a)]
    if yaml_alias(body.space) or aliased:
        where = "the space" if not aliased else f"train flag {shown(aliased[0])}"
        return config, [f"{where}: a YAML alias (*name) is not taken here; write the value out"]
    try:
        args = run_flags.parse(list(body.args))
    except UserError as err:
        return config, [f"train flags: {err.line()}"]
    problems = []
    if args.config is not None or args.files:
        problems.append("train flags: the run config belongs in Config, not among the flags")
    if args.profile is not None and args.profile not in ("auto", *list_profiles()):
        problems.append(f"train flags: --profile {shown(args.profile)}: use a profile's name")
    for key, value in args.flags.items():
        problems.append(setting_problem(settings, key, value, "train flags"))
    for item in args.overrides:
        problems.append(override_problem(settings, item, "train flags --set"))
    return config, [p for p in problems if p]


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

    def targets() -> list[dict[str, Any]]:
        """The Start form's Target list (a broken targets file leaves this machine only)."""
        try:
            return state.targets.choices()
        except UserError:
            return [{"name": "local", "where": "this machine"}]

    @app.get("/sweeps", response_class=HTMLResponse, include_in_schema=False)
    def sweeps_page(request: Request) -> HTMLResponse:
        configs = config_files(state.settings)  # the path rule's: no symlink out of config/
        return page(
            request, "sweeps.html", "sweeps", configs=configs, current="", targets=targets()
        )

    @app.get("/sweeps/{name}", response_class=HTMLResponse, include_in_schema=False)
    def sweep_page(request: Request, name: str) -> HTMLResponse:
        """The Sweeps page opened on one sweep (the Runs list links a sweep here)."""
        if not is_sweep(state, _plain(name)):
            raise HTTPException(404, f"no sweep named {name}")
        configs = config_files(state.settings)
        return page(
            request, "sweeps.html", "sweeps", configs=configs, current=name, targets=targets()
        )

    @app.get("/runs/{sweep}/{trial}", response_class=HTMLResponse, include_in_schema=False)
    def trial_page(request: Request, sweep: str, trial: str) -> HTMLResponse:
        """A sweep's trial on the run page (live while it trains)."""
        record = trial_record(state, sweep, trial)
        return page(request, "run.html", "runs", run=state.run_view(record), sweep=sweep)

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
