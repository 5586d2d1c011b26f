"""The security corpus: every route of the app (enumerated from the app itself, so a new route
is covered without editing this file) is sent no token, a wrong token, a foreign Origin, a
10 MB body, traversal, an absolute path outside the project and a symlink out of config/ in
each of its text fields, and HTML in each of them. Every answer is judged by its status and
by the absence of a secret planted outside the project (and of the access token).
"""

from __future__ import annotations

import json
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from starlette.routing import Mount, Route

from fakes.web import run_form, write_hf_folder

TOKEN = "correct-horse-battery"
SECRET = "hunter2-SECRET-VALUE"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HTML = '<script>alert("tf")</script><img src=x onerror=alert(1)>'
TEN_MB = 10 * 1024 * 1024
# Example bodies that pass validation, so each field's refusal is that field's own.
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/api/runs"): run_form(output_name="corpus-run"),
    ("POST", "/api/sweeps"): {
        "config": "config/vit_digits.yaml",
        "name": "corpus-sweep",
        "trials": 1,
        "space": "params:\n  optimizer.learning_rate: {log_uniform: [1.0e-4, 1.0e-2]}\n",
        "args": ["--max_steps", "2"],
    },
    ("POST", "/api/login"): {"token": "wrong"},
}
# Sent where the route takes a run or sweep name: a plain one that names nothing.
PLAIN = "corpus-none"


@pytest.fixture
def corpus(make_client, project: Path, tmp_path_factory, monkeypatch):
    """(client with a token, planted paths): a secret config, data set, model and extension
    outside the project, and symlinks to them from config/, example_datasets/ and models/."""
    outside = tmp_path_factory.mktemp("outside")
    secret_config = outside / "secret.yaml"
    secret_config.write_text(f"training:\n  seed: '{SECRET}'\n")
    (outside / "secret.json").write_text(json.dumps([{"text": SECRET}]))
    marker = outside / "imported"
    (outside / "secret.py").write_text(f"open({str(marker)!r}, 'w').write('{SECRET}')\n")
    write_hf_folder(outside / "model")
    (outside / "model" / "secret.txt").write_text(SECRET)
    (project / "config" / "linked.yaml").symlink_to(secret_config)
    (project / "example_datasets" / "linked.json").symlink_to(outside / "secret.json")
    (project / "models" / "linked-model").symlink_to(outside / "model")
    up = f"../{outside.name}"
    paths = {
        "relative": f"{up}/secret.yaml",
        "absolute": str(secret_config),
        "symlink": "config/linked.yaml",
        "dotdot": f"config/../{up}/secret.yaml",
        "dataset-link": "example_datasets/linked.json",
        "model-link": "linked-model",
        "extension": str(outside / "secret.py"),
        "extension-up": f"{up}/secret.py",
    }
    monkeypatch.chdir(project)  # where `trainforge serve` runs, and reads relative paths from
    client = make_client(token=TOKEN)
    return types.SimpleNamespace(client=client, paths=paths, marker=marker, project=project)


def routes(app) -> list[tuple[str, str, Any]]:
    """(method, path with its parameters filled, the route) of every route of the app."""
    found = []
    for route in flat(app.routes):
        if isinstance(route, Mount):
            found.append(("GET", f"{route.path}/app.js", route))
        elif isinstance(route, APIRoute | Route):
            path = re.sub(r"\{(\w+)(:\w+)?\}", PLAIN, route.path)
            for method in sorted((route.methods or {"GET"}) - {"HEAD"}):
                found.append((method, path, route))
    assert len(found) >= 25, found  # the app's pages, API and static files
    return found


def flat(found: list, prefix: str = "") -> list:
    """The routes, with those of included routers (newer FastAPI keeps them apart) in place."""
    out = []
    for route in found:
        inner = getattr(route, "original_router", None)  # FastAPI's private _IncludedRouter
        if inner is not None:
            out += flat(inner.routes, prefix + route.include_context.prefix)
        elif prefix and isinstance(route, APIRoute):
            raise AssertionError(f"an included router with a prefix: {prefix}{route.path}")
        else:
            out.append(route)
    return out


