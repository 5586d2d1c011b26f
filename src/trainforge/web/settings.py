"""What a server instance works on: folders, database, access token, and safe names.

Every name that reaches a path (run ids, output names, model names) passes `check_name`:
a plain folder name, so `../`, absolute paths and their encoded forms never leave the
folders the server owns.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from trainforge.errors import UserError
from trainforge.runfolder import RunFolder
from trainforge.web.priority import SERVER_NICENESS

TOKEN_ENV = "TRAINFORGE_WEB_TOKEN"
DB_ENV = "TRAINFORGE_WEB_DB"
PARALLEL_ENV = "TRAINFORGE_WEB_MAX_PARALLEL"
# Letters, digits, '.', '_' and '-', starting with a letter or digit: never '..', '/', '\'.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
NAME_RULE = "letters, digits, '.', '_' and '-' (no '/', '\\', '..', leading '.'), e.g. my-run"


# A sweep's trial is a run one level down, `SWEEP/trial-NNN` (`sweep.study.SweepFolder`).
TRIAL_RE = re.compile(r"trial-[0-9]{3,6}")


def is_plain_name(name: str) -> bool:
    return bool(NAME_RE.fullmatch(name)) and ".." not in name


def is_trial_id(run_id: str) -> bool:
    """`SWEEP/trial-NNN`: a sweep's plain name and a trial folder's name."""
    sweep, sep, trial = run_id.partition("/")
    return bool(sep) and is_plain_name(sweep) and bool(TRIAL_RE.fullmatch(trial))


def is_run_id(run_id: str) -> bool:
    """A run the app may show: a plain name, or a sweep's trial."""
    return is_plain_name(run_id) or is_trial_id(run_id)


def check_name(name: str, what: str) -> str:
    """`name` if it is a plain folder name, else a UserError naming `what`."""
    if not isinstance(name, str) or not is_plain_name(name):
        text = str(name)
        shown = repr(text) if len(text) <= 40 else repr(text[:36]) + "..."  # never echo it all
        raise UserError(f"{what} {shown} is not a plain name", f"use {NAME_RULE}")
    return name


def _checked_id(run_id: str) -> str:
    return run_id if is_trial_id(run_id) else check_name(run_id, "run id")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class WebSettings:
    """Folders are relative to `root` (the project folder the server was started in)."""

    root: Path = field(default_factory=Path.cwd)
    runs_dir: str = "runs"
    models_dir: str = "models"
    config_dir: str = "config"
    db_path: Path | None = None
    token: str | None = None
    fixture: Path | None = None
    train_command: list[str] = field(
        default_factory=lambda: [sys.executable, "-m", "trainforge", "train"]
    )
    poll_interval_s: float = 0.5
    telemetry_interval_s: float = 2.0
    # Host header values accepted (None: any). `serve` sets the loopback names on a loopback
    # bind without a token, so another site cannot reach the app through DNS rebinding.
    allowed_hosts: tuple[str, ...] | None = None
    # Trainings run at once on this server's device; the rest wait in a queue. One by
    # default: two runs sharing 2 cores each got 0.44x of one run's throughput together.
    max_parallel_runs: int | None = None
    # `trainforge serve` runs this many nice steps below the trainings it starts
    # (web/priority.py); 0 keeps the server at their priority.
    server_niceness: int = SERVER_NICENESS
    # The targets file (None: TRAINFORGE_TARGETS or ~/.config/trainforge/targets.yaml).
    targets_file: Path | None = None
    # Run id -> the local mirror of a run that executes on a cluster target (web/targets.py):
    # its charts and status are read there.
    mirrors: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        if self.max_parallel_runs is None:
            self.max_parallel_runs = _parallel_from_env()
        if self.db_path is None:
            env = os.environ.get(DB_ENV)
            self.db_path = Path(env) if env else self.runs_path / ".trainforge-web" / "runs.db"
        self.db_path = (self.root / self.db_path).resolve()

    @property
    def runs_path(self) -> Path:
        return self.root / self.runs_dir

    @property
    def models_path(self) -> Path:
        return self.root / self.models_dir

    @property
    def config_path(self) -> Path:
        return self.root / self.config_dir

    @property
    def logs_path(self) -> Path:
        assert self.db_path is not None
        return self.db_path.parent / "logs"

    def run_folder(self, run_id: str) -> RunFolder:
        """A run's folder, to read (an absolute path under `root`); a sweep's trial
        (`SWEEP/trial-NNN`) is the run folder inside the sweep's; a cluster run's is its
        local mirror."""
        mirror = self.mirrors.get(run_id)
        if mirror is not None:
            return RunFolder(mirror)
        return RunFolder(self.runs_path / _checked_id(run_id))

    def cli_run_folder(self, run_id: str) -> RunFolder:
        """A run's folder as `trainforge train` names it: relative to `root`, the folder
        every training process runs in (runs/NAME, as in `--resume runs/NAME`)."""
        return RunFolder(Path(self.runs_dir) / _checked_id(run_id))

    def detect_platform(self):
        from trainforge.hardware import detect, load_fixture

        return detect(load_fixture(self.fixture) if self.fixture else None)


def _parallel_from_env() -> int:
    value = os.environ.get(PARALLEL_ENV, "1").strip() or "1"
    if not value.isdigit() or int(value) < 1:
        raise UserError(
            f"{PARALLEL_ENV}={value!r} is not a positive whole number",
            f"set {PARALLEL_ENV} to how many trainings may run at once, e.g. 1",
        )
    return int(value)


def resolve_token(flag: str | None) -> str | None:
    """The access token from --token or the environment; blank means none."""
    token = flag if flag is not None else os.environ.get(TOKEN_ENV)
    if token is None or not token.strip():
        return None
    return token.strip()
