"""What one server instance holds: settings, platform, registry, runner, caches, and the
view of a run that both the pages and the JSON API show. The runs it lists are the app's
own (the registry) and those started from the command line (`cli_runs`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainforge.hardware import Platform
from trainforge.runfolder import RunFolder
from trainforge.web.cli_runs import CliRuns, signalable, stop_hint
from trainforge.web.db import RunRecord, RunRegistry
from trainforge.web.run_files import MetricsCache, TelemetrySetting, checkpoints, telemetry_note
from trainforge.web.run_view import run_extras
from trainforge.web.runner import Runner
from trainforge.web.settings import WebSettings, is_trial_id
from trainforge.web.system import SystemView
from trainforge.web.targets import TargetRuns


@dataclass
class AppState:
    settings: WebSettings
    platform: Platform
    registry: RunRegistry
    runner: Runner
    metrics: MetricsCache
    system: SystemView
    cli_runs: CliRuns
    targets: TargetRuns
    telemetry: TelemetrySetting = field(default_factory=TelemetrySetting)
    _views: dict[str, CachedView] = field(default_factory=dict)
    _version: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Entity tags name this server process, so one from before a restart never matches.
    _epoch: str = field(default_factory=lambda: os.urandom(4).hex())

    @classmethod
    def create(
        cls, settings: WebSettings, platform: Platform | None = None, launch: Callable | None = None
    ) -> AppState:
        platform = platform or settings.detect_platform()
        assert settings.db_path is not None
        registry = RunRegistry(settings.db_path)
        state = cls(
            settings=settings,
            platform=platform,
            registry=registry,
            runner=Runner(settings, registry, launch),
            metrics=MetricsCache(),
            system=SystemView(platform, settings.telemetry_interval_s),
            cli_runs=CliRuns(settings),
            targets=TargetRuns(settings, registry),
        )
        state.runner.targets = state.targets
        state.runner.reconcile()
        state.targets.start()
        return state

    def list_runs(self) -> list[RunRecord]:
        """Every run, newest first: the app's own and those started from the command line."""
        records = self.registry.list()
        records += self.cli_runs.list({r.id for r in records})
        return sorted(records, key=lambda r: r.created_at, reverse=True)

    def get_run(self, run_id: str) -> RunRecord | None:
        return self.registry.get(run_id) or self.cli_runs.get(run_id)

    def run_view(self, record: RunRecord) -> dict[str, Any]:
        """A run as the pages and the API show it: the record plus its folder's facts.
        Built again only when the record or one of the folder's files changed (`_stamp`);
        the dict is shared, so callers read it and never change it."""
        return self.cached_view(record).view

    def cached_view(self, record: RunRecord) -> CachedView:
        """The run's view with its entity tag, which changes whenever the view does."""
        folder = self.settings.run_folder(record.id)
        stamp = self._stamp(record, folder)
        cached = self._views.get(record.id)
        if cached is None or cached.stamp != stamp:
            view = self._build(record, folder)
            with self._lock:
                self._version += 1
                etag = f'"{self._epoch}-{self._version}"'
            cached = self._views[record.id] = CachedView(stamp, view, etag)
        return cached

    def _stamp(self, record: RunRecord, folder: RunFolder) -> tuple:
        """What a run view is made of: the record, and the (size, modification time) of each
        file and folder it reads. The metrics file grows with every record, the checkpoints
        folder changes when a checkpoint is renamed into it or removed."""
        paths = [folder.metrics, folder.checkpoints, folder.report, folder.resolved_config]
        paths += [folder.run_json, folder.summary]
        if record.status == "completed" and record.output_model:
            paths.append(self.settings.models_path / record.output_model)
        position = self.runner.position(record.id) if record.status == "queued" else None
        where = self.targets.stamp(record) if record.target else None
        meta = self.registry.meta(record.id)  # the user's name, tags and note
        return (tuple(record.to_dict().values()), meta, position, where, *map(_file_stamp, paths))

    def _build(self, record: RunRecord, folder: RunFolder) -> dict[str, Any]:
        latest = self.metrics.latest(folder)
        train = latest.by_split.get("train", {})
        found = checkpoints(folder)
        view = record.to_dict()
        view.pop("pid_started", None)
        view.pop("queued_at", None)
        view.update(
            step=max((int(r.get("step") or 0) for r in latest.by_split.values()), default=0),
            epoch=train.get("epoch"),
            total_steps=self.cli_runs.total_steps(record.id, record.started_at),
            latest=latest.by_split,
            num_records=latest.count,
            checkpoints=found,
            interrupted_checkpoint=folder.interrupted_checkpoint.name in found,
            report=(f"/runs/{record.id}/report" if folder.report.is_file() else None),
            resumable=record.status == "stopped" or (record.status == "failed" and bool(found)),
            position=self.runner.position(record.id) if record.status == "queued" else None,
            origin=record.form.get("origin", "app"),
            telemetry_note=telemetry_note(record.status, self.telemetry.get(folder)),
            model_ready=self._model_ready(record),
            **self._links(record),
            **self.targets.view(record),
            **run_extras(self.settings, self.registry.meta(record.id), record, folder),
        )
        if record.task == "sweep":
            from trainforge.web.sweeps import sweep_outcome

            view.update(
                zip(("status", "message"), sweep_outcome(self, record.id, record), strict=True)
            )
        if view["origin"] != "app":
            view.update(stop_hint=stop_hint(record), can_stop=self._can_stop(record, folder))
        if is_trial_id(record.id):  # stopped and resumed with its sweep, not on its own
            view.update(stop_hint="", resumable=False)
        return view

    def _links(self, record: RunRecord) -> dict[str, str]:
        """The run's page and the base of its API, by kind: a sweep's page is the sweep's,
        a trial's run is one level down."""
        if record.task == "sweep":
            return {"page": f"/sweeps/{record.id}", "api": f"/api/runs/{record.id}"}
        if is_trial_id(record.id):
            sweep, _, trial = record.id.partition("/")
            return {"page": f"/runs/{record.id}", "api": f"/api/runs/{sweep}/trials/{trial}"}
        return {"page": f"/runs/{record.id}", "api": f"/api/runs/{record.id}"}

    def _can_stop(self, record: RunRecord, folder: RunFolder) -> bool:
        """A command-line run this server can signal (never a sweep's trial: its sweep is
        stopped instead)."""
        return (
            record.status == "running"
            and record.pid is not None
            and not is_trial_id(record.id)
            and signalable(folder, record.pid)
        )

    def _model_ready(self, record: RunRecord) -> bool:
        """A run writes its output model when it completes (never when it fails or stops, and
        a folder left by an earlier run of that name is not this run's)."""
        if record.status != "completed" or not record.output_model:
            return False
        return (self.settings.models_path / record.output_model / "config.json").is_file()


@dataclass
class CachedView:
    """A run view, the stamp it was built from, its entity tag, and (once the status
    endpoint asked) its JSON encoding."""

    stamp: tuple
    view: dict[str, Any]
    etag: str
    body: bytes | None = None


def _file_stamp(path: Path) -> tuple[int, int] | None:
    """(size, modification time in ns) of a file or folder, None when it does not exist."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns
