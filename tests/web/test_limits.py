"""The request body limit on a real uvicorn server: a body over 1 MiB is refused with 413 and
one line before the server takes it all (with or without its length), and the server answers
other clients meanwhile."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from fakes.web import CPU

TOKEN = "limit-token"


@pytest.fixture
def server(project) -> Iterator[int]:
    import uvicorn

    from trainforge.web.app import create_app
    from trainforge.web.settings import WebSettings

    app = create_app(WebSettings(root=project, fixture=CPU, token=TOKEN))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    served = uvicorn.Server(config)
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120  # a hung start, not speed
    while not served.started:
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.05)
    yield port
    served.should_exit = True
    thread.join(timeout=60)


def _get_runs(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/api/runs", headers={"Authorization": f"Bearer {TOKEN}"})
    status = conn.getresponse().status
    conn.close()
    return status


def _answer(sock: socket.socket) -> tuple[int, dict]:
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_body_announced_over_the_limit_is_refused_before_it_is_sent(server):
    with socket.create_connection(("127.0.0.1", server), timeout=60) as sock:
        head = (
            f"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {10 * 1024 * 1024}\r\n\r\n"
        )
        sock.sendall(head.encode() + b'{"config": "' + b"A" * 4096)  # the rest never comes
        # The server answers now, and answers another client while this one hangs.
        status, body = _answer(sock)
        assert status == 413 and "1 MiB" in body["detail"] and "\n" not in body["detail"]
        assert _get_runs(server) == 200


def test_a_body_streamed_without_its_length_is_refused_at_the_limit(server):
    with socket.create_connection(("127.0.0.1", server), timeout=60) as sock:
        head = (
            f"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        sock.sendall(head.encode())
        chunk = b"A" * (256 * 1024)
        try:
            for _ in range(40):  # 10 MiB, if the server kept reading
                sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused and closed part-way: what is asserted next
        status, body = _answer(sock)
        assert status == 413 and "AAAA" not in json.dumps(body)
    assert _get_runs(server) == 200
