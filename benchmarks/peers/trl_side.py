"""The language-model benchmark's peers: TRL's `SFTTrainer` and the plain HF `Trainer`.

Both train the model folder trainforge trains, on the examples trainforge's own encoder made
(`input_ids` plus a completion mask: loss on the completion tokens only), so the token ids
are the same on every side. `SFTTrainer` gets them as a pre-tokenized dataset (TRL skips its
own tokenization when `input_ids` is a column) with `completion_only_loss=True` and its own
collator (`DataCollatorForLanguageModeling`); the plain `Trainer` gets `labels` (-100 on the
prompt) and `DataCollatorForSeq2Seq`, padding to the batch's longest row as HF's examples do.

Each side runs with its own settings for a bare run: no gradient checkpointing (SFTConfig's
default is on; trainforge's cpu profile has it off), no logging, saving, evaluation, progress
bar or reporting; the optimizer is the Trainer's default (`adamw_torch_fused` with torch >= 2.8,
the fused kernel trainforge's AdamW also uses on the CPU), cosine schedule with the same
warm-up, the same clipping, learning rate, weight decay and seed. `equal` batching samples
the batches in trainforge's order (`StepBatchSampler` flattened into a file by the benchmark,
through the Trainer's documented `_get_train_sampler` hook); `default` leaves each peer its
own sampler and collator. After the last step the model is saved (`save_model`), as a
user's script does.
"""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path
from typing import Any

from torch.utils.data import Sampler


class StepOrder(Sampler[int]):
    """trainforge's train order as a flat index sampler, read from the file the benchmark
    wrote (`lm_peers.write_order`; this venv has no trainforge): the Trainer cuts it into
    batches of its batch size, the same batches trainforge trains."""

    def __init__(self, path: str) -> None:
        self.order = json.loads(Path(path).read_text())

    def __len__(self) -> int:
        return len(self.order)

    def __iter__(self):
        yield from self.order


def load_examples(path: str, with_labels: bool) -> Any:
    from datasets import Dataset

    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    if with_labels:
        rows = [
            {"input_ids": r["input_ids"],
             "labels": [t if m else -100 for t, m in zip(r["input_ids"], r["completion_mask"],
                                                          strict=True)]}
            for r in rows
        ]  # fmt: skip
    return Dataset.from_list(rows)


def common_args(spec: dict[str, Any], out: str) -> dict[str, Any]:
    return {
        "output_dir": out,
        "max_steps": spec["steps"],
        "per_device_train_batch_size": spec["batch"],
        "gradient_accumulation_steps": 1,
        "learning_rate": spec["learning_rate"],
        "weight_decay": spec["weight_decay"],
        "lr_scheduler_type": "cosine",
        "warmup_steps": spec["warmup_steps"],
        "max_grad_norm": spec["max_grad_norm"],
        "logging_strategy": "no",
        "save_strategy": "no",
        "eval_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "use_cpu": True,
        "seed": spec["seed"],
        "data_seed": spec["seed"],
        # SFTConfig turns gradient checkpointing on by default; trainforge's cpu profile and
        # the HF Trainer keep it off, so the peers recompute no activations either.
        "gradient_checkpointing": False,
    }


def same_order(trainer_class: type, spec: dict[str, Any]) -> type:
    """`trainer_class` sampling trainforge's order when `spec` asks for equal batching."""
    if spec["batching"] != "equal":
        return trainer_class

    class SameOrder(trainer_class):
        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            return StepOrder(spec["order"])

    return SameOrder


def run_peer(spec: dict[str, Any]) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    logging.getLogger("accelerate").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype="float32")
    out = str(Path(spec["runs_dir"]) / spec["name"])
    if spec["side"] == "trl":
        from trl import SFTConfig, SFTTrainer

        args = SFTConfig(
            **common_args(spec, out),
            completion_only_loss=True,
            max_length=spec["max_seq_length"],
            dataset_num_proc=None,
        )
        trainer = same_order(SFTTrainer, spec)(
            model=model,
            args=args,
            train_dataset=load_examples(spec["examples"], with_labels=False),
            processing_class=tokenizer,
        )
    else:
        from transformers import DataCollatorForSeq2Seq, Trainer, TrainingArguments

        args = TrainingArguments(**common_args(spec, out), remove_unused_columns=False)
        trainer = same_order(Trainer, spec)(
            model=model,
            args=args,
            train_dataset=load_examples(spec["examples"], with_labels=True),
            data_collator=DataCollatorForSeq2Seq(tokenizer, padding="longest"),
            processing_class=tokenizer,
        )
    trainer.train()
    trainer.save_model(str(Path(out) / "model"))
