"""The web app starts a real `trainforge train` on the GPU and follows it to the end."""

from __future__ import annotations

import json

import pytest
import torch

from fakes.web import TINY_VIT, run_form, wait_for
from trainforge.runfolder import RunFolder

pytestmark = pytest.mark.gpu


def test_the_web_app_runs_a_cuda_training_to_the_end(make_client, project):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: run `make test-gpu` on a GPU machine")
    client = make_client(fixture=None, fake=False)  # the machine itself, not a recording
    overrides = [*TINY_VIT, "training.device=cuda", "training.max_steps=200",
                 "logging.logging_steps=20"]  # fmt: skip
    response = client.post("/api/runs", json=run_form(overrides=overrides))
    assert response.status_code == 201, response.text

    def finished():
        view = client.get("/api/runs/digits-web").json()
        return view if view["status"] not in ("running", "stopping", "queued") else None

    view = wait_for(finished, timeout=300)
    log = "\n".join(client.get("/api/runs/digits-web/log").json()["lines"])
    assert view["status"] == "completed", log
    summary = json.loads(RunFolder(project / "runs" / "digits-web").summary.read_text())
    assert summary["device"].startswith("cuda") and summary["global_step"] == 200
    assert summary["mfu_measured"] > 0
