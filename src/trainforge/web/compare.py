"""The Compare runs view: the loss and metric curves of any selected runs overlaid, sweep
trials or not.

Candidates are the run folders under the runs folder (`runs/NAME`) and one level below
(`runs/SWEEP/trial-NNN`), each named by its path relative to the runs folder; a name that
leaves the runs folder or is no run is refused. Curves are each run's chart buckets
(`observe.series`: at most 1,000 min/max/last buckets a metric, from the sidecar beside
metrics.jsonl), so comparing runs of 10^6 steps reads and sends no more than runs of 10^3.

The page starts with runs picked, so it is never an empty grid: the two newest runs (by
their run.json's time), or, from a sweep's page (`/compare?sweep=NAME`), that sweep's best
trials by its metric; `?run=A&run=B` picks exactly those. The legend names each run by the
display name the user gave it (`db.RunMeta`), else its folder name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from trainforge.observe import series
from trainforge.runfolder import RunFolder
from trainforge.web.settings import is_plain_name

router = APIRouter(prefix="/api")
# The metrics a curve is drawn for, per split (train, val): the loss and the task's metric.
CURVE_KEYS = ("loss", "accuracy", "perplexity", "per", "wer")
_BUCKETS = series.Cache(size=32)  # caught up from its offset at each call


def bucketed_curves(
    run: RunFolder, window: tuple[int, int] | None = None
) -> dict[str, dict[str, Any]]:
    """{"train_loss", "val_loss", "val_<metric>"...: {"width", "step", "time", "min", "max",
    "last", "n"}}: each curve as the chart's buckets (width: steps per bucket). `window`:
    the steps (lo, hi) of a zoom, finer (`series.window`: raw points when they are few,
    with "raw" and "origin" beside "width")."""
    if window is None:
        view = _BUCKETS.get(run.metrics).view()
        extra: dict[str, Any] = {"width": view["width"]}
    elif run.metrics.is_file():
        view = series.window(run.metrics, *window)
        extra = {key: view[key] for key in ("width", "origin", "raw")}
    else:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for name, columns in view["series"].items():
        split, key = name.split("/", 1)
        if split in ("train", "val") and key in CURVE_KEYS:
            out[f"{split}_{key}"] = {**extra, **columns}
    return out


def candidates(runs_path: Path) -> list[str]:
    """Every run folder one or two levels under the runs folder, as relative names."""
    if not runs_path.is_dir():
        return []
    record = RunFolder(runs_path).run_json.name  # a run folder holds its run.json
    found = [p.parent for p in runs_path.glob(f"*/{record}")]
    found += [p.parent for p in runs_path.glob(f"*/*/{record}")]
    names = (str(p.relative_to(runs_path)) for p in found)
    # The Runs list's rule: plain folder names only, so every page lists the same runs.
    return sorted(n for n in names if all(is_plain_name(part) for part in n.split("/")))


def _run(runs_path: Path, name: str) -> RunFolder:
    parts = Path(name).parts
    if not parts or len(parts) > 2 or not all(is_plain_name(p) for p in parts):
        raise HTTPException(400, f"{name!r} is not a run under the runs folder")
    run = RunFolder(runs_path.joinpath(*parts))
    if not run.is_run():
        raise HTTPException(404, f"no run {name}")
    return run


@router.get("/compare/runs")
def compare_runs(request: Request) -> list[str]:
    return candidates(request.app.state.trainforge.settings.runs_path)


@router.get("/compare/curves", responses={400: {}, 404: {}})
def compare_curves(
    request: Request,
    run: list[str] = Query(default=[]),
    lo: int | None = Query(None, ge=0),
    hi: int | None = Query(None, ge=0),
) -> dict[str, Any]:
    """{run name: {"train_loss", "val_loss", "val_accuracy", ...: the curve's buckets}}
    (`bucketed_curves`); with `lo` and `hi`, a zoom's step window, finer."""
    runs_path = request.app.state.trainforge.settings.runs_path
    window = None
    if lo is not None and hi is not None:
        if hi < lo:
            raise HTTPException(400, "hi must not be below lo")
        window = (lo, hi)
    return {name: bucketed_curves(_run(runs_path, name), window) for name in run[:20]}


def newest(runs_path: Path, names: list[str], count: int = 2) -> list[str]:
    """The `count` runs whose run.json was written last (newest first)."""

    def written(name: str) -> float:
        try:
            return RunFolder(runs_path / name).run_json.stat().st_mtime
        except OSError:
            return 0.0

    return sorted(names, key=written, reverse=True)[:count]


def best_trials(runs_path: Path, sweep: str, count: int = 3) -> list[str]:
    """A sweep's best `count` trials by its metric and direction (the Pareto front first in a
    study of several objectives), as run names; [] for a name that is no sweep."""
    from trainforge.sweep.study import SweepFolder
    from trainforge.sweep.summary import rows

    if not is_plain_name(sweep) or not SweepFolder(runs_path / sweep).is_sweep():
        return []
    found, request = rows(SweepFolder(runs_path / sweep))
    scored = [r for r in found if r.value is not None]
    sign = -1.0 if request.get("direction") == "maximize" else 1.0
    scored.sort(key=lambda r: (not r.best, sign * float(r.value)))
    return [f"{sweep}/{r.trial}" for r in scored[:count]]


def add_compare(app: Any, state: Any, page: Any) -> None:
    @app.get("/compare", response_class=HTMLResponse, include_in_schema=False)
    def compare_page(
        request: Request, sweep: str | None = None, run: list[str] = Query(default=[])
    ) -> HTMLResponse:
        runs_path = state.settings.runs_path
        names = candidates(runs_path)
        if run:
            picked = [r for r in run if r in names]
        elif sweep:
            picked = best_trials(runs_path, sweep)
        else:
            picked = newest(runs_path, [n for n in names if "/" not in n])
        labels = {n: _label(state, n) for n in names}
        return page(
            request, "compare.html", "compare", runs=names, picked=picked, labels=labels,
            sweep=sweep if picked and sweep else None,
        )  # fmt: skip


def _label(state: Any, name: str) -> str:
    shown = state.registry.meta(name).display_name
    return f"{shown} ({name})" if shown and shown != name else name
