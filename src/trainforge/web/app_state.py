"""What one server instance holds: settings, platform, registry, runner, caches, and the
view of a run that both the pages and the JSON API show. The runs it lists are the app's
own (the registry) and those started from the command line (`cli_runs`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainforge.hardware import Platform
from trainforge.web.cli_runs import CliRuns
from trainforge.web.db import RunRecord, RunRegistry
from trainforge.web.run_files import (
    INTERRUPTED_CHECKPOINT,
    MetricsCache,
    TelemetrySetting,
    checkpoints,
    telemetry_note,
    total_steps,
)
from trainforge.web.runner import Runner
from trainforge.web.settings import WebSettings
from trainforge.web.system import SystemView


@dataclass
class AppState:
    settings: WebSettings
    platform: Platform
    registry: RunRegistry
    runner: Runner
    metrics: MetricsCache
    system: SystemView
    cli_runs: CliRuns
    telemetry: TelemetrySetting = field(default_factory=TelemetrySetting)
    _steps: dict[tuple[str, int], int] = field(default_factory=dict)

    @classmethod
    def create(cls, settings: WebSettings, platform: Platform | None = None) -> AppState:
        platform = platform or settings.detect_platform()
        assert settings.db_path is not None
        registry = RunRegistry(settings.db_path)
        state = cls(
            settings=settings,
            platform=platform,
            registry=registry,
            runner=Runner(settings, registry),
            metrics=MetricsCache(),
            system=SystemView(platform, settings.telemetry_interval_s),
            cli_runs=CliRuns(settings),
        )
        state.runner.reconcile()
        return state

    def list_runs(self) -> list[RunRecord]:
        """Every run, newest first: the app's own and those started from the command line."""
        records = self.registry.list()
        records += self.cli_runs.list({r.id for r in records})
        return sorted(records, key=lambda r: r.created_at, reverse=True)

    def get_run(self, run_id: str) -> RunRecord | None:
        return self.registry.get(run_id) or self.cli_runs.get(run_id)

    def run_view(self, record: RunRecord) -> dict[str, Any]:
        """A run as the pages and the API show it: the record plus its folder's facts."""
        folder = self.settings.run_folder(record.id)
        latest = self.metrics.latest(folder)
        train = latest.by_split.get("train", {})
        found = checkpoints(folder)
        view = record.to_dict()
        view.pop("pid_started", None)
        view.pop("queued_at", None)
        view.update(
            step=max((int(r.get("step") or 0) for r in latest.by_split.values()), default=0),
            epoch=train.get("epoch"),
            total_steps=self._total_steps(record),
            latest=latest.by_split,
            num_records=latest.count,
            checkpoints=found,
            interrupted_checkpoint=INTERRUPTED_CHECKPOINT in found,
            report=(f"/runs/{record.id}/report" if folder.report.is_file() else None),
            resumable=record.status == "stopped" or (record.status == "failed" and bool(found)),
            position=self.runner.position(record.id) if record.status == "queued" else None,
            origin=record.form.get("origin", "app"),
            telemetry_note=telemetry_note(record.status, self.telemetry.get(folder)),
            model_ready=self._model_ready(record),
        )
        return view

    def _model_ready(self, record: RunRecord) -> bool:
        """A run writes its output model when it completes (never when it fails or stops, and
        a folder left by an earlier run of that name is not this run's)."""
        if record.status != "completed" or not record.output_model:
            return False
        return (self.settings.models_path / record.output_model / "config.json").is_file()

    def _total_steps(self, record: RunRecord) -> int | None:
        # Read from the log once per attempt: the status endpoint is polled often.
        key = (record.id, record.attempts)
        if key not in self._steps:
            found = total_steps(self.runner.log_path(record.id)) or self.cli_runs.total_steps(
                record.id
            )
            if found is None:
                return None
            self._steps[key] = found
        return self._steps[key]
