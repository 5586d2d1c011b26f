"""The JSON API's request and answer models (the OpenAPI document's schemas): the Train
Model dialog's fields with their length caps (`limits`), and a run as the API shows it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trainforge.registry import TASKS
from trainforge.web.limits import MAX_ITEM, MAX_ITEMS, MAX_NAME, MAX_PATH


class TrainRequest(BaseModel):
    """The Train Model dialog's fields; empty ones keep the run config's value."""

    model_config = ConfigDict(extra="forbid")
    config: str = Field(
        max_length=MAX_PATH,
        description="Run config file under config/, e.g. config/vit_digits.yaml.",
    )
    output_name: str = Field(
        max_length=MAX_NAME,
        description="Run folder name (and output model name for a task that fine-tunes a "
        "base model).",
    )
    # Any registered task kind (a plugin's too), checked against the registry below.
    task: str | None = Field(
        None, max_length=MAX_NAME, description="A registered task kind (task.kind)."
    )
    base_model: str | None = Field(
        None,
        max_length=MAX_NAME,
        description="For a task that fine-tunes a base model: a folder name under models/, or a "
        "Hugging Face id (org/name[@revision]) in the Hugging Face cache.",
    )
    dataset: str | None = Field(
        None,
        max_length=MAX_PATH,
        description="An image dataset (digits/cifar10/image-folder), or the records file of "
        "a task that fine-tunes a base model.",
    )
    epochs: float | None = None
    learning_rate: float | None = None
    batch_size: int | Literal["auto"] | None = None
    profile: str = Field("auto", max_length=MAX_NAME)
    overrides: list[Annotated[str, Field(max_length=MAX_ITEM)]] = Field(
        default_factory=list, max_length=MAX_ITEMS, description="KEY=VALUE config overrides."
    )
    overwrite: bool = False

    @field_validator("task")
    @classmethod
    def _known_task(cls, value: str | None) -> str | None:
        # The registry's one line (closest name, known names) becomes the task field's error.
        if value is not None and value not in TASKS:
            raise ValueError(TASKS.unknown_message(value))
        return value


class RunOut(BaseModel):
    id: str
    task: str
    config: str
    profile: str
    status: Literal["queued", "running", "stopping", "stopped", "completed", "failed", "cancelled"]
    position: int | None = Field(
        None, description="Place in the queue (1: next); None unless queued."
    )
    message: str | None
    pid: int | None
    exit_code: int | None
    attempts: int
    argv: list[str]
    output_model: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    step: int
    epoch: float | None
    total_steps: int | None
    latest: dict[str, dict[str, Any]]
    num_records: int
    checkpoints: list[str]
    interrupted_checkpoint: bool
    report: str | None
    resumable: bool
    origin: str = Field(
        "app", description="'app', or 'command line' for a run `trainforge train` started."
    )
    model_ready: bool = Field(False, description="The output model folder has been written.")
    target: str = Field("local", description="Where the run executes: local or a cluster target.")
    job_id: str = Field("", description="The Slurm job id of a cluster run.")
    reason: str = Field("", description="squeue's reason while a cluster run is pending.")
    unreachable: str = Field("", description="The target's last connection problem (a badge).")
    telemetry_note: str = Field("", description="What stands in for telemetry while none came.")
    page: str = Field("", description="The run's page (a sweep's: the sweep page).")
    api: str = Field("", description="The base of the run's API (status, events, log).")
    stop_hint: str = Field("", description="A command-line run: how to stop it where it runs.")
    can_stop: bool = Field(
        False, description="A command-line run this server can signal (same user): Stop works."
    )
    display_name: str = Field("", description="The name the user gave the run (else its id).")
    tags: list[str] = Field(default_factory=list, description="The user's tags.")
    note: str = Field("", description="The user's note.")
    final: dict[str, Any] | None = Field(
        None, description="A run that ended: final metrics, best metric, steps, time (s)."
    )
    folder: str = Field("", description="The run folder, as a path under the project.")
    files: list[str] = Field(
        default_factory=list, description="Run files readable at /runs/ID/files/NAME."
    )


class ErrorsOut(BaseModel):
    detail: list[dict[str, Any]]
    errors: dict[str, list[str]]
