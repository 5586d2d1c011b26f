"""The options of dataset `text`: prompt/response records that the causal-lm task reads,
tokenizes and (optionally) packs. Its fields were flat fields of `data` once
(`data.train_file`); those spellings still load (see `config.schema.DATA_FLAT`).

How train batches are made (`packing`, `group_by_length`) is the recipe's choice, said in one
start line (`config.plan.text_batching`); no device switches either on."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from trainforge.data.options.split import SplitOptions


class TextOptions(SplitOptions):
    """text: the record files and how each record becomes tokens."""

    train_file: str | None = Field(
        None, description="Training records (.json, .jsonl, .tsv or .csv)."
    )
    validation_file: str | None = Field(
        None, description="Validation records (None: hold out val_fraction of train_file)."
    )
    test_file: str | None = Field(
        None, description="Test records, used by benchmarks and final reports only."
    )
    header: bool | Literal["auto"] = Field(
        "auto",
        description="Whether the first line of a .tsv/.csv file names its columns (skipped); "
        "auto: when both its cells are column names such as word,phonemes.",
    )
    max_seq_length: int = Field(
        512, ge=8, description="Tokens per example; longer ones are truncated and counted."
    )
    # Both are part of the recipe, not of the hardware: packing changes how many examples a
    # step holds, and length grouping changed what a short G2P run learned (PER 0.81 against
    # 0.64 after the same 250 steps), so neither is switched on by a device.
    packing: bool = Field(
        False,
        description="Concatenate training examples into rows of max_seq_length tokens with "
        "per-example position ids, so no example attends to another (TRL SFTConfig(packing="
        "True, padding_free=True)). A step then holds more examples than its batch size.",
    )
    group_by_length: bool = Field(
        False,
        description="Without packing, make each optimizer step of examples of similar "
        "length so batches pad little (HF TrainingArguments.group_by_length).",
    )
    prompt_template: str = Field(
        "{prompt}\n",
        description="How a prompt (or TSV source) is written before the response when no "
        "chat template is used; must contain {prompt}.",
    )
    use_chat_template: bool = Field(
        True, description="Render records with the tokenizer's chat template if it has one."
    )
    val_fraction: float = Field(
        0.2,
        gt=0.0,
        lt=1.0,
        description="Held-out share of train_file for validation when no validation_file is "
        "given (a fixed, seeded split).",
    )
