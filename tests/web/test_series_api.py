"""The run page's chart data for a run of 10^6 records (`GET /api/runs/{id}/series`): under a
megabyte, at most 1,000 buckets a metric, the planted spike kept; a zoom answers raw points;
the live stream continues from the answer's offset; the report reads the same buckets."""

from __future__ import annotations

import json

import pytest
from tests.observe.test_series import write_records
from tests.web.test_cli_runs import cli_folder


@pytest.mark.slow  # 10^6 records (about 100 MB) written, then bucketed once by the server
def test_a_million_record_run_page_gets_under_a_megabyte_with_its_spike(make_client, project):
    folder = cli_folder(project, "long")
    write_records(folder.metrics, 1_000_000, spike=777_777, val_every=5_000)
    client = make_client()
    answer = client.get("/api/runs/long/series")
    assert answer.status_code == 200, answer.text
    assert len(answer.content) <= 1_000_000
    body = answer.json()
    loss = body["series"]["train/loss"]
    assert len(loss["step"]) <= 1000 and body["width"] == 1024
    hit = loss["max"].index(100.0)
    assert loss["step"][hit - 1] < 777_777 <= loss["step"][hit]
    assert body["latest"]["train"]["step"] == 1_000_000
    assert body["offset"] == folder.metrics.stat().st_size
    zoom = client.get("/api/runs/long/series", params={"lo": 777_000, "hi": 777_999}).json()
    assert zoom["raw"] and len(zoom["series"]["train/loss"]["step"]) == 1000
    assert 100.0 in zoom["series"]["train/loss"]["last"]
    with folder.metrics.open("a") as fh:
        fh.write(json.dumps({"split": "train", "step": 1_000_001, "loss": 7.0}) + "\n")
    again = client.get("/api/runs/long/series").json()  # cached, caught up, not rebuilt
    assert again["latest"]["train"]["loss"] == 7.0
    assert folder.path.joinpath("metrics.buckets.json").is_file()
    from trainforge.observe.report import build_report
    from trainforge.observe.report_data import load_run

    data = load_run(folder.path)  # the report reads the same buckets, not 10^6 records
    assert len(data.split("train")) <= 2_000
    assert max(c[3] for r in data.split("train") if (c := r.get("_cell", {}).get("loss"))) == 100
    assert build_report(folder.path).is_file()


def test_a_short_run_answers_its_points_and_a_bad_window_is_refused(make_client, project):
    folder = cli_folder(project, "short")
    write_records(folder.metrics, 40)
    client = make_client()
    body = client.get("/api/runs/short/series").json()
    assert body["raw"] and body["series"]["train/loss"]["n"] == [1] * 40
    assert client.get("/api/runs/short/series", params={"lo": 9, "hi": 3}).status_code == 400
