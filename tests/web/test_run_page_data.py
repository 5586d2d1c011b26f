"""What a run page is fed: the learning rate, samples/s, data-wait share and telemetry that
the run wrote to metrics.jsonl reach the page unchanged, through the status API (`latest`),
the metrics endpoint and the server-sent event stream that static/run.js renders from.

The trainer here is a script that writes records with different values at every step (the
stand-in trainer's are constant), so a value taken from the wrong record or key shows.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from fakes.web import run_form, wait_for

TRAINER = """
import json, os, sys, time
from pathlib import Path
sets = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
run_dir = Path(json.loads(sets.get("output.dir", '"runs"'))) / json.loads(sets["output.run_name"])
run_dir.mkdir(parents=True, exist_ok=True)
with (run_dir / "metrics.jsonl").open("a") as out:
    for line in Path(os.environ["RECORDS_FILE"]).read_text().splitlines():
        out.write(line + "\\n")
        out.flush()
        time.sleep(0.01)
(run_dir / "summary.json").write_text(json.dumps({"interrupted": False, "global_step": 6}))
"""


def train_record(step: int) -> dict:
    return {
        "time": 1000.0 + step, "split": "train", "step": step, "epoch": step / 4,
        "loss": 2.0 / step, "accuracy": step / 10, "lr": step / 10_000,
        "samples_per_s": 500.0 + step, "data_wait_share": step / 100, "step_time_s": 0.01 * step,
    }  # fmt: skip


def telemetry_record(step: int) -> dict:
    return {
        "time": 1000.5 + step, "split": "telemetry", "step": step, "epoch": step / 4,
        "cpu_util_pct": 40.0 + step, "ram_used_mib": 3000.0 + step, "gpu0_temp_c": 50.0 + step,
        "gpu0_power_w": 10.5 + step,
    }  # fmt: skip


def run_records(telemetry: bool) -> list[dict]:
    records = []
    for step in range(1, 7):
        records.append(train_record(step))
        if telemetry and step % 2 == 0:
            records.append(telemetry_record(step))
    records.append({"time": 1010.0, "split": "val", "step": 6, "loss": 0.9, "accuracy": 0.625})
    return records


def read_events(client, run_id: str) -> list[tuple[str, object]]:
    events, name = [], None
    with client.stream("GET", f"/api/runs/{run_id}/events") as response:
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[6:])))
    return events


@pytest.fixture
def recording_client(make_client, tmp_path: Path, monkeypatch):
    """make_client(records) -> a client whose runs write `records` to metrics.jsonl."""
    script = tmp_path / "recording_trainer.py"
    script.write_text(TRAINER)

    def make(records: list[dict]):
        path = tmp_path / f"records-{len(records)}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        monkeypatch.setenv("RECORDS_FILE", str(path))
        return make_client(train_command=[sys.executable, str(script)])

    return make


def finished(client, run_id: str) -> dict:
    def check():
        view = client.get(f"/api/runs/{run_id}").json()
        return view if view["status"] not in ("running", "stopping") else None

    view = wait_for(check)
    assert view["status"] == "completed", view
    return view


def test_stream_status_and_page_carry_lr_throughput_wait_share_and_telemetry(recording_client):
    written = run_records(telemetry=True)
    client = recording_client(written)
    assert client.post("/api/runs", json=run_form()).status_code == 201
    events = read_events(client, "digits-web")
    streamed = [r for name, records in events if name == "metrics" for r in records]
    assert streamed == written  # every record, every value, in order, once
    assert events[-1][0] == "end"

    last_train, last_telemetry = train_record(6), telemetry_record(6)
    view = finished(client, "digits-web")
    train = view["latest"]["train"]
    assert (train["lr"], train["samples_per_s"], train["data_wait_share"]) == (6e-4, 506.0, 0.06)
    assert train == last_train
    assert view["latest"]["telemetry"] == last_telemetry
    assert view["latest"]["val"]["accuracy"] == 0.625
    assert (view["step"], view["epoch"], view["num_records"]) == (6, 1.5, len(written))
    assert client.get("/api/runs/digits-web/metrics").json()["records"] == written

    # The page starts from the same view (embedded JSON) before its stream connects.
    page = client.get("/runs/digits-web").text
    embedded = re.search(r'<script id="run-data" type="application/json">(.*?)</script>', page)
    data = json.loads(embedded.group(1))
    assert data["latest"]["train"]["lr"] == 6e-4
    assert data["latest"]["telemetry"]["gpu0_temp_c"] == 56.0
    for element in ("s-lr", "s-samples", "s-wait", "telemetry"):
        assert f'id="{element}"' in page


def test_a_run_without_telemetry_streams_none(recording_client):
    written = run_records(telemetry=False)
    client = recording_client(written)
    client.post("/api/runs", json=run_form())
    events = read_events(client, "digits-web")
    streamed = [r for name, records in events if name == "metrics" for r in records]
    assert [r["split"] for r in streamed] == ["train"] * 6 + ["val"]
    assert [r["data_wait_share"] for r in streamed[:-1]] == [s / 100 for s in range(1, 7)]
    view = finished(client, "digits-web")
    assert set(view["latest"]) == {"train", "val"}
