"""`trainforge serve`: check the bind address and token, then run the app under uvicorn."""

from __future__ import annotations

import logging
import os
import re
import socket
from pathlib import Path

from trainforge.errors import UserError
from trainforge.web.settings import TOKEN_ENV, WebSettings, is_loopback, resolve_token

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")


def require_web_extra() -> None:
    try:
        import fastapi  # noqa: F401
        import jinja2  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        raise UserError(
            f"the web app needs the web extra ({err.name} is missing)",
            "pip install 'trainforge[web]'",
        ) from None


def build_settings(
    host: str,
    token: str | None,
    *,
    db: Path | None = None,
    runs_dir: str = "runs",
    models_dir: str = "models",
    fixture: Path | None = None,
    max_parallel_runs: int | None = None,
    extensions: list[str] | None = None,
) -> WebSettings:
    """Settings for a bind address; refuses a non-loopback bind without an access token."""
    token = resolve_token(token)
    if not is_loopback(host) and token is None:
        raise UserError(
            f"--host {host} is not a loopback address and no access token is set: anyone on "
            "the network could start and stop training",
            f"pass --token TOKEN or set {TOKEN_ENV} (the environment keeps it out of `ps`), "
            "or bind to 127.0.0.1",
        )
    settings = WebSettings(
        runs_dir=runs_dir,
        models_dir=models_dir,
        db_path=db,
        token=token,
        fixture=fixture,
        max_parallel_runs=max_parallel_runs,
        allowed_hosts=LOOPBACK_HOSTS if token is None else None,
    )
    if extensions:
        # The server lists the plugins' names in its dialog; the runs it starts import them
        # too (a file by its absolute path), and record them for their resumes.
        from trainforge.extensions import load_extensions

        load_extensions(extensions)
        for spec in extensions:
            shown = str(Path(spec).resolve()) if spec.endswith(".py") else spec
            settings.train_command += ["--extension", shown]
    return settings


def _check_port(host: str, port: int) -> None:
    """One clear line for a port in use, before the app starts (uvicorn would exit 1)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as err:
        raise UserError(f"--host {host}: {err}", "pass an address of this machine") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as err:
            raise UserError(
                f"cannot listen on {host}:{port}: {err.strerror}", "pick another --port"
            ) from None


def serve(host: str, port: int, token: str | None, **options) -> None:
    require_web_extra()
    settings = build_settings(host, token, **options)
    import uvicorn

    from trainforge.web.app import create_app
    from trainforge.web.priority import Launcher, lower_server_priority

    _check_port(host, port)
    # The launcher thread keeps the user's priority for the trainings; everything else of
    # the server, and every thread it starts from now on, runs below it (web/priority.py).
    launcher = Launcher()
    trainings = os.getpriority(os.PRIO_PROCESS, launcher.native_id)
    server = lower_server_priority(launcher, settings.server_niceness)
    app = create_app(settings, launch=launcher.popen)
    shown = f"[{host}]" if ":" in host else host
    guard = " (access token required)" if settings.token else ""
    print(f"trainforge web app: http://{shown}:{port}/{guard}", flush=True)
    print(f"runs database: {settings.db_path}", flush=True)
    if server is not None:
        print(f"cpu priority: server nice {server}, trainings nice {trainings}", flush=True)
    config = uvicorn.Config(app, host=host, port=port, log_level="info")  # sets up logging
    logging.getLogger("uvicorn.access").addFilter(quiet_polls)
    uvicorn.Server(config).run()


_STATUS_PATH = re.compile(r"/api/runs/[^/?]+(\?.*)?")


def quiet_polls(record: logging.LogRecord) -> bool:
    """Leave the answered status polls out of the access log (a page or script asks every
    second or two: the lines would bury everything else, and each costs the server CPU)."""
    args = record.args
    if isinstance(args, tuple) and len(args) == 5 and args[1] == "GET" and args[4] in (200, 304):
        return not _STATUS_PATH.fullmatch(str(args[2]))
    return True
