"""`trainforge models init`: a small randomly initialised causal LM with its own tokenizer.

Demos and tests need a Hugging Face model folder without downloading one. This writes
`models/NAME/` exactly as `save_pretrained` would for a hub model: config.json,
model.safetensors, a byte-level BPE tokenizer trained on the given corpus with the
`tokenizers` library (tokenizer.json + tokenizer_config.json), generation_config.json and a
trainforge.json saying how it was made. `--chat-template` adds a ChatML template with
`<|im_start|>`/`<|im_end|>` turns, so the chat path of the text data works too.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from trainforge.data.text.records import read_records
from trainforge.errors import UserError
from trainforge.models.hf import SUMMARY_FILE, output_dir, require_llm_extra, staged_folder

PAD, EOS = "<|pad|>", "<|endoftext|>"
CHAT_START, CHAT_END = "<|im_start|>", "<|im_end|>"
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Sizes: tiny for tests (a few hundred thousand parameters), small for CPU demos; g2p for
# grapheme-to-phoneme pairs: short sequences (positions 128), a vocabulary about the size of
# the letters, phonemes and their common pairs, and a width that greedy-decodes the 12,500
# validation and test words of CMUdict in about a minute on one busy CPU core (the G2P
# literature's Transformers are 3-4 layers, 128-256 wide).
SIZES: dict[str, dict[str, int]] = {
    "tiny": {"layers": 2, "width": 64, "heads": 2, "positions": 512, "vocab": 512},
    "small": {"layers": 4, "width": 256, "heads": 4, "positions": 1024, "vocab": 2048},
    "g2p": {"layers": 4, "width": 128, "heads": 4, "positions": 128, "vocab": 512},
}
ARCHS = ("gpt2", "llama")


def corpus_texts(paths: list[Path]) -> list[str]:
    """Texts of the corpus files: records (.json/.jsonl/.tsv/.csv) or plain .txt lines."""
    texts: list[str] = []
    for path in paths:
        if path.suffix.lower() == ".txt":
            if not path.is_file():
                raise UserError(f"corpus file {path} not found", "check --corpus")
            texts += [line for line in path.read_text(encoding="utf-8").splitlines() if line]
        else:
            texts += [t for record in read_records(path, "--corpus") for t in record.texts()]
    if not texts:
        raise UserError("the corpus is empty", "pass --corpus files with text in them")
    return texts


def corpus_fact(path: Path) -> dict[str, Any]:
    """What identifies a corpus file: its path as given, SHA-256 and size in bytes."""
    digest = hashlib.sha256()
    with Path(path).expanduser().open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return {"path": str(path), "sha256": digest.hexdigest(), "size_bytes": path.stat().st_size}


def _corpus_facts(corpus: list[Path]) -> list[dict]:
    return [corpus_fact(Path(p)) for p in corpus if Path(p).is_file()]


def train_tokenizer(texts: list[str], vocab_size: int, chat_template: bool) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [PAD, EOS] + ([CHAT_START, CHAT_END] if chat_template else [])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        bos_token=EOS,
        eos_token=CHAT_END if chat_template else EOS,
        additional_special_tokens=[CHAT_START] if chat_template else None,
    )
    if chat_template:
        tokenizer.chat_template = CHATML
    return tokenizer


def build_config(arch: str, size: str, tokenizer: Any) -> Any:
    s = SIZES[size]
    ids = {
        "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if arch == "gpt2":
        from transformers import GPT2Config

        return GPT2Config(
            n_layer=s["layers"], n_embd=s["width"], n_head=s["heads"], n_positions=s["positions"],
            **ids,
        )  # fmt: skip
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=s["width"],
        intermediate_size=s["width"] * 8 // 3,
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=max(1, s["heads"] // 2),
        max_position_embeddings=s["positions"],
        tie_word_embeddings=False,
        **ids,
    )


def init_model(
    name: str,
    *,
    arch: str,
    size: str,
    corpus: list[Path],
    models_dir: str | Path = "models",
    vocab_size: int | None = None,
    chat_template: bool = False,
    seed: int = 0,
    overwrite: bool = False,
    dest: Path | None = None,
    corpus_files: list[dict] | None = None,
) -> Path:
    """Write a random-init model + trained tokenizer to models_dir/name (or `dest`).
    trainforge.json records each corpus file's path, SHA-256 and size (`corpus_files`
    when the caller hashed them already), which ties the model to its corpus
    (`trainforge.models.base_model`)."""
    require_llm_extra()
    if arch not in ARCHS:
        raise UserError(f"--arch {arch!r} is not supported", f"use one of {', '.join(ARCHS)}")
    if size not in SIZES:
        raise UserError(f"--size {size!r} is not known", f"use one of {', '.join(SIZES)}")
    folder = dest if dest is not None else output_dir(models_dir, name, overwrite, "NAME")
    if dest is not None and dest.exists() and any(dest.iterdir()) and not overwrite:
        raise UserError(f"model folder {dest} already exists", "pass --overwrite to replace it")
    import torch
    from transformers import AutoModelForCausalLM

    texts = corpus_texts([Path(p) for p in corpus])
    tokenizer = train_tokenizer(texts, vocab_size or SIZES[size]["vocab"], chat_template)
    config = build_config(arch, size, tokenizer)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    summary = {
        "created_by": "trainforge models init",
        "arch": arch,
        "size": size,
        "seed": seed,
        "corpus": [str(p) for p in corpus],
        "corpus_files": corpus_files or _corpus_facts(corpus),
        "vocab_size": len(tokenizer),
        "chat_template": chat_template,
        "num_parameters": sum(p.numel() for p in model.parameters()),
    }
    import json

    with staged_folder(folder) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        (tmp / SUMMARY_FILE).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return folder
