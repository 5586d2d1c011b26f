"""Tiny Hugging Face causal LMs made by `trainforge models init` (no hub), and run configs.

The models are created once per test session from a small corpus of prompt/response and
chat records (plus G2P-style TSV lines) and shared read-only by the text tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

RECORDS = [
    {"prompt": f"What is {a} plus {b}?", "response": f"{a} plus {b} is {a + b}."}
    for a in range(1, 9)
    for b in range(1, 9)
]
CHATS = [
    {
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": f"Say {word}."},
            {"role": "assistant", "content": f"{word}"},
            {"role": "user", "content": "Again, louder."},
            {"role": "assistant", "content": f"{word.upper()}!"},
        ]
    }
    for word in ("hello", "jetson", "orin", "spark", "train", "model")
]
TSV_LINES = ["hello\tHH AH L OW", "world\tW ER L D", "jetson\tJH EH T S AH N", "orin\tAO R IH N"]


@pytest.fixture
def single_thread():
    """Tiny models run several times faster on one thread than on busy shared cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def write_corpus(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": folder / "records.json",
        "chat": folder / "chat.jsonl",
        "tsv": folder / "pairs.tsv",
    }
    paths["json"].write_text(json.dumps(RECORDS), encoding="utf-8")
    paths["chat"].write_text("\n".join(json.dumps(c) for c in CHATS) + "\n", encoding="utf-8")
    paths["tsv"].write_text("\n".join(TSV_LINES) + "\n", encoding="utf-8")
    return paths


def make_model(folder: Path, arch: str, chat: bool, corpus: list[Path]) -> Path:
    from trainforge.models.hf_init import init_model

    return init_model(
        folder.name, arch=arch, size="tiny", corpus=corpus, chat_template=chat, dest=folder
    )


@pytest.fixture(scope="session")
def lm_corpus(tmp_path_factory) -> dict[str, Path]:
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory, lm_corpus) -> Path:
    """GPT-2 (tied lm_head/wte), no chat template."""
    return make_model(
        tmp_path_factory.mktemp("m") / "gpt2", "gpt2", False, list(lm_corpus.values())
    )


@pytest.fixture(scope="session")
def tiny_llama_chat(tmp_path_factory, lm_corpus) -> Path:
    """Llama (untied head) with a ChatML template."""
    return make_model(
        tmp_path_factory.mktemp("m") / "llama-chat", "llama", True, list(lm_corpus.values())
    )


def lm_overrides(model: Path, train_file: Path, **sets) -> list[str]:
    """--set overrides for a quiet, fast causal-lm run (fields can be replaced via sets)."""
    base = {
        "task.kind": "causal-lm",
        "model.arch": "hf",
        "model.model_name_or_path": str(model),
        "data.dataset": "text",
        "data.train_file": str(train_file),
        "data.max_seq_length": 64,
        "training.per_device_train_batch_size": 8,
        "training.max_grad_norm": 1000,
        "optimizer.learning_rate": 3e-3,
        "schedule.warmup_steps": 0,
        "schedule.lr_scheduler_type": "constant",
        "evaluation.per_device_eval_batch_size": 16,
        "checkpoint.save_every_epochs": "null",
        "checkpoint.save_best": "false",
        "logging.tensorboard": "false",
        "logging.jsonl": "false",
        "logging.progress_bar": "false",
        "training.num_threads": 1,
    }
    base.update(sets)
    return [f"{k}={v}" for k, v in base.items()]


def lm_config(model: Path, train_file: Path, **sets):
    from trainforge.config import load

    return load(None, profile="cpu", overrides=lm_overrides(model, train_file, **sets)).config
