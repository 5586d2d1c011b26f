"""Logging backends behind one small interface: `log(split, metrics, step, epoch)`,
`log_params(params)` and `close()`; TensorBoard also takes weight histograms.

JSONL (metrics.jsonl, one record per line, flushed each write so a crash loses nothing)
and TensorBoard are on by default; MLflow (a local store unless a tracking URI is set) and
Weights & Biases (offline by default: no key needed) when configured. MLflow's local store
is RUN/mlflow.db (SQLite); browse it with `mlflow ui --backend-store-uri sqlite:///...`.
Secrets never reach a logger: metrics are numbers, and params pass through `scrub`.

Each backend is an entry of `trainforge.registry.LOGGERS` (`LoggerEntry`: a factory and the
`logging.<switch>` that turns it on); `build_loggers` walks the registry, so adding a logger
is one file that registers its entry and is turned on by its switch or by name in
`logging.loggers`; its own options (an `Options` model on the entry) come from
`logging.options.NAME`, read with `cfg.options_for(NAME)`. This module imports no torch (the
schema reads the names).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from trainforge.errors import UserError
from trainforge.observe.secrets import scrub
from trainforge.options import Options
from trainforge.registry import LOGGERS

if TYPE_CHECKING:
    from trainforge.config.schema import LoggingConfig


class MetricLogger(Protocol):
    def log(self, split: str, metrics: dict[str, float], step: int, epoch: float) -> None: ...
    def log_params(self, params: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


def _finite(metrics: dict[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if math.isfinite(v)}


class JsonlLogger:
    """metrics.jsonl, and its chart buckets (`observe.series`) kept beside it as it grows:
    the sidecar is saved every `series.SAVE_EVERY` records and at close, so no reader of a
    long run (the web app's charts, the report) ever reads the whole file."""

    def __init__(self, path: Path) -> None:
        from trainforge.observe import series

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        path.touch()
        self._series = series
        self.buckets = series.load(path)  # after a resume's truncation: the sidecar, caught up
        self._unsaved = 0

    def log(self, split: str, metrics: dict[str, float], step: int, epoch: float) -> None:
        record = {"time": round(time.time(), 3), "split": split, "step": step, "epoch": epoch}
        record.update({k: (v if math.isfinite(v) else None) for k, v in metrics.items()})
        line = json.dumps(record) + "\n"
        try:  # opened per record: no file held open for writing between records, so an
            # administrator's `mount -o remount,ro` of the disk is not refused as busy
            with self.path.open("a", encoding="utf-8") as fh:
                start = fh.tell()  # the end of the file: append mode opens there
                fh.write(line)
        except OSError as err:
            from trainforge.storage import storage_error

            raise storage_error(
                "metrics", self.path, err, len(line), "then resume with --resume RUN"
            ) from None
        if start == self.buckets.offset:
            self.buckets.add(record)
            self.buckets.offset += len(line.encode("utf-8"))
        else:  # another writer appended (a closing test record): fold in its lines too
            self._series.catch_up(self.path, self.buckets)
        self._unsaved += 1
        if self._unsaved >= self._series.SAVE_EVERY:
            self._save()

    def _save(self) -> None:
        self._unsaved = 0
        self._series.write(self.path, self.buckets)

    def log_params(self, params: dict[str, Any]) -> None:
        pass  # the run folder holds config.resolved.yaml

    def close(self) -> None:
        if self._unsaved:
            self._save()


class TensorBoardLogger:
    """TensorBoard events through torch's `SummaryWriter`.

    TensorBoard writes on a thread of its own; a write the disk refuses ends that thread and
    comes back at the next call here, where it becomes the one-line `StorageError` (the
    thread's own traceback is not printed, see `_quiet_writer_thread`)."""

    def __init__(self, log_dir: Path, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        _quiet_writer_thread()
        use_c_checksums()
        self.log_dir = log_dir
        # A resume from step N hides the events an interrupted run wrote after N, so every
        # step appears once, in order.
        self.writer = self._guard(
            lambda: SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)
        )

    def _guard(self, call: Callable[[], Any]) -> Any:
        from trainforge.storage import disk_cause, storage_error

        try:
            return call()
        except Exception as err:
            cause = disk_cause(err)
            if cause is None:
                raise
            raise storage_error(
                "TensorBoard events", self.log_dir, cause, None,
                "then resume with --resume RUN, or set logging.tensorboard=false",
            ) from None  # fmt: skip

    def log(self, split: str, metrics: dict[str, float], step: int, epoch: float) -> None:
        for key, value in metrics.items():
            self._guard(lambda k=key, v=value: self.writer.add_scalar(f"{split}/{k}", v, step))

    def log_params(self, params: dict[str, Any]) -> None:
        text = "\n".join(f"    {k}: {scrub(str(v))}" for k, v in sorted(params.items()))
        self._guard(lambda: self.writer.add_text("config", text, 0))

    def log_histograms(self, model: Any, step: int) -> None:
        # Weights only: at `on_step_end` the optimizer step has already cleared the gradients
        # (zero_grad(set_to_none=True)), so a gradient histogram would never be written.
        for name, param in model.named_parameters():
            values = param.detach().float().cpu()
            self._guard(lambda n=name, v=values: self.writer.add_histogram(f"weights/{n}", v, step))

    def close(self) -> None:
        from trainforge.storage import disk_cause

        try:
            self.writer.close()
        except Exception as err:  # a refusal already reported where it happened
            if disk_cause(err) is None:
                raise


def masked_crc32c_c(data: bytes) -> int:
    """TensorBoard's masked CRC32C of a record, computed in C by Google's `google-crc32c`:
    the same value as TensorBoard's own pure-Python function, over 100 times faster."""
    import google_crc32c

    x = google_crc32c.value(data)
    return (((x >> 15) | (x << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def use_c_checksums() -> bool:
    """Make TensorBoard's record writer checksum in C where `google-crc32c` is installed with
    its C extension (the `track` extra); True when it does. Otherwise TensorBoard's
    pure-Python checksum (a table lookup per byte) stays."""
    try:
        import google_crc32c
        from tensorboard.summary.writer import record_writer
    except ImportError:
        return False
    if google_crc32c.implementation != "c":
        return False
    record_writer.masked_crc32c = masked_crc32c_c
    return True


def _quiet_writer_thread() -> None:
    """Leave out the traceback of TensorBoard's writer thread when a disk refusal ends it:
    TensorBoard raises the same error again at the next call, where it becomes one line."""
    import threading

    from trainforge.storage import disk_cause

    previous = threading.excepthook
    if getattr(previous, "trainforge_quiet", False):
        return

    def hook(args: Any) -> None:
        writer_thread = type(args.thread).__name__ == "_AsyncWriterThread"
        if writer_thread and disk_cause(args.exc_value) is not None:
            return
        previous(args)

    hook.trainforge_quiet = True  # type: ignore[attr-defined]
    threading.excepthook = hook


class MlflowLogger:
    """Params once, metrics as `split/name` at each logging point, to one MLflow run."""

    def __init__(self, cfg: LoggingConfig, run_dir: Path, run_name: str) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient

        from trainforge.runfolder import RunFolder

        # The local default is MLflow's own recommended store: SQLite in the run folder.
        store = RunFolder(Path(run_dir)).mlflow_db.resolve()
        uri = cfg.mlflow_tracking_uri or f"sqlite:///{store}"
        self.client = MlflowClient(tracking_uri=uri)
        # Names are stored too: a token pasted into one is masked like any param.
        name = scrub(cfg.mlflow_experiment)
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = (
            experiment.experiment_id if experiment else self.client.create_experiment(name)
        )
        self.run_id = self.client.create_run(experiment_id, run_name=scrub(run_name)).info.run_id
        self.tracking_uri = uri
        self._mlflow = mlflow

    def log(self, split: str, metrics: dict[str, float], step: int, epoch: float) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(f"{split}/{k}", v, now, step) for k, v in _finite(metrics).items()]
        if batch:
            self.client.log_batch(self.run_id, metrics=batch)

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, scrub(str(v))[:6000]) for k, v in sorted(params.items())]
        for start in range(0, len(items), 100):  # MLflow's batch limit
            self.client.log_batch(self.run_id, params=items[start : start + 100])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class WandbLogger:
    """A W&B run in RUN/wandb (or logging.wandb_dir); offline by default
    (`wandb sync RUN/wandb/offline-run-*`); project, entity, group and mode from the config,
    whose environment layer reads WANDB_PROJECT, WANDB_ENTITY, WANDB_RUN_GROUP, WANDB_MODE."""

    def __init__(self, cfg: LoggingConfig, run_dir: Path, run_name: str) -> None:
        import os

        import wandb

        if cfg.wandb_mode == "online" and not os.environ.get("WANDB_API_KEY"):
            raise UserError(
                "logging.wandb_mode=online needs WANDB_API_KEY in the environment",
                "export WANDB_API_KEY=... (it is never written to any file), or use "
                "logging.wandb_mode=offline",
            )
        # W&B writes DIR/wandb/; the run folder by default, logging.wandb_dir (WANDB_DIR)
        # when set. Every value is passed to wandb.init, never written to os.environ.
        parent = Path(cfg.wandb_dir) if cfg.wandb_dir else run_dir
        (parent / "wandb").mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=scrub(cfg.wandb_project),
            entity=cfg.wandb_entity,
            group=scrub(cfg.wandb_run_group) if cfg.wandb_run_group else None,
            name=scrub(run_name),
            dir=str(parent),
            mode=cfg.wandb_mode,
            reinit="create_new",
            settings=wandb.Settings(
                console="off",
                save_code=False,
                x_disable_stats=True,
                x_disable_meta=True,
                # W&B's own banner and run summary (30 lines) give way to trainforge's line
                # below, unless the user asked for them with WANDB_SILENT / WANDB_QUIET.
                silent=not ({"WANDB_SILENT", "WANDB_QUIET"} & set(os.environ)),
            ),
        )
        self.mode = cfg.wandb_mode
        print(f"W&B: {self.mode} run {self.run.project}/{self.run.name} in {self.folder}")

    @property
    def folder(self) -> Path:
        """The run's W&B folder (what `wandb sync` takes)."""
        return Path(self.run.dir).parent

    def log(self, split: str, metrics: dict[str, float], step: int, epoch: float) -> None:
        data: dict[str, float] = {f"{split}/{k}": v for k, v in _finite(metrics).items()}
        data["trainer/step"] = step
        data["trainer/epoch"] = epoch
        self.run.log(data)

    def log_params(self, params: dict[str, Any]) -> None:
        self.run.config.update(
            {k: scrub(v) if isinstance(v, str) else v for k, v in params.items()},
            allow_val_change=True,
        )

    def close(self) -> None:
        folder = self.folder
        self.run.finish()
        if self.mode == "offline":
            print(f"W&B: upload the offline run with: wandb sync {folder}")


