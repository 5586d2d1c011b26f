"""The app factory: pages (Jinja2, rendered on the server), the JSON API, the access guard.

`create_app(settings)` builds one FastAPI app; `trainforge serve` runs it under uvicorn.
Pages carry their data in the HTML and a little plain JavaScript (static/, no build step)
adds the dialog, the live charts and refreshes.

The access guard runs before every request. With a token configured, a request must carry
it (`Authorization: Bearer TOKEN`, or the cookie that /login sets, which holds a hash of the
token, not the token); only the login page, its form and the icon are open. The token is
never put in a URL, so access logs never see it. Any request from another site's page (an
Origin header that is not this host; browsers send none on a same-site GET) is refused, and a
loopback bind without a token accepts only loopback Host headers, so a web page cannot reach
the app through DNS rebinding. Outside the guard, `limits.BodyLimit` refuses a request body
over 1 MiB before anything reads it.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, Field
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from trainforge import __version__
from trainforge.hardware import Platform
from trainforge.web import api, api_targets, artefacts, compare, run_manage, sweeps, trials
from trainforge.web.app_state import AppState
from trainforge.web.limits import MAX_NAME, BodyLimit, cut
from trainforge.web.links import add_links
from trainforge.web.lookup import run_record
from trainforge.web.model_list import human_bytes, list_models
from trainforge.web.settings import NAME_RULE, WebSettings, is_plain_name
from trainforge.web.try_model import router as try_router

HERE = Path(__file__).parent
COOKIE = "trainforge_token"
FAVICON = HERE / "static" / "favicon.svg"
# The sign-in page and its form, and the icon a browser asks for on every page (the login
# page's tab too): nothing else is served without the token.
OPEN_PATHS = ("/login", "/api/login", "/favicon.ico", "/static/favicon.svg")


def token_hash(token: str) -> str:
    return hashlib.sha256(f"trainforge-web:{token}".encode()).hexdigest()


class AccessGuard:
    """Pure ASGI middleware (works for streaming responses too)."""

    def __init__(self, app: ASGIApp, settings: WebSettings) -> None:
        self.app = app
        self.token = settings.token
        self.cookie_value = token_hash(settings.token) if settings.token else None
        self.allowed_hosts = settings.allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope, headers: Headers) -> Response | None:
        host = headers.get("host", "")
        if self.allowed_hosts is not None and _hostname(host) not in self.allowed_hosts:
            return JSONResponse({"detail": "unknown Host header"}, status_code=400)
        origin = headers.get("origin")
        if origin and urlsplit(origin).netloc != host:
            return JSONResponse({"detail": "cross-site request refused"}, status_code=403)
        if self.token is None or scope["path"] in OPEN_PATHS:
            return None
        if self._authorised(headers):
            return None
        if scope["path"].startswith("/api/") or scope["path"] == "/openapi.json":
            return JSONResponse(
                {"detail": "access token required"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return HTMLResponse(_login_page(), status_code=401)

    def _authorised(self, headers: Headers) -> bool:
        assert self.token is not None and self.cookie_value is not None
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            return hmac.compare_digest(auth[7:].strip().encode(), self.token.encode())
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                return hmac.compare_digest(value.encode(), self.cookie_value.encode())
        return False


def _hostname(host: str) -> str:
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _login_page() -> str:
    return (HERE / "templates" / "login.html").read_text(encoding="utf-8")


class LoginRequest(BaseModel):
    token: str = Field(max_length=MAX_NAME * 10)


def create_app(
    settings: WebSettings | None = None,
    platform: Platform | None = None,
    launch: Callable | None = None,
) -> FastAPI:
    """The app; `launch` starts the training processes (default `subprocess.Popen`)."""
    settings = settings or WebSettings()
    state = AppState.create(settings, platform, launch)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        state.system.close()
        state.targets.close()
        artefacts.stop_exports()

    app = FastAPI(
        title="trainforge",
        version=__version__,
        description="Launch, watch and stop training runs. Every page action is an API call.",
        lifespan=lifespan,
    )
    app.state.trainforge = state
    app.add_middleware(api.StatusFastPath, state=state)  # inside the guard: added first
    app.add_middleware(AccessGuard, settings=settings)
    app.add_middleware(BodyLimit)  # outermost: before the guard reads anything
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(api.router)
    app.include_router(sweeps.router)
    app.include_router(trials.router)
    app.include_router(compare.router)
    app.include_router(run_manage.router)
    app.include_router(artefacts.router)
    app.include_router(api_targets.router)
    app.include_router(try_router)  # the Models page's Try it box
    _add_error_handlers(app)
    _add_login(app, settings)
    _add_pages(app, state)
    sweeps.add_pages(app, state)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors: dict[str, list[str]] = {}
        for item in exc.errors():
            loc = [str(p) for p in item.get("loc", ()) if p != "body"]
            errors.setdefault(loc[0] if loc else "_form", []).append(cut(str(item.get("msg"))))
        detail = [
            {
                "loc": [cut(str(p), 100) for p in e.get("loc", ())],
                "msg": cut(str(e.get("msg"))),
                "type": str(e.get("type")),
            }
            for e in exc.errors()
        ]
        return JSONResponse({"detail": detail, "errors": errors}, status_code=422)


def _add_login(app: FastAPI, settings: WebSettings) -> None:
    @app.get("/login", response_class=HTMLResponse, include_in_schema=False)
    def login_page() -> HTMLResponse:
        return HTMLResponse(_login_page())

    @app.post("/api/login", status_code=204, responses={401: {}})
    def login(body: LoginRequest) -> Response:
        """Exchange the access token for a session cookie (a hash of the token)."""
        token = settings.token
        if token is None:
            return Response(status_code=204)
        if not hmac.compare_digest(body.token.encode(), token.encode()):
            raise HTTPException(401, "wrong access token")
        response = Response(status_code=204)
        response.set_cookie(COOKIE, token_hash(token), httponly=True, samesite="strict")
        return response


def _add_pages(app: FastAPI, state: AppState) -> None:
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.filters["bytes"] = human_bytes

    def page(request: Request, name: str, active: str, **context: Any) -> HTMLResponse:
        context.update(active=active, version=__version__, platform=state.platform)
        return templates.TemplateResponse(request, name, context)

    add_links(app, state, page)

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:
        # Browsers ask for /favicon.ico whatever the page links (the JSON API docs, a report).
        return FileResponse(FAVICON, media_type="image/svg+xml")

    @app.get("/", include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse("/runs", status_code=303)

    @app.get("/runs", response_class=HTMLResponse, include_in_schema=False)
    def runs_page(request: Request, dialog: str | None = None) -> HTMLResponse:
        runs = [state.run_view(r) for r in state.list_runs()]
        unlisted = state.cli_runs.unlisted()
        return page(
            request, "runs.html", "runs", runs=runs, open_dialog=dialog == "open",
            unlisted=unlisted, name_rule=NAME_RULE,
        )  # fmt: skip

    @app.get("/train", include_in_schema=False)
    def train_page() -> RedirectResponse:
        return RedirectResponse("/runs?dialog=open", status_code=303)

    @app.get("/runs/{run_id}", response_class=HTMLResponse, include_in_schema=False)
    def run_page(request: Request, run_id: str) -> Response:
        if is_plain_name(run_id) and sweeps.is_sweep(state, run_id):
            return RedirectResponse(f"/sweeps/{run_id}", status_code=303)  # a sweep's page
        record = run_record(state, run_id)
        return page(request, "run.html", "runs", run=state.run_view(record), sweep=None)

    @app.get("/runs/{run_id}/report", include_in_schema=False)
    def run_report(run_id: str) -> FileResponse:
        record = run_record(state, run_id)
        path = state.settings.run_folder(record.id).report
        # The path rule (web/paths.py): a report that is a symlink out of the runs folder is
        # not served.
        inside = path.resolve().is_relative_to(state.settings.runs_path.resolve())
        if not path.is_file() or not inside:
            raise HTTPException(404, f"run {run_id} has no {path.name} yet")
        return FileResponse(path, media_type="text/html")

    @app.get("/models", response_class=HTMLResponse, include_in_schema=False)
    def models_page(request: Request) -> HTMLResponse:
        models = list_models(state.settings.models_path)
        return page(request, "models.html", "models", models=models)

    @app.get("/system", response_class=HTMLResponse, include_in_schema=False)
    def system_page(request: Request) -> HTMLResponse:
        return page(request, "system.html", "system", facts=state.system.facts())
