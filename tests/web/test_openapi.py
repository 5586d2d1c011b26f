"""The OpenAPI document (/openapi.json) describes the endpoint behind every page action: the
ones listed here, and every `/api/...` call found in the pages' JavaScript, so a page action
added later without a documented endpoint fails this test."""

from __future__ import annotations

import re

from fakes.web import REPO

WEB = REPO / "src" / "trainforge" / "web"
# Page action -> (method, path) of its endpoint (src/trainforge/web/api.py).
PAGE_ACTIONS = {
    "Train Model dialog: defaults": ("get", "/api/train/defaults"),
    "Start Training (validates; errors per field)": ("post", "/api/runs"),
    "Runs list": ("get", "/api/runs"),
    "Runs list: live refresh": ("get", "/api/events"),
    "run page: status": ("get", "/api/runs/{run_id}"),
    "run page: live progress": ("get", "/api/runs/{run_id}/events"),
    "run page: metrics history": ("get", "/api/runs/{run_id}/metrics"),
    "run page: charts (min/max/last buckets, a zoomed window)": (
        "get",
        "/api/runs/{run_id}/series",
    ),
    "run page: output": ("get", "/api/runs/{run_id}/log"),
    "Stop": ("post", "/api/runs/{run_id}/stop"),
    "Resume": ("post", "/api/runs/{run_id}/resume"),
    "Models list": ("get", "/api/models"),
    "Models page: Try it": ("post", "/api/models/try"),
    "System": ("get", "/api/system"),
    "sign-in": ("post", "/api/login"),
    "Sweeps: start a sweep (validates; one line per problem)": ("post", "/api/sweeps"),
    "Sweeps list": ("get", "/api/sweeps"),
    "Sweeps: a sweep's trials and curves": ("get", "/api/sweeps/{name}"),
    "Sweeps: Stop": ("post", "/api/sweeps/{name}/stop"),
    "Compare runs: the runs to pick from": ("get", "/api/compare/runs"),
    "Compare runs: curves": ("get", "/api/compare/curves"),
    "run page: Export": ("post", "/api/runs/{run_id}/export"),
    "run page: Export progress and artefacts": ("get", "/api/runs/{run_id}/export"),
    "run page: rename, tag, note": ("patch", "/api/runs/{run_id}/meta"),
    "run page: Delete": ("delete", "/api/runs/{run_id}"),
    "Train Model dialog: targets": ("get", "/api/targets"),
    "Train Model dialog: start on a cluster target": ("post", "/api/targets/runs"),
    "Runs list: cluster runs (target, job, pending reason, badge)": ("get", "/api/targets/runs"),
    # The run page of a sweep's trial calls these (its `api` base).
    "trial page: status": ("get", "/api/runs/{sweep}/trials/{trial}"),
    "trial page: live progress": ("get", "/api/runs/{sweep}/trials/{trial}/events"),
    "trial page: metrics history": ("get", "/api/runs/{sweep}/trials/{trial}/metrics"),
    "trial page: charts": ("get", "/api/runs/{sweep}/trials/{trial}/series"),
    "trial page: output": ("get", "/api/runs/{sweep}/trials/{trial}/log"),
}
_CALL = re.compile(r"""api\(\s*"(GET|POST|PATCH|DELETE)",\s*[`"](/api/[^`"?]*)""")
_STREAM = re.compile(r"""new EventSource\(\s*[`"](/api/[^`"?]*)""")
_FETCH = re.compile(r"""fetch\(\s*"(/api/[^"?]*)",\s*\{\s*method:\s*"(GET|POST)\"""")


def page_calls() -> set[tuple[str, str]]:
    """(method, path) of every API call in the pages' scripts, run ids as {run_id}."""
    found: set[tuple[str, str]] = set()
    sources = [*(WEB / "static").glob("*.js"), *(WEB / "templates").glob("*.html")]
    for source in sources:
        # The run page calls its run's API through `run.api`: a run's, or a trial's.
        text = source.read_text(encoding="utf-8").replace(
            "${run.api}", "/api/runs/${encodeURIComponent(run.id)}"
        )
        calls = [(m, p) for m, p in _CALL.findall(text)]
        calls += [("GET", p) for p in _STREAM.findall(text)]
        calls += [(m, p) for p, m in _FETCH.findall(text)]
        for method, path in calls:
            path = re.sub(r"\$\{encodeURIComponent\(run\.id\)\}", "{run_id}", path)
            found.add((method.lower(), path))
    return found


def test_openapi_lists_every_page_actions_endpoint(make_client):
    document = make_client().get("/openapi.json").json()
    documented = {(m, p) for p, ops in document["paths"].items() for m in ops}
    missing = {name: op for name, op in PAGE_ACTIONS.items() if op not in documented}
    assert not missing, missing
    calls = page_calls()
    assert len(calls) >= 10, calls  # the scan found the pages' calls
    assert calls <= documented, calls - documented
    assert calls <= set(PAGE_ACTIONS.values()), calls - set(PAGE_ACTIONS.values())


def test_openapi_describes_bodies_errors_and_streams(make_client):
    document = make_client().get("/openapi.json").json()
    paths = document["paths"]
    start = paths["/api/runs"]["post"]
    body = start["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    fields = document["components"]["schemas"][body.rsplit("/", 1)[1]]["properties"]
    assert {"config", "output_name", "base_model", "epochs", "learning_rate"} <= set(fields)
    assert {"201", "422"} <= set(start["responses"])  # started; or validation errors per field
    errors = start["responses"]["422"]["content"]["application/json"]["schema"]["$ref"]
    assert "errors" in document["components"]["schemas"][errors.rsplit("/", 1)[1]]["properties"]
    for path in ("/api/runs/{run_id}/events", "/api/events"):
        assert "text/event-stream" in paths[path]["get"]["responses"]["200"]["content"]
    for action in ("stop", "resume"):
        responses = paths[f"/api/runs/{{run_id}}/{action}"]["post"]["responses"]
        assert {"202", "404", "409"} <= set(responses)
    params = {p["name"] for p in paths["/api/train/defaults"]["get"]["parameters"]}
    assert params == {"config", "profile"}
