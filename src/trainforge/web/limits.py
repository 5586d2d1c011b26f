"""How much a request may send and how much of it an answer repeats: the request body limit
(413, one line, before the app reads a byte), the length caps of the API's text fields, and
the cut of any error line.

`BodyLimit` is a pure ASGI middleware: a request whose Content-Length is over the limit is
answered at once, whatever its route and method, and a body sent without a length is counted
as it arrives and refused once it passes the limit. Starlette's RequestBodyLimitMiddleware
(1.x) was considered: it checks only when a route reads its body, so a GET with a 10 MB body
is answered 200 after the server took it all, its answer is plain text that names no fix, and
the FastAPI versions this package supports do not all have it.
"""

from __future__ import annotations

import json

import yaml
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 1024 * 1024
# Text fields of the API (characters): a name, a path, one KEY=VALUE, a space file's text.
MAX_NAME = 100
MAX_PATH = 300
MAX_ITEM = 500
MAX_ITEMS = 200
MAX_TEXT = 64 * 1024
MAX_LINE = 300
TOO_LARGE = (
    f"request body over {MAX_BODY_BYTES // (1024 * 1024)} MiB; send less (a space file or "
    "overrides of that size belong in a file under the project folder)"
)


def cut(line: str, limit: int = MAX_LINE) -> str:
    """An error line as an answer repeats it: at most `limit` characters."""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def yaml_alias(text: str) -> bool:
    """Whether YAML `text` refers back to an anchor (`*name`): a few hundred characters of
    nested aliases (a "billion laughs") stand for billions of values once something walks
    them, so the web app refuses aliases in what it parses (no space file or override needs
    them). A `KEY=VALUE` override is judged by its value, which is parsed alone."""
    return any(_aliased(part) for part in (text, text.partition("=")[2]))


def _aliased(text: str) -> bool:
    try:
        return any(isinstance(token, yaml.AliasToken) for token in yaml.scan(text))
    except yaml.YAMLError:
        return False  # not YAML: nothing parses it as such


class _TooLarge(HTTPException):
    """An HTTPException, so that FastAPI's body parsing passes it on (as 413, not 400)."""

    def __init__(self) -> None:
        super().__init__(413, TOO_LARGE)


class BodyLimit:
    """Refuse request bodies over `max_bytes` with 413 and one line."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            await _refuse(send)
            return
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:
            if started:  # a streaming answer already began: nothing more can be said
                raise
            await _refuse(send)


async def _refuse(send: Send) -> None:
    body = json.dumps({"detail": TOO_LARGE}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    # The rest of the body is not read: the connection is closed after the answer.
    headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