def streams(route) -> bool:
    """An event stream stays open while it has a run to follow: sent only where it has none."""
    return route.path == "/api/events"


def clean(response, *also: str) -> None:
    text = response.text
    assert SECRET not in text and TOKEN not in text, (response.status_code, text[:300])
    for value in also:
        assert value not in text, (response.status_code, text[:300])
    assert response.status_code < 500, text[:300]


# ---------------------------------------------------------------------- access
OPEN = {"/login", "/api/login", "/favicon.ico", "/static/favicon.svg"}


def test_every_route_without_the_token_or_with_a_wrong_one_gets_401(corpus):
    client = corpus.client
    checked = 0
    for method, path, _ in routes(client.app):
        if path in OPEN:
            continue
        for headers in ({}, {"Authorization": "Bearer wrong-horse"}):
            response = client.request(method, path, headers=headers)
            assert response.status_code == 401, (method, path, response.status_code)
            clean(response)
            checked += 1
    assert checked >= 40


def test_every_route_from_a_foreign_origin_gets_403(corpus):
    client = corpus.client
    for method, path, _ in routes(client.app):
        for origin in ("http://evil.example", "null", "http://testserver:9999"):
            response = client.request(method, path, headers={**AUTH, "Origin": origin})
            assert response.status_code == 403, (method, path, origin, response.status_code)
            clean(response)
    same = client.get("/api/runs", headers={**AUTH, "Origin": "http://testserver"})
    assert same.status_code == 200


def test_a_10_mb_body_gets_413_on_every_route_and_is_not_echoed(corpus):
    client = corpus.client
    body = b'{"config": "' + b"A" * TEN_MB + b'"}'
    for method, path, _ in routes(client.app):
        response = client.request(
            method, path, content=body, headers={**AUTH, "Content-Type": "application/json"}
        )
        assert response.status_code == 413, (method, path, response.status_code)
        assert len(response.content) < 300 and "AAAAAAAAAA" not in response.text
        assert len(response.json()["detail"].splitlines()) == 1


def test_a_body_streamed_without_its_length_is_cut_at_the_limit(corpus):
    def chunks():
        for _ in range(10):
            yield b"A" * (1024 * 1024)

    response = corpus.client.post("/api/runs", content=chunks(), headers=AUTH)
    assert response.status_code == 413 and "AAAAAAAAAA" not in response.text


@pytest.mark.parametrize("field", ["output_name", "config", "dataset", "overrides", "profile"])
def test_a_long_value_under_the_body_limit_is_refused_and_echoed_cut(corpus, field):
    long = "x" * 500_000
    form = run_form(output_name="corpus-long")
    form[field] = [f"training.seed={long}"] if field == "overrides" else long
    response = corpus.client.post("/api/runs", json=form, headers=AUTH)
    assert response.status_code == 422, response.text[:300]
    assert len(response.content) < 4000 and "x" * 80 not in response.text


# ---------------------------------------------------------------------- paths
def body_model(route) -> Any:
    return route.body_field.field_info.annotation


def text_fields(route) -> dict[str, Any]:
    """Field name -> annotation of the route's JSON body, for every text or list-of-text
    field."""
    body = getattr(route, "body_field", None)
    if body is None:
        return {}
    model = body_model(route)
    out = {}
    for name, info in model.model_fields.items():
        args = {a for a in typing.get_args(info.annotation)} | {info.annotation}
        if str in args or any(typing.get_origin(a) is list for a in args):
            out[name] = info.annotation
    return out


def example_body(method: str, route) -> dict[str, Any]:
    if (method, route.path) in BODIES:
        return dict(BODIES[(method, route.path)])
    model = body_model(route)
    return {n: "x" for n, info in model.model_fields.items() if info.is_required()}


def is_list(annotation: Any) -> bool:
    return typing.get_origin(annotation) is list


def bad_values(paths: dict[str, str]) -> list[str]:
    return [paths[k] for k in ("relative", "absolute", "symlink", "dotdot")]


