"""The Hugging Face Trainer with its own fast settings and nothing on the side.

No logging, saving, evaluation, progress bar or reporting (`logging_strategy="no"`,
`save_strategy="no"`, `eval_strategy="no"`, `disable_tqdm`, `report_to="none"`); clipping is
`max_grad_norm`; the optimizer and schedule are passed in (`optimizers=`), so the update is the
other sides' AdamW; bf16 is `bf16=True` and compilation `torch_compile=True`. The model is the
same module behind a wrapper that takes the batch as keyword arguments and returns the loss, the
Trainer's contract for a custom model. The sampler is the other sides' (`_get_train_sampler`,
the Trainer's documented hook), so the batches come in the same order.
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from typing import Any

from torch import Tensor, nn

from peers.workload import SideResult, Workload, build_optimizer, finish, loss_fn, measured
from trainforge.data.sampling import EpochShuffleSampler


class LossModel(nn.Module):
    """model(pixel_values, labels) -> {"loss": ..., "logits": ...}."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: Tensor, labels: Tensor) -> dict[str, Tensor]:
        logits = self.model(pixel_values)
        return {"loss": loss_fn(logits, labels), "logits": logits}


def to_inputs(batch: tuple[Tensor, Tensor]) -> dict[str, Tensor]:
    images, labels = batch
    return {"pixel_values": images, "labels": labels}


def run_hf(w: Workload) -> SideResult:
    from transformers import PrinterCallback, Trainer, TrainingArguments
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    logging.getLogger("accelerate").setLevel(logging.ERROR)

    class SameOrderTrainer(Trainer):
        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            return EpochShuffleSampler(len(train_dataset or self.train_dataset), w.seed)

    model = w.prepare_model()
    optimizer, scheduler = build_optimizer(model, w)
    with tempfile.TemporaryDirectory(prefix="trainforge-bench-hf-") as out:
        args = TrainingArguments(
            output_dir=out,
            max_steps=w.total_steps,
            per_device_train_batch_size=w.batch_size,
            gradient_accumulation_steps=1,
            max_grad_norm=w.max_grad_norm,
            learning_rate=w.learning_rate,
            lr_scheduler_type="constant",
            logging_strategy="no",
            save_strategy="no",
            eval_strategy="no",
            report_to="none",
            disable_tqdm=True,
            dataloader_num_workers=0,
            dataloader_pin_memory=w.device.type == "cuda" and w.images.device.type == "cpu",
            remove_unused_columns=False,
            use_cpu=w.device.type == "cpu",
            bf16=w.precision == "bf16",
            torch_compile=w.compile,
            seed=w.seed,
        )
        trainer = SameOrderTrainer(
            model=LossModel(model),
            args=args,
            train_dataset=w.dataset(),
            data_collator=to_inputs,
            optimizers=(optimizer, scheduler),
        )
        trainer.remove_callback(PrinterCallback)  # it prints the run summary at the end
        with measured(w) as (clock, memory), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clock.attach(optimizer)
            trainer.train()
    return finish(w, model, clock, memory)
