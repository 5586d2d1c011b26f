"""Links, not text: the guides served as pages (`/help`, `/help/NAME`) and a run folder's
records as files to read (`/runs/ID/files/NAME`).

Guides are the Markdown files of the project's `docs/` folder beside the package (a source
checkout or an editable install; a wheel without them answers 404 with where to read them),
listed by name, so a request can only name one of those files. They are rendered with
markdown-it-py (already installed with rich), with raw HTML off: a guide's text is shown,
never run. Python-Markdown was considered; it is not otherwise a dependency.

A run's files are the few text records its folder's layout names (`RunFolder`): run.json,
config.resolved.yaml, metrics.jsonl, summary.json; any other name is a 404. The path rule of
`web/paths.py` holds: the file is served only when, resolved (symlinks followed), it is inside
the run's folder and that folder inside the runs folder.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse

from trainforge.web.app_state import AppState
from trainforge.web.lookup import run_record
from trainforge.web.paths import shown
from trainforge.web.run_files import readable_files
from trainforge.web.settings import is_plain_name

DOCS = Path(__file__).resolve().parents[3] / "docs"
ONLINE = "the docs/ folder of the trainforge source"


def guides() -> dict[str, Path]:
    """The guides by name (file name without .md)."""
    if not DOCS.is_dir():
        return {}
    return {p.stem: p for p in sorted(DOCS.glob("*.md")) if is_plain_name(p.stem)}


def _render(text: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text)


def add_links(app: FastAPI, state: AppState, page) -> None:
    @app.get("/help", response_class=HTMLResponse, include_in_schema=False)
    def help_index(request: Request) -> HTMLResponse:
        return page(request, "help.html", "help", guide=None, body=None, guides=list(guides()))

    @app.get("/help/{name}", response_class=HTMLResponse, include_in_schema=False)
    def help_page(request: Request, name: str) -> HTMLResponse:
        # A guide's relative link (`sweeps.md`, `export.md#onnx`) lands here with its suffix.
        found = guides().get(name.removesuffix(".md"))
        if found is None:
            where = "" if guides() else f"; read them in {ONLINE}"
            raise HTTPException(404, f"no guide {shown(name)}{where}")
        body = _render(found.read_text(encoding="utf-8"))
        return page(
            request, "help.html", "help", guide=found.stem, body=body, guides=list(guides())
        )

    @app.get("/runs/{run_id}/files/{name}", include_in_schema=False)
    def run_file(run_id: str, name: str) -> FileResponse:
        record = run_record(state, run_id)
        folder = state.settings.run_folder(record.id)
        path = readable_files(folder).get(name)
        if path is None:
            names = ", ".join(readable_files(folder))
            raise HTTPException(404, f"{shown(name)} is not a run file; ask for {names}")
        runs = state.settings.runs_path.resolve()
        base = folder.path.resolve()
        if not (base.is_relative_to(runs) and path.resolve().is_relative_to(base)):
            raise HTTPException(404, f"runs/{record.id}/{name} leads out of the run folder")
        if not path.is_file():
            raise HTTPException(404, f"run {record.id} has no {name} yet")
        # Plain text, so the browser shows it instead of downloading or running it.
        return FileResponse(path, media_type="text/plain; charset=utf-8")
