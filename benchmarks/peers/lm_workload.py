"""The language-model benchmark's shared inputs, made once per run in a scratch folder.

- the G2P model of `config/g2p_cmudict.yaml`: `models init`'s llama at the g2p size with a
  tokenizer trained on the CMUdict train split (`trainforge.models.hf_init.init_model`);
- a Gemma-3-270m-shaped model: the published text config (hidden 640, 18 layers, 4 heads,
  1 key-value head, head_dim 256, intermediate 2048, a 262,144-token vocabulary, tied
  embeddings) with random weights, saved with the G2P tokenizer, so the data is the same and
  the head is the real width;
- the train split encoded once by trainforge's own encoder (prompt tokens masked), written
  as `input_ids` + `completion_mask` rows for the peers, so every side trains the same ids;
- a 64-word validation file: trainforge's run always ends with one validation pass, kept
  small here because the peers run none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
G2P = REPO / "example_datasets" / "g2p"
CONFIG = REPO / "config" / "g2p_cmudict.yaml"
MAX_SEQ_LENGTH = 64  # the G2P recipe's data.options.max_seq_length
PROMPT_TEMPLATE = "{prompt}\n"  # the G2P recipe's prompt_template
VALIDATION_WORDS = 64

# google/gemma-3-270m's text config, as published; the rest are Gemma3TextConfig defaults.
GEMMA_270M = {
    "hidden_size": 640,
    "num_hidden_layers": 18,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "intermediate_size": 2048,
    "vocab_size": 262_144,
    "tie_word_embeddings": True,
    "max_position_embeddings": 32_768,
    "sliding_window": 512,
}


@dataclass
class LmData:
    """Paths every side reads, and the ids the instruments need."""

    work: Path
    train_file: Path
    validation_file: Path
    examples: Path  # JSON lines: input_ids, completion_mask
    g2p_model: Path
    pad_id: int
    num_examples: int
    mean_tokens: float
    num_train_tokens: int


def encode_train(tokenizer: Any, train_file: Path, limit: int | None = None) -> list[Any]:
    from trainforge.data.text.encode import Encoder
    from trainforge.data.text.records import read_records

    records = read_records(train_file)[:limit]
    encoder = Encoder(tokenizer, max_seq_length=MAX_SEQ_LENGTH, prompt_template=PROMPT_TEMPLATE)
    return encoder.encode(records)[0]


def prepare(work: Path, train_lines: int | None = None) -> LmData:
    """Models, data and encoded examples under `work`; `train_lines`: the first lines of the
    train split only (the test's tiny workload)."""
    from transformers import AutoTokenizer

    from trainforge.models.hf_init import init_model

    work.mkdir(parents=True, exist_ok=True)
    train_file = G2P / "cmudict_train.tsv"
    if train_lines:
        train_file = work / "train.tsv"
        lines = (G2P / "cmudict_train.tsv").read_text().splitlines(True)
        train_file.write_text("".join(lines[:train_lines]))
    validation = work / "validation.tsv"
    lines = (G2P / "cmudict_val.tsv").read_text().splitlines(True)
    validation.write_text("".join(lines[:VALIDATION_WORDS]))
    model = init_model("g2p", arch="llama", size="g2p", corpus=[train_file], dest=work / "g2p")
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    examples = encode_train(tokenizer, train_file)
    path = work / "examples.jsonl"
    with path.open("w") as fh:
        for ex in examples:
            mask = [int(label != -100) for label in ex.labels]
            fh.write(json.dumps({"input_ids": ex.input_ids, "completion_mask": mask}) + "\n")
    tokens = sum(len(ex.input_ids) for ex in examples)
    return LmData(
        work, train_file, validation, path, model, int(tokenizer.pad_token_id), len(examples),
        tokens / len(examples), tokens,
    )  # fmt: skip


def gemma_model(data: LmData, **overrides: Any) -> Path:
    """The Gemma-3-270m-shaped model (random, seed 0) with the G2P tokenizer, under work/."""
    import torch
    from transformers import AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig

    shape = {**GEMMA_270M, **overrides}
    dest = data.work / f"gemma-{shape['num_hidden_layers']}x{shape['hidden_size']}"
    if (dest / "config.json").is_file():
        return dest
    tokenizer = AutoTokenizer.from_pretrained(str(data.g2p_model))
    config = Gemma3TextConfig(
        **shape,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(config)
    model.save_pretrained(str(dest), safe_serialization=True)
    tokenizer.save_pretrained(str(dest))
    return dest


def num_parameters(model_dir: Path) -> int:
    """Parameters of a saved model, read from its safetensors headers (nothing loaded)."""
    from safetensors import safe_open

    total = 0
    for file in model_dir.glob("*.safetensors"):
        with safe_open(str(file), "pt") as fh:
            for name in fh.keys():  # noqa: SIM118 (safe_open has keys(), no __iter__)
                shape = fh.get_slice(name).get_shape()
                count = 1
                for size in shape:
                    count *= size
                total += count
    return total


@dataclass
class ProbeSet:
    """A fixed held-out batch: each side's final model is scored on it (completion loss)."""

    input_ids: Any
    labels: Any
    attention_mask: Any


def probe_set(data: LmData, count: int = 512) -> ProbeSet:
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(data.g2p_model))
    lines = (G2P / "cmudict_val.tsv").read_text().splitlines(True)
    path = data.work / "probe.tsv"
    path.write_text("".join(lines[VALIDATION_WORDS : VALIDATION_WORDS + count]))
    examples = encode_train(tokenizer, path)
    width = max(len(ex.input_ids) for ex in examples)
    ids = torch.full((len(examples), width), data.pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for row, ex in enumerate(examples):
        ids[row, : len(ex.input_ids)] = torch.tensor(ex.input_ids)
        labels[row, : len(ex.labels)] = torch.tensor(ex.labels)
    return ProbeSet(ids, labels, (ids != data.pad_id).long())


def probe_loss(model_dir: Path, probe: ProbeSet) -> float:
    """Mean next-token cross-entropy over the probe set's completion tokens."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        out = model(input_ids=probe.input_ids, attention_mask=probe.attention_mask)
        logits = out.logits[:, :-1].float()
        target = probe.labels[:, 1:]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100
        )
    return float(loss)