def test_every_text_field_refuses_paths_out_of_the_project(corpus):
    client, paths = corpus.client, corpus.paths
    tried = 0
    for method, path, route in routes(client.app):
        for field, annotation in text_fields(route).items():
            for value in bad_values(paths):
                body = example_body(method, route)
                body[field] = [value] if is_list(annotation) else value
                response = client.request(method, path, json=body, headers=AUTH)
                assert response.status_code in (400, 401, 404, 409, 422), (
                    path, field, value, response.status_code, response.text[:300])  # fmt: skip
                clean(response)
                tried += 1
    assert tried >= 40
    assert not corpus.marker.exists()


@pytest.mark.parametrize("value_key", ["relative", "absolute", "symlink", "dotdot"])
def test_query_and_path_parameters_refuse_paths_out_of_the_project(corpus, value_key):
    client, value = corpus.client, corpus.paths[value_key]
    for method, _, route in routes(corpus.client.app):
        if isinstance(route, Mount):
            continue
        for param in re.findall(r"\{(\w+)", route.path):
            path = route.path.replace(f"{{{param}}}", value.replace("/", "%2F"))
            path = re.sub(r"\{(\w+)\}", PLAIN, path)
            response = client.request(method, path, headers=AUTH)
            assert response.status_code in (400, 404, 405, 409, 422), (path, response.status_code)
            clean(response)
        query = [p.name for p in getattr(route, "dependant", None).query_params] if (
            isinstance(route, APIRoute)) else []  # fmt: skip
        for param in query:  # the event streams are left out: they follow a run
            if streams(route):
                continue
            path = re.sub(r"\{(\w+)\}", PLAIN, route.path)
            response = client.request(method, path, params={param: value}, headers=AUTH)
            assert response.status_code in (200, 400, 404, 409, 422), (path, param)
            clean(response)
            if response.status_code == 200 and route.path == "/api/train/defaults":
                answer = response.json()  # the dialog's errors; nothing read from the file
                assert answer["errors"][param] and "profile" not in answer, answer
                assert set(answer["values"]) <= {"config"}


def sweep(corpus, **changes) -> Any:
    body = {**BODIES[("POST", "/api/sweeps")], **changes}
    return corpus.client.post("/api/sweeps", json=body, headers=AUTH)


@pytest.mark.parametrize("value_key", ["relative", "absolute", "symlink", "dotdot"])
def test_a_sweep_refuses_a_config_out_of_config_and_repeats_nothing_from_it(corpus, value_key):
    value = corpus.paths[value_key]
    response = sweep(corpus, config=value)
    assert response.status_code == 422, response.text[:300]
    lines = response.json()["errors"]
    assert len(lines) == 1 and "config" in lines[0], lines
    clean(response, "Input should be")
    assert not (corpus.project / "runs" / "corpus-sweep").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--extension", "{extension}"],
        ["--extension", "{extension-up}"],
        ["--set", "data.train_file={absolute}"],
        ["--set", "data.options.train_file={absolute}"],  # the current spelling too
        ["--set", "data.options.test_file={dotdot}"],
        ["--data_file", "{relative}"],
        ["--set", "model.init_from={dotdot}"],
        ["--config", "{absolute}"],
        ["{relative}"],
        ["--set", 'extensions=["{extension}"]'],
        ["--profile", "{symlink}"],
    ],
)
def test_a_sweep_refuses_train_flags_naming_paths_out_of_the_project(corpus, args):
    filled = [a.format(**corpus.paths) for a in args]
    response = sweep(corpus, args=filled)
    assert response.status_code == 422, response.text[:300]
    clean(response)
    assert not corpus.marker.exists()