@dataclass(frozen=True)
class LoggerEntry:
    """One logging backend: how to make it and what turns it on."""

    description: str
    # (logging config, run folder, run name, resume step or None) -> MetricLogger
    factory: Callable[[LoggingConfig, Path, str, int | None], MetricLogger]
    switch: str | None = None  # the `logging.<switch>` boolean that turns it on
    # Installed with this pip extra; when the package is missing, on_missing says whether
    # the run goes on without the logger ("skip", with a line) or stops ("stop", one line).
    extra: str | None = None
    on_missing: str = "stop"
    options: type[Options] | None = None  # what `logging.options.NAME` takes (None: nothing)


def build_loggers(
    cfg: LoggingConfig, run_dir: Path, run_name: str = "run", resume_step: int | None = None
) -> list[MetricLogger]:
    """The loggers turned on by a `logging` switch or named in `logging.loggers`, in
    registration order; `resume_step`: the run continues after that step."""
    loggers: list[MetricLogger] = []
    for name, entry in LOGGERS.items():
        if not (name in cfg.loggers or (entry.switch and getattr(cfg, entry.switch))):
            continue
        try:
            loggers.append(entry.factory(cfg, run_dir, run_name, resume_step))
        except ImportError as error:
            install = f"pip install 'trainforge[{entry.extra}]'" if entry.extra else "install it"
            missing = _why_missing(name, error)
            if entry.on_missing == "skip":
                print(f"{name} logging off: its package {missing} ({install})")
                continue
            by_name = name in cfg.loggers
            on = f"logging.loggers has {name}" if by_name else f"logging.{entry.switch} is on"
            off = (
                "remove it from logging.loggers" if by_name else f"set logging.{entry.switch}=false"
            )
            fix = f"{install}, or {off}"
            raise UserError(f"{on} but the {name} package {missing}", fix) from None
    return loggers


