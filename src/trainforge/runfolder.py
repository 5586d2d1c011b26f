"""The run folder is the run: its layout, `run.json`, the lock, and the choice of resume point.

`runs/<name>/` holds everything one run wrote: `run.json` (written at start: the recipe as
given — the config file's data, the flags, the profile asked for — with total steps, steps
per epoch, world size and the profile used), `config.resolved.yaml`, `checkpoints/`,
`metrics.jsonl`, `tensorboard/`, `summary.json`, the final model (`model.safetensors`, or a
causal-lm run's `model/` and `adapter/` folders), the report (`report.html`, its plots in
`report/`), `eval/confusion.json`, the exports (`export/`), the profiler traces
(`profiler/`) and MLflow's local store (`mlflow.db`). Because the recipe is recorded,
`trainforge train --resume runs/NAME` continues exactly that run with nothing else on the
command line. Every other module reads and writes the folder through this one (checkpoint
folders and their files through `trainforge.engine.checkpoint`). The names are spelled here
and there only: `tests/test_architecture.py` takes every name from this class's properties
and the checkpoint module's name table, and fails on a literal of one elsewhere.

A lock (an `fcntl.flock` on the folder, held for the life of the training process through
`RunFolder.hold()`) keeps two trainings out of one folder; taking it writes nothing, so a
refused start leaves the folder untouched. The kernel drops the lock when its process
dies, kill -9 included, so a stale lock is simply taken over; `.lock` names the holder's
PID once the run writes. The filelock package was considered: it adds nothing over flock
here and its soft-lock fallback cannot tell a live holder from a stale one. No torch
import here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trainforge.errors import UserError

RUN_JSON = "run.json"
RUN_JSON_FORMAT = 1
SUMMARY = "summary.json"  # a run's summary, and an export artifact's beside its files
REPORT = "report.html"  # a run's report, and a sweep's beside its trials


def summary_file(folder: Path) -> Path:
    """The summary.json of a run folder or of an export artifact's folder."""
    return Path(folder) / SUMMARY


