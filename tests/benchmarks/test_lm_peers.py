"""The language-model benchmark trains the same thing on every side (tiny sizes, no timing).

Each side runs in its own process on a few hundred G2P words for a few steps; with equal
batching the sides must do the same steps on the same non-pad tokens and end at the same
held-out loss, which training moved away from the untrained model's. A side that fed other
batches, masked other tokens or used another schedule would break one of these.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import lm_peers
from peers.lm_workload import gemma_model, prepare, probe_loss, probe_set

TINY_GEMMA = {
    "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 64, "vocab_size": 2048,
}  # fmt: skip


def test_trainforge_and_trl_train_the_same_tokens_to_the_same_loss(tmp_path):
    data = prepare(tmp_path, train_lines=200)
    recipe = lm_peers.Recipe(steps=3, batch=8)
    runs = lm_peers.rounds(
        data, data.g2p_model, recipe, [lm_peers.TRAINFORGE, lm_peers.TRL], 1, "t"
    )
    (ours,), (trl,) = runs[lm_peers.TRAINFORGE], runs[lm_peers.TRL]
    assert ours.steps == trl.steps == recipe.steps
    # Steps 2 and 3: two batches of 8 words, the same words on both sides.
    assert ours.tokens == trl.tokens > 16
    assert ours.tokens_per_s > 0 and trl.tokens_per_s > 0
    assert 0 < ours.before_first_s < ours.wall_s and 0 < ours.after_last_s < ours.wall_s
    assert ours.peak_rss_mib > 100 and trl.peak_rss_mib > 100
    probe = probe_set(data, count=64)
    initial = probe_loss(data.g2p_model, probe)
    losses = [probe_loss(run.model_dir, probe) for run in (ours, trl)]
    moved = abs(losses[0] - initial)
    assert moved > 1e-3
    assert abs(losses[0] - losses[1]) < moved / 20


def test_the_peers_venv_is_made_from_the_bench_extra_once(tmp_path, monkeypatch):
    """A stale or missing venv is made with `venv` and pip from the `bench` extra beside this
    torch version; a current stamp makes nothing (the commands are recorded, not run)."""
    import subprocess
    import tomllib

    import torch
    from peers import venv

    monkeypatch.setenv("TRAINFORGE_PEER_VENV", str(tmp_path / "peers"))
    calls: list[list[str]] = []

    def record(argv, **kwargs):
        calls.append([str(a) for a in argv])
        if argv[1:3] == ["-m", "venv"]:
            (tmp_path / "peers" / "bin").mkdir(parents=True, exist_ok=True)
            (tmp_path / "peers" / "bin" / "python").write_text("")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(venv.subprocess, "run", record)
    python = venv.peer_python(log=lambda line: None)
    assert python == tmp_path / "peers" / "bin" / "python"
    project = tomllib.loads((venv.ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    bench = project["project"]["optional-dependencies"]["bench"]
    assert any("trl" in r for r in bench)
    torch_pin = f"torch=={torch.__version__.split('+')[0]}"
    assert calls[-1][-len(bench) - 1 :] == [torch_pin, *bench]
    assert calls[0][1:3] == ["-m", "venv"] and len(calls) == 3
    calls.clear()
    assert venv.peer_python(log=lambda line: None) == python and calls == []
    monkeypatch.setattr(venv, "bench_requirements", lambda: [*bench, "trl>=99"])
    venv.peer_python(log=lambda line: None)  # the extra changed: made again
    assert calls and calls[-1][-1] == "trl>=99"


def test_gemma_shaped_model_is_built_with_the_tokenizer_and_tied_head(tmp_path):
    data = prepare(tmp_path, train_lines=50)
    folder = gemma_model(data, **TINY_GEMMA)
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(folder)
    assert config.model_type == "gemma3_text" and config.tie_word_embeddings
    assert (config.vocab_size, config.head_dim, config.num_key_value_heads) == (2048, 16, 1)
    assert config.pad_token_id == data.pad_id
    assert AutoTokenizer.from_pretrained(folder).pad_token_id == data.pad_id
    assert gemma_model(data, **TINY_GEMMA) == folder  # built once per run


@pytest.mark.slow
def test_the_whole_module_gives_every_row(tmp_path):
    text, ratios = lm_peers.run(
        lm_peers.Recipe(steps=3, batch=8), lm_peers.Recipe(steps=3, batch=2), repeats=1,
        train_lines=200, gemma_shape=TINY_GEMMA, peers=sys.executable,  # no venv made here
    )  # fmt: skip
    keys = {row[1] for row in __import__("run").BENCHMARKS if row[0] == "lm_peers"}
    assert keys <= set(ratios)
    assert "HF Trainer" in text and "Gemma-3-270m-shaped" in text
