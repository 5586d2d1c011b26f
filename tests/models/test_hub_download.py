"""The download path of a base model by id: huggingface_hub's real client against a loopback
stand-in for the Hub (fakes.hub_server), into an empty cache."""

from __future__ import annotations

import hashlib

import pytest

from fakes.hf_cache import commit_of
from fakes.hub_server import HubState, hub_server
from trainforge.errors import UserError
from trainforge.models.hub import resolve_hub_model

REPO_ID = "openai-community/gpt2-tiny"


@pytest.fixture
def hub(hf_cache, tmp_path, monkeypatch):
    """An empty cache, downloads on, HF_ENDPOINT at the stand-in (constants read at import)."""
    from huggingface_hub import constants

    state = HubState()
    revisions = {"main": commit_of(REPO_ID), "v1": commit_of(REPO_ID, "v1")}
    state.add_folder(REPO_ID, hf_cache.folders["gpt2"], revisions)
    state.add_folder("google/gated-tiny", hf_cache.folders["gpt2"], {"main": "a" * 40}, True)
    cache = tmp_path / "cache"
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-tokens"))
    with hub_server(state) as endpoint:
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        template = endpoint + "/{repo_id}/resolve/{revision}/{filename}"
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
        yield state, cache, hf_cache.folders["gpt2"]


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_id_downloads_into_the_cache_layout(hub, capsys):
    _, cache, source = hub
    found = resolve_hub_model(REPO_ID)
    assert found.commit == commit_of(REPO_ID)
    assert found.path.parent.parent == cache / "models--openai-community--gpt2-tiny"
    assert (found.path.parent.parent / "refs" / "main").read_text() == found.commit
    for name in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json"):
        assert (found.path / name).is_symlink() and _sha(found.path / name) == _sha(source / name)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "fetching from the Hub" in out and "it/s" not in out
    # Cached now: the same id resolves offline.
    assert resolve_hub_model(REPO_ID, download=False).path == found.path


def test_only_the_files_a_causal_lm_needs_are_fetched(hub):
    """The repo also holds what a causal LM's folder does not need (PyTorch pickles, GGUF,
    ONNX, Meta's original checkpoint): the allow-list leaves them on the Hub."""
    state, _, _ = hub
    extra = ("pytorch_model.bin", "model-q4.gguf", "onnx/model.onnx", "original/consolidated.pth")
    state.repos[REPO_ID].files.update({name: b"not needed" for name in extra})
    found = resolve_hub_model(REPO_ID)
    assert (found.path / "model.safetensors").is_file()
    assert not set(extra) & set(state.fetched)
    assert not [p for p in found.path.rglob("*") if p.name in {n.split("/")[-1] for n in extra}]


def test_a_gated_id_downloads_with_hf_token_and_the_token_is_written_nowhere(
    hub, monkeypatch, capsys, tmp_path
):
    """HF_TOKEN from the environment reaches the Hub as the Authorization header; no file
    the pull and a run from the id write holds it, nor does anything printed."""
    from huggingface_hub import constants

    from fakes.in_process import run_in_process
    from fakes.tiny_lm import lm_overrides

    state, cache, _ = hub
    secret = "hf_trainforgeTestSecret0123456789"
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setattr(constants, "HF_TOKEN", secret, raising=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_in_process(monkeypatch, capsys, "models", "pull", "google/gated-tiny")
    assert code == 0, err
    assert f"Bearer {secret}" in state.tokens
    corpus = tmp_path / "train.jsonl"
    corpus.write_text('{"prompt": "a b", "completion": "c d"}\n' * 16, encoding="utf-8")
    sets = lm_overrides("google/gated-tiny", corpus, **{  # type: ignore[arg-type]
        "training.max_steps": 1, "hardware.telemetry": "false", "logging.jsonl": "true",
        "evaluation.eval_every_epochs": "null", "output.dir": str(tmp_path / "runs"),
        "output.models_dir": str(tmp_path / "models"), "output.model_name": "gated"})  # fmt: skip
    (tmp_path / "run.yaml").write_text("task:\n  kind: causal-lm\n", encoding="utf-8")
    args = [a for s in sets for a in ("--set", s)]
    code, trained, err = run_in_process(monkeypatch, capsys, "train", "run.yaml", *args)
    assert code == 0, err
    assert secret not in out + err + trained
    written = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()]
    assert any(p.name == "run.json" for p in written) and any(cache in p.parents for p in written)
    assert not [p for p in written if secret.encode() in p.read_bytes()]


def test_an_interrupted_download_resumes_where_it_stopped(hub, monkeypatch):
    """The server cuts model.safetensors halfway once; the client asks for the rest (Range)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 4096)  # chunks smaller than the file
    state, _, source = hub
    state.drop_once.add("model.safetensors")
    found = resolve_hub_model(REPO_ID)
    assert not state.drop_once  # the server did cut it
    assert _sha(found.path / "model.safetensors") == _sha(source / "model.safetensors")
    half = (source / "model.safetensors").stat().st_size // 2
    assert len(state.ranges) == 1
    start = int(state.ranges[0].split("=")[1].rstrip("-"))
    assert state.ranges[0].startswith("model.safetensors") and 0 < start <= half


def test_a_revision_pin_downloads_that_commit(hub):
    _, cache, _ = hub
    found = resolve_hub_model(f"{REPO_ID}@v1")
    assert found.commit == commit_of(REPO_ID, "v1") and found.revision == "v1"
    refs = cache / "models--openai-community--gpt2-tiny" / "refs"
    assert (refs / "v1").read_text() == found.commit and not (refs / "main").exists()


def test_an_unknown_revision_is_one_line(hub):
    with pytest.raises(UserError) as err:
        resolve_hub_model(f"{REPO_ID}@no-such-tag")
    assert "no revision 'no-such-tag'" in err.value.message


def test_a_gated_id_without_a_token_names_hf_token(hub):
    with pytest.raises(UserError) as err:
        resolve_hub_model("google/gated-tiny")
    assert "gated" in err.value.message and "HF_TOKEN" in err.value.fix


def test_an_unknown_id_is_one_line(hub):
    with pytest.raises(UserError) as err:
        resolve_hub_model("nobody/nothing")
    assert "no model nobody/nothing" in err.value.message and "HF_TOKEN" in err.value.fix


def test_models_pull_downloads_and_refuses_a_folder_name(hub, monkeypatch, capsys, tmp_path):
    from fakes.in_process import run_in_process

    _, cache, _ = hub
    monkeypatch.chdir(tmp_path)
    code, out, err = run_in_process(monkeypatch, capsys, "models", "pull", f"{REPO_ID}@v1")
    assert code == 0, err
    assert f"commit {commit_of(REPO_ID, 'v1')}" in out and f"--base-model {REPO_ID}@v1" in out
    snapshot = (
        cache / "models--openai-community--gpt2-tiny" / "snapshots" / commit_of(REPO_ID, "v1")
    )
    assert (snapshot / "model.safetensors").is_file()
    code, _, err = run_in_process(monkeypatch, capsys, "models", "pull", "./models/tiny")
    assert code == 2 and "is not a Hugging Face id" in err and "Traceback" not in err


def test_no_answer_from_the_hub_is_one_line_naming_the_endpoint(hub, monkeypatch):
    from huggingface_hub import constants

    with hub_server(HubState()) as closed:  # a port that was served and is closed again
        pass
    monkeypatch.setattr(constants, "ENDPOINT", closed)
    with pytest.raises(UserError) as err:
        resolve_hub_model(REPO_ID)
    assert "did not answer" in err.value.message and closed in err.value.message
    assert "downloads are off" not in err.value.message
