"""The Models page's Try it box through FastAPI's TestClient: the box on the page, a real
`trainforge generate --json` child answering for a tiny model beside its recorded base, and
the refusals (a name, a missing model, the child's own one-line refusal)."""

from __future__ import annotations

import json
import shutil

import pytest

from fakes.tiny_lm import lm_corpus, tiny_gpt2  # noqa: F401  (session fixtures)
from trainforge.generate import command
from trainforge.generate.sources import Settings


@pytest.fixture
def tuned(project, tiny_gpt2):  # noqa: F811
    """models/tuned (a copy of the tiny GPT-2) that records models/base-tiny as its base."""
    models = project / "models"
    shutil.copytree(tiny_gpt2, models / "base-tiny")
    shutil.copytree(tiny_gpt2, models / "tuned")
    summary = {"base_model": "models/base-tiny", "base_model_path": "models/base-tiny"}
    (models / "tuned" / "trainforge.json").write_text(json.dumps(summary), encoding="utf-8")
    return models / "tuned"


def test_the_models_page_has_the_try_it_box(make_client, tuned):
    page = make_client().get("/models").text
    assert 'id="try-form"' in page and "/static/try.js" in page
    assert '<option value="tuned" data-base="models/base-tiny">tuned</option>' in page
    assert '<option value="base-tiny" data-base="">base-tiny</option>' in page
    assert make_client().get("/static/try.js").status_code == 200


def test_a_model_answers_beside_its_base(make_client, tuned, project, monkeypatch):
    body = {"model": "tuned", "prompt": "What is 1 plus 2?", "compare_base": True,
            "max_new_tokens": 4}  # fmt: skip
    response = make_client().post("/api/models/try", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert list(answer["answers"]) == ["models/tuned", "base (models/base-tiny)"]
    assert answer["models"][0].startswith("model models/tuned: models/tuned (prompt_template")
    monkeypatch.chdir(project)  # the child worked in the project folder
    alone = command.run(command.Request(["models/tuned"], ["What is 1 plus 2?"],
                                        settings=Settings(max_new_tokens=4)))  # fmt: skip
    assert answer["answers"]["models/tuned"] == alone["answers"][0]["answers"]["models/tuned"]


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"model": "../tuned", "prompt": "x"}, 400, "is not a plain name"),
        ({"model": "absent", "prompt": "x"}, 404, "no model 'absent' in models/"),
        ({"model": "tuned", "prompt": ""}, 422, None),
        ({"model": "tuned", "prompt": "x", "max_new_tokens": 0}, 422, None),
    ],
)
def test_requests_the_box_refuses(make_client, tuned, body, status, words):
    response = make_client().post("/api/models/try", json=body)
    assert response.status_code == status, response.text
    if words:
        assert words in response.json()["detail"]


def test_the_childs_refusal_is_its_one_line(make_client, tuned):
    """models/tuned --compare base where the base is gone: generate's own line, no traceback."""
    shutil.rmtree(tuned.parent / "base-tiny")
    body = {"model": "tuned", "prompt": "x", "compare_base": True, "max_new_tokens": 2}
    response = make_client().post("/api/models/try", json=body)
    assert response.status_code == 422
    assert response.json()["detail"] == (
        "--compare base: models/tuned records no base model. name the base model: "
        "--compare models/NAME"
    )
