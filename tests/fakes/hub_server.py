"""A loopback stand-in for the Hugging Face Hub, for testing the download path offline.

It is NOT the Hub: it serves, from memory, the few routes huggingface_hub's real client calls
for `snapshot_download` of a model: `GET /api/models/{id}/revision/{rev}` (the commit),
`GET /api/models/{id}/tree/{commit}` (the file list) and `HEAD`/`GET
/{id}/resolve/{revision}/{file}` with the `ETag`, `X-Repo-Commit` and `Content-Length` headers
and `Range` requests (resume). A gated repository answers 401 with `X-Error-Code: GatedRepo`
unless an `Authorization` header comes; an unknown revision 404 `RevisionNotFound`.
`drop_once` names a file whose first GET is cut after half its bytes (an interrupted download).

Library considered: `pytest-httpserver` / `responses` stub single URLs; the client here is
huggingface_hub's own httpx code, which needs a real socket, so the standard library's
ThreadingHTTPServer serves it.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


@dataclass
class Repo:
    revisions: dict[str, str]  # branch/tag -> commit
    files: dict[str, bytes]  # the same files at every revision (enough for the tests)
    gated: bool = False


@dataclass
class HubState:
    repos: dict[str, Repo] = field(default_factory=dict)
    drop_once: set[str] = field(default_factory=set)  # file names cut on their first GET
    ranges: list[str] = field(default_factory=list)  # Range headers seen, "file bytes=N-"
    fetched: list[str] = field(default_factory=list)  # file names whose bytes were sent
    tokens: list[str] = field(default_factory=list)  # Authorization headers seen

    def add_folder(self, repo_id: str, folder: Path, revisions: dict[str, str], gated=False):
        files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
        self.repos[repo_id] = Repo(revisions=revisions, files=files, gated=gated)


def _oid(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    state: HubState

    def log_message(self, *args) -> None:  # quiet: the tests read what they need from state
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6:
            return self._api(f"{parts[2]}/{parts[3]}", parts[4], "/".join(parts[5:]))
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._file(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]), body)
        self._error(404, "RepoNotFound")

    def _repo(self, repo_id: str, revision: str) -> tuple[Repo, str] | None:
        repo = self.state.repos.get(repo_id)
        if auth := self.headers.get("Authorization"):
            self.state.tokens.append(auth)
        if repo is None:
            self._error(404, "RepoNotFound")
            return None
        if repo.gated and not self.headers.get("Authorization"):
            self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted.")
            return None
        commit = repo.revisions.get(revision, revision)
        if commit not in repo.revisions.values():
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return None
        return repo, commit

    def _api(self, repo_id: str, route: str, revision: str) -> None:
        found = self._repo(repo_id, revision)
        if found is None:
            return
        repo, commit = found
        if route == "revision":
            siblings = [{"rfilename": name} for name in repo.files]
            answer: object = {"id": repo_id, "sha": commit, "siblings": siblings}
        else:  # tree
            answer = [
                {"type": "file", "oid": _oid(data), "size": len(data), "path": name}
                for name, data in repo.files.items()
            ]
        self._send(200, json.dumps(answer).encode(), {"Content-Type": "application/json"})

    def _file(self, repo_id: str, revision: str, name: str, body: bool) -> None:
        found = self._repo(repo_id, revision)
        if found is None:
            return
        repo, commit = found
        if name not in repo.files:
            return self._error(404, "EntryNotFound")
        data = repo.files[name]
        headers = {"ETag": f'"{_oid(data)}"', "X-Repo-Commit": commit}
        start = 0
        if (ask := self.headers.get("Range")) and body:
            self.state.ranges.append(f"{name} {ask}")
            start = int(ask.split("=")[1].split("-")[0])
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        status = 206 if start else 200
        if not body:
            return self._send(200, b"", headers, length=len(data))
        self.state.fetched.append(name)
        if name in self.state.drop_once:  # promise every byte, send half, hang up
            self.state.drop_once.discard(name)
            self.send_response(200)
            for key, value in {**headers, "Content-Length": str(len(data))}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self._send(status, data[start:], headers)

    def _error(self, status: int, code: str, message: str = "") -> None:
        body = json.dumps({"error": message or code}).encode()
        self._send(status, body, {"X-Error-Code": code, "X-Error-Message": message or code})

    def _send(self, status: int, data: bytes, headers: dict, length: int | None = None) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        self.end_headers()
        if data:
            self.wfile.write(data)


@contextmanager
def hub_server(state: HubState) -> Iterator[str]:
    """Serve `state` on 127.0.0.1 (a free port); yields the endpoint URL for HF_ENDPOINT."""
    handler = type("Handler", (_Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