def _why_missing(name: str, error: ImportError) -> str:
    """'is not installed', or, where the package is there but one of its own imports fails
    (a dependency missing), that import's message: the fix differs."""
    if (error.name or name).split(".")[0] == name:
        return "is not installed"
    return f"is installed but could not be imported ({error})"


def _jsonl(cfg: LoggingConfig, run_dir: Path, run_name: str, resume: int | None) -> JsonlLogger:
    from trainforge.runfolder import RunFolder

    return JsonlLogger(RunFolder(run_dir).metrics)


def _tensorboard(
    cfg: LoggingConfig, run_dir: Path, run_name: str, resume: int | None
) -> TensorBoardLogger:
    from trainforge.runfolder import RunFolder

    return TensorBoardLogger(RunFolder(run_dir).tensorboard, None if resume is None else resume + 1)


LOGGERS.register(
    "jsonl",
    LoggerEntry("metrics.jsonl in the run folder, one record per line", _jsonl, "jsonl"),
)
LOGGERS.register(
    "tensorboard",
    LoggerEntry(
        "TensorBoard events in RUN/tensorboard", _tensorboard, "tensorboard", "track", "skip"
    ),
)
LOGGERS.register(
    "mlflow",
    LoggerEntry(
        "MLflow run (SQLite store RUN/mlflow.db unless a tracking URI is set)",
        lambda cfg, run_dir, run_name, resume: MlflowLogger(cfg, run_dir, run_name),
        "mlflow",
        "track",
    ),
)
LOGGERS.register(
    "wandb",
    LoggerEntry(
        "Weights & Biases run (offline unless logging.wandb_mode=online)",
        lambda cfg, run_dir, run_name, resume: WandbLogger(cfg, run_dir, run_name),
        "wandb",
        "track",
    ),
)


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}: config params as trackers want them."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
