"""`trainforge serve` runs below the trainings it starts: a real server, a real training
process, and the nice values the kernel reports for each (not a timing)."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import psutil
import pytest

from fakes.web import CPU, TINY_VIT, run_form, serving, wait_for
from trainforge.web.priority import SERVER_NICENESS, nice_of

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice")


def server_threads(pid: int) -> dict[int, int]:
    """The nice value of each thread of process `pid` (one that ends meanwhile is left out)."""
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            found[int(tid)] = nice_of(pid, int(tid))
        except FileNotFoundError:
            continue
    return found


def test_the_server_runs_below_the_training_it_starts(project):
    user = os.getpriority(os.PRIO_PROCESS, 0)  # the priority the user starts the server at
    with serving(project, CPU) as url:
        overrides = [*TINY_VIT, "training.max_steps=100000"]
        response = httpx.post(f"{url}/api/runs", json=run_form(overrides=overrides), timeout=60)
        assert response.status_code == 201, response.text
        pid = response.json()["pid"]
        try:
            server = psutil.Process(pid).ppid()
            threads = server_threads(server)
            training = nice_of(pid)
        finally:
            httpx.post(f"{url}/api/runs/digits-web/stop", timeout=60)
            ended = ("stopped", "failed", "completed")  # gone before the server stops
            wait_for(lambda: httpx.get(f"{url}/api/runs/digits-web").json()["status"] in ended)
    lowered = min(19, user + SERVER_NICENESS)
    assert training == user, "the training runs at the user's priority"
    # Every thread of the server but the launcher runs lower, the request and watcher
    # threads started after start-up included.
    assert sorted(threads.values()) == [user] + [lowered] * (len(threads) - 1), threads
    assert len(threads) > 2


def test_a_process_started_by_the_launcher_keeps_its_priority_while_the_caller_is_lowered():
    # In a child interpreter: lowering a thread's priority cannot be undone in this one.
    code = (
        "import os, subprocess, sys, threading\n"
        "from trainforge.web.priority import Launcher, lower_server_priority, nice_of\n"
        "launcher = Launcher()\n"
        "server = lower_server_priority(launcher, 5)\n"
        "late = []\n"
        "t = threading.Thread(target=lambda: late.append(os.getpriority(os.PRIO_PROCESS, 0)))\n"
        "t.start(); t.join()\n"
        "child = launcher.popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "print(server, late[0], nice_of(child.pid), nice_of(os.getpid()))\n"
        "child.kill(); child.wait()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    user = os.getpriority(os.PRIO_PROCESS, 0)
    lowered = min(19, user + 5)
    assert result.stdout.split() == [str(lowered), str(lowered), str(user), str(lowered)]
