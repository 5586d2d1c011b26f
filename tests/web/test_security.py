"""Access and paths: traversal in run ids, output names and model names; the access token;
cross-site requests and foreign Host headers."""

from __future__ import annotations

import pytest

from fakes.web import JETSON, run_form
from trainforge.errors import UserError
from trainforge.web.serve import build_settings

TRAVERSALS = [
    "../escape",
    "..",
    "a/../../b",
    "/etc/passwd",
    "..\\windows",
    ".hidden",
    "%2e%2e",
    "..%2fescape",
    "%2e%2e%2fescape",
    "name with space",
    "",
]


@pytest.mark.parametrize("name", TRAVERSALS)
def test_output_names_that_leave_the_runs_folder_are_refused(make_client, project, name):
    client = make_client()
    response = client.post("/api/runs", json=run_form(output_name=name))
    assert response.status_code == 422
    assert "output_name" in response.json()["errors"]
    assert not client.get("/api/runs").json()
    assert sorted(p.name for p in project.iterdir()) == [
        "config", "example_datasets", "models", "runs",
    ]  # fmt: skip


@pytest.mark.parametrize("name", ["../base-gpt2", "/abs/model", "..", "models/base-gpt2"])
def test_model_names_that_are_paths_are_refused(make_client, name):
    form = run_form(config="config/jetson_training.json", task="causal-lm", base_model=name,
                    dataset="example_datasets/jetson_training.json", overrides=[])  # fmt: skip
    response = make_client(fixture=JETSON).post("/api/runs", json=form)
    assert response.status_code == 422 and "base_model" in response.json()["errors"]


@pytest.mark.parametrize(
    "dataset", ["../../etc/passwd", "/etc/passwd", "example_datasets/../../secret.json"]
)
def test_dataset_paths_outside_the_project_are_refused(make_client, dataset):
    form = run_form(config="config/jetson_training.json", task="causal-lm", dataset=dataset,
                    base_model="base-gpt2", overrides=[])  # fmt: skip
    response = make_client(fixture=JETSON).post("/api/runs", json=form)
    assert response.status_code == 422 and "dataset" in response.json()["errors"]


@pytest.mark.parametrize("config", ["../config/vit_digits.yaml", "/etc/passwd", "config/../x"])
def test_configs_outside_the_config_folder_are_refused(make_client, config):
    response = make_client().post("/api/runs", json=run_form(config=config))
    assert response.status_code == 422 and "config" in response.json()["errors"]
    assert make_client().get("/api/train/defaults", params={"config": config}).json()["errors"]


@pytest.mark.parametrize(
    "path",
    [
        "/api/runs/..",
        "/api/runs/%2e%2e",
        "/api/runs/..%2f..%2fetc",
        "/api/runs/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/api/runs/.trainforge-web",
        "/api/runs/..%5c..%5cetc",
        "/runs/%2e%2e/report",
        "/runs/..%2fdigits/report",
        "/api/runs/%2e%2e/log",
        "/api/runs/%2e%2e/metrics",
    ],
)
def test_run_ids_that_are_paths_are_rejected(make_client, path):
    client = make_client()
    for method in ("GET", "POST"):
        response = client.request(method, path)
        assert response.status_code in (400, 404, 405), (method, path, response.status_code)
        assert "root:" not in response.text


def test_report_link_serves_only_the_run_report(make_client, project, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "2")
    client = make_client()
    client.post("/api/runs", json=run_form())
    from fakes.web import wait_for

    wait_for(lambda: client.get("/api/runs/digits-web").json()["status"] == "completed")
    assert client.get("/api/runs/digits-web").json()["report"] is None
    assert client.get("/runs/digits-web/report").status_code == 404
    (project / "runs" / "digits-web" / "report.html").write_text("<h1>report</h1>")
    assert client.get("/api/runs/digits-web").json()["report"] == "/runs/digits-web/report"
    assert "run report" in client.get("/runs/digits-web").text.lower()
    assert client.get("/runs/digits-web/report").text == "<h1>report</h1>"


