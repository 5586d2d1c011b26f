"""A Hugging Face hub cache holding tiny random models of the reference architectures.

Written in huggingface_hub's real cache layout, so that its own lookup (and transformers') finds
them offline: `models--org--name/blobs/<sha256>`, `snapshots/<commit>/<file>` symlinks to
`../../blobs/<sha256>`, and `refs/main` holding the commit. Five families, each with its own
special tokens and chat template, tokenizers trained here with the `tokenizers` library:

- google/gemma-3-tiny-it: Gemma3ForCausalLM (Gemma3TextConfig), `<start_of_turn>`/`<end_of_turn>`
  turns, a generation config whose eos ids include `<end_of_turn>`;
- HuggingFaceTB/SmolLM2-tiny-Instruct: LlamaForCausalLM, ChatML;
- Qwen/Qwen3-tiny: Qwen3ForCausalLM, ChatML;
- mistralai/Mistral-tiny-Instruct: MistralForCausalLM, `[INST]` turns;
- openai-community/gpt2-tiny: GPT2LMHeadModel, no template.

Built once per session (`hf_cache`, read-only to the tests), 2 layers, width 32-64, vocabulary
~400: a few seconds in all.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakes.tiny_lm import CHATS, RECORDS, TSV_LINES

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
GEMMA = (
    "{{ bos_token }}{% for m in messages %}{% set role = 'model' if m['role'] == 'assistant' "
    "else m['role'] %}{{ '<start_of_turn>' + role + '\\n' + m['content'] + '<end_of_turn>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)
MISTRAL = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'assistant' %}"
    "{{ m['content'] + eos_token }}{% else %}{{ '[INST] ' + m['content'] + ' [/INST]' }}"
    "{% endif %}{% endfor %}"
)


@dataclass(frozen=True)
class Family:
    repo_id: str
    arch: str  # the architectures[0] transformers writes
    specials: dict[str, str]  # pad/bos/eos (+ extra chat markers under "extra")
    extra: tuple[str, ...]
    template: str | None
    stop_tokens: tuple[str, ...]  # generation_config.eos_token_id, in order


FAMILIES = {
    "gemma3": Family(
        "google/gemma-3-tiny-it", "Gemma3ForCausalLM",
        {"pad_token": "<pad>", "bos_token": "<bos>", "eos_token": "<eos>"},
        ("<start_of_turn>", "<end_of_turn>"), GEMMA, ("<eos>", "<end_of_turn>"),
    ),
    "llama": Family(
        "HuggingFaceTB/SmolLM2-tiny-Instruct", "LlamaForCausalLM",
        {"pad_token": "<|endoftext|>", "bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
        ("<|im_start|>", "<|im_end|>"), CHATML, ("<|im_end|>",),
    ),
    "qwen3": Family(
        "Qwen/Qwen3-tiny", "Qwen3ForCausalLM",
        {"pad_token": "<|endoftext|>", "eos_token": "<|im_end|>"},
        ("<|im_start|>", "<|im_end|>"), CHATML, ("<|im_end|>", "<|endoftext|>"),
    ),
    "mistral": Family(
        "mistralai/Mistral-tiny-Instruct", "MistralForCausalLM",
        {"pad_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
        ("[INST]", "[/INST]"), MISTRAL, ("</s>",),
    ),
    "gpt2": Family(
        "openai-community/gpt2-tiny", "GPT2LMHeadModel",
        {"pad_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
        (), None, ("<|endoftext|>",),
    ),
}  # fmt: skip


def _texts() -> list[str]:
    texts = [f"{r['prompt']} {r['response']}" for r in RECORDS] + TSV_LINES
    return texts + [m["content"] for c in CHATS for m in c["messages"]]


def _tokenizer(family: Family):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(dict.fromkeys([*family.specials.values(), *family.extra]))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_texts(), trainer)
    extra = [t for t in family.extra if t not in family.specials.values()]
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, additional_special_tokens=extra or None, **family.specials
    )
    if family.template:
        tokenizer.chat_template = family.template
    return tokenizer


def _config(name: str, tokenizer, stop_ids: list[int]):
    import transformers as tf

    ids = {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": stop_ids[0],
    }
    if name == "gpt2":
        return tf.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=256, **ids)
    common = {
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
    }  # fmt: skip
    if name == "gemma3":
        return tf.Gemma3TextConfig(
            head_dim=8, sliding_window=16, layer_types=["sliding_attention", "full_attention"],
            **common, **ids,
        )  # fmt: skip
    if name == "qwen3":
        return tf.Qwen3Config(head_dim=8, tie_word_embeddings=True, **common, **ids)
    if name == "mistral":
        return tf.MistralConfig(sliding_window=None, **common, **ids)
    return tf.LlamaConfig(tie_word_embeddings=True, **common, **ids)


def save_family(name: str, dest: Path) -> None:
    """save_pretrained a tiny random model of the family into `dest` (a plain folder)."""
    import torch
    from transformers import AutoModelForCausalLM

    family = FAMILIES[name]
    tokenizer = _tokenizer(family)
    stop_ids = [tokenizer.convert_tokens_to_ids(t) for t in family.stop_tokens]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_config(name, tokenizer, stop_ids))
    model.generation_config.eos_token_id = stop_ids if len(stop_ids) > 1 else stop_ids[0]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(str(dest), safe_serialization=True)
    tokenizer.save_pretrained(str(dest))


def commit_of(repo_id: str, revision: str = "main") -> str:
    return hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()


def store_in_cache(folder: Path, cache: Path, repo_id: str, revision: str = "main") -> Path:
    """Move a model folder's files into the cache layout; returns the snapshot folder."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    commit = commit_of(repo_id, revision)
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        blob = repo / "blobs" / sha
        if not blob.exists():
            shutil.copyfile(path, blob)
        link = snapshot / path.name
        if not link.exists():
            os.symlink(os.path.join("..", "..", "blobs", sha), link)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / revision).write_text(commit, encoding="utf-8")
    return snapshot


@dataclass(frozen=True)
class HubCache:
    """The cache folder (for HF_HUB_CACHE) and each family's plain save_pretrained folder."""

    root: Path
    folders: dict[str, Path]

    def repo_id(self, name: str) -> str:
        return FAMILIES[name].repo_id


@pytest.fixture(scope="session")
def hf_cache(tmp_path_factory) -> HubCache:
    """The five families in one Hugging Face cache (built once, read-only)."""
    base = tmp_path_factory.mktemp("hf")
    root, folders = base / "hub", {}
    for name, family in FAMILIES.items():
        folder = base / "plain" / name
        save_family(name, folder)
        store_in_cache(folder, root, family.repo_id)
        folders[name] = folder
    return HubCache(root=root, folders=folders)
