"""Entry point for text data: data config + tokenizer -> resumable train/val/test loaders.

Owns `TokenDataset` (pre-tokenized examples; `__getitems__` pads a whole batch at once) and
`build_text_data`. A batch is a dict of CPU tensors plus `num_targets`, the number of tokens
the loss is taken over, counted on the host so the training loop weights the batch without
a device synchronisation. Packed rows (`encode.pack`) also carry `position_ids` that restart
at each example, the pad tail of a row in a run of its own, so that the model given
`attention_mask=None` masks every example from the others and from the padding. Evaluation
batches also carry the left-padded generation prompts and the reference responses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from trainforge.config.plan import text_batching
from trainforge.data.loaders import make_loader
from trainforge.data.text.encode import IGNORE, Encoder, EncodeStats, Example, pack
from trainforge.data.validate import validate_text_data


class TokenDataset(Dataset):
    """Examples padded batch by batch. With prompts, the rows of `generate_rows` (None:
    every row) also carry their generation prompt: validation during training decodes a
    fixed subset (`evaluation.generation_samples`), the final evaluation every row."""

    def __init__(
        self,
        examples: list[Example],
        pad_id: int,
        with_prompts: bool = False,
        generation_samples: int | None = None,
        group_by_length: bool = False,
    ) -> None:
        self.examples = examples
        # Read by the train loader's sampler (`sampling.length_grouped_order`).
        self.group_lengths = [len(e.input_ids) for e in examples] if group_by_length else None
        self.pad_id = int(pad_id)
        self.with_prompts = with_prompts
        self.generate_rows: frozenset[int] | None = None
        if with_prompts and generation_samples is not None and generation_samples < len(examples):
            self.generate_rows = frozenset(evenly_spaced(len(examples), generation_samples))

    @property
    def num_generated(self) -> int:
        """Rows decoded per pass (0 without prompts)."""
        if not self.with_prompts:
            return 0
        return len(self.examples) if self.generate_rows is None else len(self.generate_rows)

    def all_generated(self) -> TokenDataset:
        """The same examples with every row decoded (the final and `evaluate` passes)."""
        return TokenDataset(self.examples, self.pad_id, with_prompts=self.with_prompts)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.__getitems__([index])

    def __getitems__(self, indices: list[int]) -> dict[str, Any]:
        rows = [self.examples[i] for i in indices]
        width = max(len(r.input_ids) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        packed = rows[0].position_ids is not None
        # The pad tail restarts at 0 too: a run of its own, never part of a real example.
        positions = torch.arange(width).repeat(len(rows), 1) if packed else None
        for i, row in enumerate(rows):
            n = len(row.input_ids)
            input_ids[i, :n] = torch.tensor(row.input_ids)
            labels[i, :n] = torch.tensor(row.labels)
            attention_mask[i, :n] = 1
            if positions is not None:
                positions[i, :n] = torch.tensor(row.position_ids)
                positions[i, n:] -= n
        batch: dict[str, Any] = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": labels,
            # The loss predicts token t+1 from tokens <= t: label 0 is never a target.
            "num_targets": int((labels[:, 1:] != IGNORE).sum()),
        }
        if positions is not None:
            batch["position_ids"] = positions
        if self.with_prompts:
            chosen = self.generate_rows
            pairs = zip(indices, rows, strict=True)
            decoded = [r for i, r in pairs if chosen is None or i in chosen]
            if decoded:
                batch.update(self._prompts(decoded))
        return batch

    def _prompts(self, rows: list[Example]) -> dict[str, Any]:
        """Left-padded prompts, so that greedy generation continues every row at once."""
        width = max(r.prompt_len for r in rows)
        prompt_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        prompt_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            n = row.prompt_len
            prompt_ids[i, width - n :] = torch.tensor(row.input_ids[:n])
            prompt_mask[i, width - n :] = 1
        return {
            "prompt_ids": prompt_ids,
            "prompt_mask": prompt_mask,
            "references": [r.reference for r in rows],
            # Response tokens (with the end token) of the longest reference: a bound for
            # generation, which need not go on far past it (`tasks.causal_lm`).
            "max_target_tokens": max(len(r.input_ids) - r.prompt_len for r in rows),
        }


def evenly_spaced(total: int, count: int) -> list[int]:
    """`count` indices spread evenly over range(total), the same every time."""
    if count >= total:
        return list(range(total))
    return sorted({round(i * (total - 1) / max(1, count - 1)) for i in range(count)})


@dataclass
class TextData:
    train_loader: StatefulDataLoader
    val_loader: StatefulDataLoader
    test_loader: StatefulDataLoader | None
    num_train: int
    num_val: int
    stats: dict[str, EncodeStats] = field(default_factory=dict)


def pad_token_id(tokenizer: Any) -> int:
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else tokenizer.eos_token_id)


def build_text_data(
    cfg: Any,
    tokenizer: Any,
    *,
    batch_size: int,
    eval_batch_size: int,
    seed: int,
    with_prompts: bool = False,
    accumulation: int = 1,
    generation_samples: int | None = None,
    step_batch: int | None = None,
) -> TextData:
    """Read, split, tokenize and wrap the text files of the data section. With prompts,
    validation decodes `generation_samples` evenly spaced rows (None: all); the test split,
    read only at the end, decodes all."""
    splits = validate_text_data(cfg)
    datasets, stats = _datasets(splits, cfg.options, tokenizer, with_prompts, generation_samples)
    common = {"cfg": cfg, "seed": seed, "batched_fetch": True}
    loaders = {
        name: make_loader(
            data,
            batch_size=batch_size if name == "train" else eval_batch_size,
            train=name == "train",
            accumulation=accumulation if name == "train" else 1,
            step_batch=step_batch if name == "train" else None,
            **common,
        )
        for name, data in datasets.items()
    }
    return TextData(
        train_loader=loaders["train"],
        val_loader=loaders["val"],
        test_loader=loaders.get("test"),
        num_train=stats["train"].num_examples,
        num_val=len(datasets["val"]),
        stats=stats,
    )


def _encoder(opts: Any, tokenizer: Any) -> Encoder:
    encoder = Encoder(
        tokenizer,
        max_seq_length=opts.max_seq_length,
        prompt_template=opts.prompt_template,
        use_chat_template=opts.use_chat_template,
    )
    if opts.use_chat_template and not encoder.chat:  # one line a run, not one a record
        print(
            "the tokenizer has no chat template: records are written with "
            f"data.options.prompt_template {opts.prompt_template!r}"
        )
    return encoder


def _datasets(
    splits: dict[str, Any],
    opts: Any,
    tokenizer: Any,
    with_prompts: bool,
    generation_samples: int | None,
) -> tuple[dict[str, TokenDataset], dict[str, EncodeStats]]:
    """Each split tokenized; the train split packed or grouped by length as planned."""
    packing, group_by_length, _ = text_batching(opts)
    encoder = _encoder(opts, tokenizer)
    pad_id = pad_token_id(tokenizer)
    datasets: dict[str, TokenDataset] = {}
    stats: dict[str, EncodeStats] = {}
    for name, records in splits.items():
        examples, stats[name] = encoder.encode(records)
        print(stats[name].line(name, opts.max_seq_length))
        if name == "train" and packing:
            examples = pack(examples, opts.max_seq_length)
            print(f"train: packed into {len(examples)} rows of <= {opts.max_seq_length} tokens")
        datasets[name] = TokenDataset(
            examples,
            pad_id,
            with_prompts=name != "train" and with_prompts,
            generation_samples=generation_samples if name == "val" else None,
            group_by_length=name == "train" and group_by_length,
        )
    return datasets, stats