# ---------------------------------------------------------------------- the access token
@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "example.org"])
def test_non_loopback_bind_without_a_token_refuses_to_start(host, monkeypatch):
    monkeypatch.delenv("TRAINFORGE_WEB_TOKEN", raising=False)
    with pytest.raises(UserError, match="not a loopback address"):
        build_settings(host, None)
    with pytest.raises(UserError):
        build_settings(host, "   ")  # blank is no token


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_bind_needs_no_token(host, monkeypatch):
    monkeypatch.delenv("TRAINFORGE_WEB_TOKEN", raising=False)
    settings = build_settings(host, None)
    assert settings.token is None and settings.allowed_hosts is not None


def test_token_from_the_environment_is_used(monkeypatch):
    monkeypatch.setenv("TRAINFORGE_WEB_TOKEN", "from-env")
    assert build_settings("0.0.0.0", None).token == "from-env"
    assert build_settings("0.0.0.0", "from-flag").token == "from-flag"


PROTECTED = [
    ("GET", "/runs"),
    ("GET", "/"),
    ("GET", "/models"),
    ("GET", "/system"),
    ("GET", "/static/app.js"),
    ("GET", "/openapi.json"),
    ("GET", "/docs"),
    ("GET", "/api/runs"),
    ("GET", "/api/models"),
    ("GET", "/api/system"),
    ("GET", "/api/train/defaults"),
    ("GET", "/api/events"),
    ("GET", "/api/runs/digits-web/events"),
    ("POST", "/api/runs"),
    ("POST", "/api/runs/digits-web/stop"),
    ("GET", "/no-such-page"),
]


def test_with_a_token_every_request_without_it_gets_401(make_client):
    client = make_client(token="correct-horse")
    for method, path in PROTECTED:
        response = client.request(method, path, json={} if method == "POST" else None)
        assert response.status_code == 401, (method, path)
        assert "correct-horse" not in response.text
    wrong = {"Authorization": "Bearer wrong-horse"}
    assert client.get("/api/runs", headers=wrong).status_code == 401
    client.cookies.set("trainforge_token", "correct-horse")  # the raw token is not the cookie
    assert client.get("/api/runs").status_code == 401
    client.cookies.clear()
    assert client.get("/api/runs", headers={"Authorization": "Bearer correct-horse"}).json() == []


def test_login_sets_a_cookie_that_holds_no_token(make_client):
    client = make_client(token="correct-horse")
    page = client.get("/runs")
    assert page.status_code == 401 and "Access token" in page.text
    assert client.post("/api/login", json={"token": "nope"}).status_code == 401
    response = client.post("/api/login", json={"token": "correct-horse"})
    assert response.status_code == 204
    cookie = response.cookies["trainforge_token"]
    assert "correct-horse" not in cookie and "httponly" in response.headers["set-cookie"].lower()
    assert client.get("/runs").status_code == 200  # the cookie now comes along
    assert client.get("/api/models").status_code == 200


def test_cross_site_posts_are_refused(make_client):
    client = make_client()
    evil = {"Origin": "http://evil.example"}
    assert client.post("/api/runs", json=run_form(), headers=evil).status_code == 403
    assert client.post("/api/runs/digits-web/stop", headers=evil).status_code == 403
    same = {"Origin": "http://testserver"}
    assert client.post("/api/runs", json=run_form(), headers=same).status_code == 201


def test_loopback_without_token_accepts_only_loopback_host_headers(make_client):
    client = make_client(allowed_hosts=("127.0.0.1", "localhost", "[::1]"))
    assert client.get("/api/runs").status_code == 400  # Host: testserver (DNS rebinding)
    assert client.get("/api/runs", headers={"Host": "127.0.0.1:8000"}).status_code == 200
    assert client.get("/api/runs", headers={"Host": "[::1]:8000"}).status_code == 200
    assert client.get("/api/runs", headers={"Host": "evil.example:8000"}).status_code == 400