@dataclass(frozen=True)
class RunFolder:
    path: Path

    # ------------------------------------------------------------------ layout
    @property
    def name(self) -> str:
        return self.path.name

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def interrupted_checkpoint(self) -> Path:
        """The checkpoint the trainer saves when a signal stops it."""
        return self.checkpoints / "checkpoint_interrupted"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def metric_buckets(self) -> Path:
        """The charts' min/max/last buckets of metrics.jsonl (`observe.series`)."""
        return self.path / "metrics.buckets.json"

    @property
    def tensorboard(self) -> Path:
        return self.path / "tensorboard"

    @property
    def resolved_config(self) -> Path:
        return self.path / "config.resolved.yaml"

    @property
    def run_json(self) -> Path:
        return self.path / RUN_JSON

    @property
    def summary(self) -> Path:
        return summary_file(self.path)

    @property
    def model(self) -> Path:
        return self.path / "model.safetensors"

    @property
    def report(self) -> Path:
        return self.path / REPORT

    @property
    def report_images(self) -> Path:
        """The report's PNG plots, beside report.html."""
        return self.path / "report"

    @property
    def report_log(self) -> Path:
        """The output of a report written by a detached child process."""
        return self.path / "report.log"

    @property
    def eval_dir(self) -> Path:
        return self.path / "eval"

    @property
    def confusion(self) -> Path:
        """The validation confusion matrix of a classification run."""
        return self.eval_dir / "confusion.json"

    @property
    def export_dir(self) -> Path:
        """Where `trainforge export` puts its artifacts by default."""
        return self.path / "export"

    @property
    def process_file(self) -> Path:
        """The running start's process record (`hardware.oom`): left by a killed start."""
        return self.path / ".process.json"

    @property
    def lock_file(self) -> Path:
        return self.path / ".lock"

    @property
    def profiler(self) -> Path:
        """The PyTorch profiler's traces (`logging.profile_steps`)."""
        return self.path / "profiler"

    @property
    def mlflow_db(self) -> Path:
        """MLflow's local SQLite store when no `logging.mlflow_tracking_uri` is given."""
        return self.path / "mlflow.db"

    @property
    def hf_model(self) -> Path:
        """A causal-lm run's Hugging Face model folder (`save_pretrained` layout)."""
        return self.path / "model"

    @property
    def hf_adapter(self) -> Path:
        """A causal-lm run's LoRA adapter folder (peft's `save_pretrained` layout)."""
        return self.path / "adapter"

    # ------------------------------------------------------------------ state
    def is_run(self) -> bool:
        """Whether this folder holds a recorded run (its run.json)."""
        return self.run_json.is_file()

    def occupied(self) -> list[str]:
        """What of an earlier run is here (empty: a fresh run may start)."""
        found = []
        if self.checkpoints.is_dir() and any(
            p.is_dir() and not p.name.startswith(".") for p in self.checkpoints.iterdir()
        ):
            found.append("checkpoints")
        for label, path in (("metrics", self.metrics), ("TensorBoard events", self.tensorboard)):
            if path.exists():
                found.append(label)
        if self.is_run():
            found.append(RUN_JSON)
        return found

    def clear(self) -> None:
        """--overwrite: remove the earlier run's files (the lock file stays: it is ours)."""
        if not self.path.is_dir():
            return
        for item in self.path.iterdir():
            if item == self.lock_file:
                continue
            if item.is_dir() and not item.is_symlink():
                shutil.rmtree(item)
            else:
                item.unlink()

    def read_run(self) -> dict[str, Any]:
        try:
            data = json.loads(self.run_json.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise UserError(
                f"{self.run_json}: cannot read the run record ({err})",
                f"name the config too: trainforge train CONFIG --resume {self.path}",
            ) from None
        if not isinstance(data, dict) or data.get("format") != RUN_JSON_FORMAT:
            raise UserError(
                f"{self.run_json}: not a run record this trainforge understands",
                f"name the config too: trainforge train CONFIG --resume {self.path}",
            )
        return data

    def write_run(self, record: Mapping[str, Any]) -> None:
        """Write run.json atomically (a temporary file renamed over the old one)."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        data = {"format": RUN_JSON_FORMAT, **record}
        data["created"] = data.get("created") or now
        data["written"] = now
        tmp = self.path / f".{RUN_JSON}.tmp"
        tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
        tmp.replace(self.run_json)

    # ------------------------------------------------------------------ lock
    @contextlib.contextmanager
    def hold(self) -> Iterator[Hold]:
        """This process's hold on the folder for the life of a run: the lock is taken when
        the run first needs it (`Hold.take`) and let go when the `with` block ends."""
        held = Hold(self)
        try:
            yield held
        finally:
            held.release()

    def lock(self) -> int:
        """Hold the folder for this process (an flock on the folder itself, so nothing is
        written yet); one line naming the holder when another process has it."""
        import fcntl

        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise UserError(
                f"run folder {self.path} is in use by {self._holder_text()}",
                "wait for that training to end or stop it, or pick another "
                "--set output.run_name=NAME",
            ) from None
        return fd

    def mark_holder(self) -> None:
        """Name this process in `.lock` once the run writes to its folder."""
        self.lock_file.write_text(f"process {os.getpid()} (trainforge train)", encoding="utf-8")

    def _holder_text(self) -> str:
        try:
            return self.lock_file.read_text(encoding="utf-8").strip() or "another process"
        except OSError:
            return "another process"

    def holder(self) -> str | None:
        """Who holds the folder now (None: nobody); the lock is not kept."""
        import fcntl

        if not self.path.is_dir():
            return None
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return self._holder_text()
        finally:
            os.close(fd)
        return None


class Hold:
    """The lock of one run folder as the run takes it: `take` locks once (a second call
    keeps the lock it has), `release` lets it go; see `RunFolder.hold`."""

    def __init__(self, folder: RunFolder) -> None:
        self.folder = folder
        self._fd: int | None = None

    @property
    def taken(self) -> bool:
        return self._fd is not None

    def take(self) -> None:
        if self._fd is None:
            self._fd = self.folder.lock()

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def for_config(output_dir: str, run_name: str | None, config_path: Path | None) -> RunFolder:
    """The folder a config's run goes to: output.dir / (run_name or the config's name)."""
    name = run_name or (config_path.stem if config_path else "run")
    return RunFolder(Path(output_dir) / name)


def resume_command(folder: RunFolder) -> str:
    """The one command that continues this run."""
    return f"trainforge train --resume {folder.path}"


def guide_spelling(path: Path | str) -> Path:
    """The ViT training guide's `checkpoints/NAME.pth` names the checkpoint folder NAME
    (checkpoints are folders: docs "Folders, not .pth files"); any other path is itself.
    Every command that takes a checkpoint (resume, evaluate, export, init_from) reads the
    spelling through this."""
    path = Path(path)
    if not path.exists() and path.suffix == ".pth" and path.with_suffix("").is_dir():
        return path.with_suffix("")
    return path


def find_run(value: str) -> tuple[RunFolder, Path | None] | None:
    """What `--resume VALUE` names when VALUE is a path: (its run folder, the checkpoint
    folder when VALUE is one, else None). None when VALUE is no run folder or checkpoint.
    The ViT training guide's `checkpoints/NAME.pth` spelling names the folder NAME."""
    path = guide_spelling(value)
    if not path.is_dir():
        return None
    if RunFolder(path).is_run() or RunFolder(path).checkpoints.is_dir():
        return RunFolder(path), None
    if path.parent == RunFolder(path.parent.parent).checkpoints:
        return RunFolder(path.parent.parent), path
    return None
