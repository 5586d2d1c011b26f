"""Where the run history lives: `trainforge serve --db PATH` and TRAINFORGE_WEB_DB put the
SQLite database there (nothing at the default runs/.trainforge-web/runs.db), and a server
started again on the same path reads the history back from it."""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fakes.web import run_form, wait_for
from trainforge.web.settings import DB_ENV

DEFAULT_DB = Path("runs") / ".trainforge-web" / "runs.db"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(project: Path, *args: str) -> Iterator[tuple[str, Path]]:
    """`trainforge serve ARGS` in `project` (TRAINFORGE_WEB_DB unset): its URL and log file."""
    port = free_port()
    log = project / f"server-{port}.log"
    env = {k: v for k, v in os.environ.items() if k != DB_ENV}
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "trainforge", "serve", "--port", str(port), *args],
            cwd=project, stdout=out, stderr=subprocess.STDOUT,
            env={**env, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # a hung server, not a slow start
        while "Uvicorn running" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", log
    finally:
        process.terminate()
        process.wait(timeout=120)


def completed_run(client) -> dict:
    """Start the stand-in trainer's digits run through the API and wait for its end."""
    assert client.post("/api/runs", json=run_form()).status_code == 201

    def done():
        view = client.get("/api/runs/digits-web").json()
        return view if view["status"] not in ("running", "stopping") else None

    view = wait_for(done)
    assert view["status"] == "completed"
    return view


def stored_runs(db: Path) -> list[tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT id, status FROM runs").fetchall()


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_env_var_puts_the_history_where_asked_and_a_restart_reads_it(
    make_client, project, monkeypatch, tmp_path_factory, where
):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "5")
    if where == "relative":  # relative to the project folder the server works in
        db, setting = project / "state" / "history.db", "state/history.db"
    else:
        db = tmp_path_factory.mktemp("elsewhere") / "web" / "history.db"
        setting = str(db)
    monkeypatch.setenv(DB_ENV, setting)
    client = make_client()
    assert client.app.state.trainforge.settings.db_path == db
    first = completed_run(client)
    assert stored_runs(db) == [("digits-web", "completed")]
    assert (db.parent / "logs" / "digits-web.log").is_file()  # run output beside the database
    assert not (project / DEFAULT_DB).exists()

    restarted = make_client()  # a new server on the same environment
    again = restarted.get("/api/runs/digits-web").json()
    for key in ("status", "attempts", "argv", "exit_code", "created_at", "step"):
        assert again[key] == first[key], key
    assert restarted.get("/api/runs/digits-web/log").json()["lines"][-1] == "done after 5 steps"

    # The default database is another one: no history there. The run folder is still in
    # runs/, so it lists as a run the app did not start, read from the folder alone.
    monkeypatch.delenv(DB_ENV)
    other = make_client()
    runs = other.get("/api/runs").json()
    assert [(r["id"], r["origin"], r["status"]) for r in runs] == [
        ("digits-web", "command line", "completed")
    ]
    assert other.app.state.trainforge.registry.list() == []


def test_db_flag_puts_the_history_where_asked_and_a_restarted_server_reads_it(
    make_client, project, monkeypatch
):
    db = project / "state" / "web.db"
    with served(project, "--db", "state/web.db") as (url, log):
        assert httpx.get(f"{url}/api/runs").json() == []
        assert db.is_file() and stored_runs(db) == []
        assert f"runs database: {db}" in log.read_text()
    assert not (project / DEFAULT_DB).exists()

    # A server on that database records a run (the stand-in trainer) ...
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "5")
    first = completed_run(make_client(db_path=db))
    assert stored_runs(db) == [("digits-web", "completed")]

    # ... and `trainforge serve --db` started again shows it, with the run folder's facts.
    with served(project, "--db", str(db)) as (url, _):
        runs = httpx.get(f"{url}/api/runs").json()
        assert [(r["id"], r["status"], r["step"]) for r in runs] == [("digits-web", "completed", 5)]
        assert runs[0]["created_at"] == first["created_at"] and runs[0]["argv"] == first["argv"]
    assert not (project / DEFAULT_DB).exists()
