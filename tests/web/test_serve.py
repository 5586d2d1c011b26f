"""`trainforge serve` as a user starts it: refusals, the token kept out of every log line,
and a server that never imports torch."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from fakes.web import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_non_loopback_without_token_exits_2_with_one_line(cli, tmp_path):
    # A child: a refusal that regressed would leave a server listening; the timeout ends it.
    env = {k: v for k, v in os.environ.items() if k != "TRAINFORGE_WEB_TOKEN"}
    result = subprocess.run(
        [sys.executable, "-m", "trainforge", "serve", "--host", "0.0.0.0", "--port", "1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "TRAINFORGE_WEB_TOKEN" in lines[0] and "Traceback" not in lines[0]


def get(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def test_served_app_checks_the_token_and_never_logs_it(tmp_path):
    secret = "tok-9f8e7d6c5b4a"
    port = free_port()
    env = {**os.environ, "TRAINFORGE_WEB_TOKEN": secret, "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "trainforge", "serve", "--host", "0.0.0.0", "--port",
             str(port)], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300  # a hung server, not a slow start
        while time.monotonic() < deadline and "Uvicorn running" not in log.read_text():
            assert server.poll() is None, log.read_text()
            time.sleep(0.2)
        assert get(f"{url}/api/runs") == 401
        assert get(f"{url}/runs") == 401
        assert get(f"{url}/api/runs", secret) == 200
        assert get(f"{url}/api/system", secret) == 200
        assert get(f"{url}/api/runs", "wrong") == 401
    finally:
        server.terminate()
        server.wait(timeout=120)
    text = log.read_text()
    assert "access token required" in text and "GET /api/runs" in text
    assert secret not in text
    assert "Finished server process" in text  # a clean shutdown on SIGTERM


def test_the_web_app_does_not_import_torch():
    code = (
        "import sys\n"
        "from fastapi.testclient import TestClient\n"
        "from trainforge.web.app import create_app\n"
        "from trainforge.web.settings import WebSettings\n"
        "import tempfile, pathlib\n"
        "root = pathlib.Path(tempfile.mkdtemp())\n"
        "client = TestClient(create_app(WebSettings(root=root)))\n"
        "for path in ('/runs', '/models', '/system', '/api/train/defaults', '/api/models'):\n"
        "    assert client.get(path).status_code == 200, path\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_a_port_in_use_is_one_clear_line(tmp_path):
    # A child: a refusal that regressed would leave a server listening; the timeout ends it.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "trainforge", "serve", "--port", str(port)],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"cannot listen on 127.0.0.1:{port}: Address already in use. pick another --port"
    ]