@pytest.mark.parametrize(
    "change",
    [
        {"dataset": "{absolute}", "task": "causal-lm"},
        {"dataset": "{dataset-link}", "task": "causal-lm"},
        {"base_model": "{model-link}", "task": "causal-lm"},
        {"overrides": ['extensions=["{extension}"]']},
        {"overrides": ["model.init_from={relative}"]},
        {"overrides": ["data.options.train_file={absolute}"], "task": "causal-lm"},
        {"overrides": ["logging.wandb_dir={absolute}"]},
        {"config": "{symlink}"},
    ],
)
def test_a_run_refuses_every_path_out_of_the_project(corpus, change):
    form = run_form(output_name="corpus-run")
    for key, value in change.items():
        form[key] = [v.format(**corpus.paths) for v in value] if isinstance(value, list) else (
            value.format(**corpus.paths))  # fmt: skip
    response = corpus.client.post("/api/runs", json=form, headers=AUTH)
    assert response.status_code == 422, response.text[:300]
    errors = response.json()["errors"]
    assert set(change) - {"task"} <= set(errors), errors
    clean(response)
    assert not corpus.marker.exists()


def test_symlinked_files_out_of_the_project_are_not_offered(corpus):
    client = corpus.client
    choices = client.get("/api/train/defaults", headers=AUTH).json()["choices"]
    assert "config/linked.yaml" not in choices["configs"]
    assert "linked-model" not in choices["models"]
    assert "config/linked.yaml" not in client.get("/sweeps", headers=AUTH).text


# ---------------------------------------------------------------------- HTML
PAGES = ["/runs", "/sweeps", "/compare", "/models", "/system", "/login"]


def test_html_in_every_text_field_comes_back_as_text(corpus):
    client = corpus.client
    for method, path, route in routes(client.app):
        for field, annotation in text_fields(route).items():
            body = example_body(method, route)
            body[field] = [HTML] if is_list(annotation) else HTML
            response = client.request(method, path, json=body, headers=AUTH)
            assert response.status_code in (400, 401, 404, 409, 422), (path, field)
            assert response.headers["content-type"].startswith("application/json"), path
            clean(response)
    for page in PAGES:
        clean(client.get(page, headers=AUTH), "<script>alert", "<img src=x")


def test_a_run_folder_named_with_html_is_shown_the_same_way_on_every_page(corpus):
    folder = corpus.project / "runs" / "<b>bold<img src=x onerror=alert(2)>"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"config_file": "config/vit_digits.yaml"}))
    client = corpus.client
    listed = {run["id"] for run in client.get("/api/runs", headers=AUTH).json()}
    compared = set(client.get("/api/compare/runs", headers=AUTH).json())
    assert listed == compared  # the same rule on every page
    named = client.get("/runs", headers=AUTH).text  # named, escaped, with the fix
    assert "runs/&lt;b&gt;bold&lt;img src=x onerror=alert(2)&gt;" in named and "Rename" in named
    for page in PAGES:
        clean(client.get(page, headers=AUTH), "<img src=x", "<b>bold")


LAUGHS = "[" + ",".join(["&a [x,x,x,x,x,x,x,x,x]"] + [f"&{c} [*{p}" + f",*{p}" * 8 + "]"
                         for p, c in zip("abcdefgh", "bcdefghi", strict=True)]) + "]"  # fmt: skip


def test_yaml_aliases_that_stand_for_billions_of_values_are_refused_at_once(corpus):
    client = corpus.client
    form = run_form(output_name="corpus-laughs", overrides=[f"training.seed={LAUGHS}"])
    response = client.post("/api/runs", json=form, headers=AUTH)
    assert response.status_code == 422 and "alias" in response.json()["errors"]["overrides"][0]
    assert sweep(corpus, space=f"params: {LAUGHS}\n").status_code == 422
    refused = sweep(corpus, args=["--set", f"training.seed={LAUGHS}"])
    assert refused.status_code == 422 and "alias" in refused.json()["errors"][0]


def test_a_run_report_that_is_a_symlink_out_of_the_runs_folder_is_not_served(corpus):
    folder = corpus.project / "runs" / "linked-report"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"config_file": "config/vit_digits.yaml"}))
    (folder / "report.html").symlink_to(Path(corpus.paths["absolute"]))
    response = corpus.client.get("/runs/linked-report/report", headers=AUTH)
    assert response.status_code == 404
    clean(response)
