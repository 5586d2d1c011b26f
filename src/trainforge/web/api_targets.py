"""The JSON API of cluster targets: the Train Model dialog's Target list, starting a run on a
target, and what the Runs page shows of each run's target (Slurm job, why it waits, the
unreachable badge). Stop and Resume are the runs' own endpoints (`/api/runs/{id}/stop`,
`/resume`); the runner hands a cluster run's to `web.targets`.

Nothing here waits on SSH: the dialog's fields are judged on this machine (the config for
the target's nodes and GPUs, the Slurm options as `trainforge slurm` judges them), and the
submission runs in the background (`TargetRuns.submit`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from pydantic import Field

from trainforge.errors import UserError
from trainforge.web.api import errors_response
from trainforge.web.api_models import ErrorsOut, RunOut, TrainRequest
from trainforge.web.app_state import AppState
from trainforge.web.db import RunRecord
from trainforge.web.dialog import FormErrors, TrainForm, validate_form
from trainforge.web.limits import MAX_NAME

router = APIRouter(prefix="/api/targets")
# What the dialog's run writes on this machine's disk: on a cluster the run folder is in the
# target's project folder instead (its own runs/ and models/).
_LOCAL_ONLY = ("output.dir=", "output.models_dir=")


class TargetTrainRequest(TrainRequest):
    """The Train Model dialog's fields, and where the run executes."""

    target: str = Field(max_length=MAX_NAME, description="A target of the targets file.")
    nodes: int = Field(1, ge=1, le=4096)
    gpus_per_node: int = Field(0, ge=0, le=64, description="0: a CPU job.")
    time: str = Field("01:00:00", max_length=32, description="Slurm time limit, HH:MM:SS.")
    partition: str | None = Field(None, max_length=MAX_NAME, description="Default: the target's.")


def _state(request: Request) -> AppState:
    return request.app.state.trainforge


@router.get("")
def list_targets(request: Request) -> list[dict[str, Any]]:
    """This machine and every cluster target of the targets file (no connection is made)."""
    try:
        return _state(request).targets.choices()
    except UserError as err:  # a broken targets file: said where the list would be
        return [{"name": "local", "where": "this machine", "partition": None, "error": err.line()}]


@router.get("/runs")
def target_runs(request: Request) -> dict[str, dict[str, Any]]:
    """Run id -> its target, Slurm job id, pending reason and unreachable badge."""
    state = _state(request)
    return {r.id: state.targets.view(r) for r in state.registry.list()}


@router.post("/runs", status_code=201, responses={422: {"model": ErrorsOut}})
def start_on_target(request: Request, body: TargetTrainRequest) -> RunOut:
    """Judge the dialog for the target's nodes, then submit it there in the background."""
    state = _state(request)
    fields = body.model_dump()
    where = {k: fields.pop(k) for k in ("target", "nodes", "gpus_per_node", "time", "partition")}
    form = TrainForm(**fields)
    errors, options = _target_problems(state, where)
    if errors:
        return errors_response(errors)  # type: ignore[return-value]
    from trainforge.launch.cli import target_platform

    try:
        platform = target_platform(where["nodes"], where["gpus_per_node"])
        resolved, argv = validate_form(state.settings, platform, form)
    except FormErrors as err:
        return errors_response(err.errors)  # type: ignore[return-value]
    existing = state.registry.get(form.output_name)
    if existing is not None and existing.active:
        return errors_response(  # type: ignore[return-value]
            {"output_name": [f"run {form.output_name} is {existing.status}; pick another name"]}
        )
    options["train_flags"] = _cluster_words(argv[1:])
    problem = _job_problem(state, form.config, options)
    if problem:
        return errors_response({"target": [problem]})  # type: ignore[return-value]
    record = RunRecord(
        id=form.output_name, task=resolved.config.task.kind, config=form.config,
        profile=resolved.profile.name, argv=argv, form=body.model_dump(), target=where["target"],
    )  # fmt: skip
    state.targets.submit(record, form.config, options)
    return RunOut(**state.run_view(record))


def _target_problems(state: AppState, where: dict) -> tuple[dict[str, list[str]], dict]:
    """The Target fields' problems, and the job options they make."""
    from trainforge.launch.slurm import check_name, parse_time

    errors: dict[str, list[str]] = {}
    try:
        known = state.targets.targets()
    except UserError as err:
        return {"target": [err.line()]}, {}
    target = known.get(where["target"])
    if target is None or target.kind != "slurm":
        names = ", ".join(n for n, t in known.items() if t.kind == "slurm") or "none yet"
        errors["target"] = [f"{where['target']} is not a cluster target (known: {names})"]
    for field, check in (
        ("time", lambda: parse_time(where["time"])),
        ("partition", lambda: where["partition"] and check_name("--partition", where["partition"])),
    ):
        try:
            check()
        except UserError as err:
            errors[field] = [err.line()]
    options = {
        "nodes": where["nodes"], "gpus_per_node": where["gpus_per_node"], "time": where["time"],
        "procs_per_node": None if where["gpus_per_node"] else 1,
    }  # fmt: skip
    if where["partition"]:
        options["partition"] = where["partition"]
    return errors, {k: v for k, v in options.items() if v is not None}


def _cluster_words(words: list[str]) -> list[str]:
    """The dialog's train arguments without the `--set`s that name this machine's folders."""
    out, i = [], 0
    while i < len(words):
        if words[i] == "--set" and i + 1 < len(words) and words[i + 1].startswith(_LOCAL_ONLY):
            i += 2
            continue
        out.append(words[i])
        i += 1
    return out


def _job_problem(state: AppState, config: str, options: dict) -> str | None:
    """The job as `trainforge slurm` would build it, judged here (no connection)."""
    from trainforge.config import ConfigError
    from trainforge.launch.cli import build_job

    try:
        build_job(Path(state.settings.root / config), **options)
    except ConfigError as err:  # before UserError, which it is
        return " ".join(err.lines)
    except UserError as err:
        return err.line()
    return None
