"""Causal language model fine-tuning: a Hugging Face model from `models/` on text records.

The loss is next-token cross-entropy over the response tokens only (prompt tokens carry
label -100), summed on the device and divided by the batch's target-token count, which the
loader counts on the host: `StepOutput.weight` is that count, so gradient accumulation over
batches of any length equals one big batch, and no step waits on the device. The model's
`[B, T, V]` logits are never built: `tasks.lm_loss` applies the head chunk by chunk to the
target rows only, in training and evaluation alike, and the eval batch is lowered (one
line, `config.plan.lm_eval_batch`) where the head's decoding logits would not fit memory.
Validation reports loss, perplexity and next-token accuracy on the response tokens; with
`task.eval_generation` it also greedy-decodes each prompt and reports `per` and `wer`
(see `trainforge.tasks.sequence_metrics`).

At the end `save_final` first evaluates the final model on the test split when the data has
one (`evaluate_test`: loss metrics, plus greedy `per`/`wer` with `task.eval_generation`),
appends that as a `test` record to metrics.jsonl, keeps it in `test_metrics` and in
trainforge.json; then it writes `RUN/model/` (save_pretrained + tokenizer + trainforge.json;
with LoRA also `RUN/adapter/`, and `RUN/model/` only when the adapter is merged) and copies
the result to `models/<output.model_name>` when one is named. The test split is evaluated
here, in the task, because the training loop only knows train and validation loaders; the
pass itself is the engine's one evaluation loop (`engine.evaluate.evaluate_batches`) over
the test split's batches.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from trainforge.config.schema import RunConfig
from trainforge.data.text import EncodeStats, build_text_data, pad_token_id
from trainforge.engine import stop
from trainforge.engine.evaluate import evaluate_batches
from trainforge.engine.precision import PrecisionPlan
from trainforge.engine.task import StepOutput, Task
from trainforge.errors import UserError
from trainforge.models import hf
from trainforge.models.base_model import resolve_base_model
from trainforge.runfolder import RunFolder
from trainforge.tasks import lm_loss
from trainforge.tasks.sequence_metrics import error_counts


@dataclass
class CausalLM(Task):
    model: nn.Module
    tokenizer: Any
    train_loader: Any
    val_loader: Any
    num_train_samples: int
    config: RunConfig
    base_dir: Path
    test_loader: Any = None
    output_path: Path | None = None
    data_stats: dict[str, EncodeStats] = field(default_factory=dict)
    test_metrics: dict[str, float] | None = None  # set by save_final when there is a test split
    validation_metrics: dict[str, float] | None = None  # save_final: every prompt decoded
    name: str = "causal-lm"
    items_name: str = "tokens"
    validates_at_end: bool = True  # save_final validates the whole split (`final_evaluation`)
    final_stop: str | None = None  # the signal that cut `final_evaluation` short
    eval_batch_size: int | None = None  # the configured one, lowered where the head needs it

    @classmethod
    def from_config(cls, config: RunConfig) -> CausalLM:
        hf.require_llm_extra()
        output_path = None
        if config.output.model_name:  # checked first: refuse before any slow work
            output_path = hf.output_dir(
                config.output.models_dir, config.output.model_name, config.output.overwrite
            )
        base_dir = resolve_base_model(config)
        tokenizer = hf.load_tokenizer(base_dir)
        t = config.training
        model = hf.load_causal_lm(base_dir, gradient_checkpointing=t.gradient_checkpointing)
        _check_positions(model, config.data.options.max_seq_length)
        eval_batch_size = _eval_batch(model, config)
        data = build_text_data(
            config.data,
            tokenizer,
            batch_size=t.per_device_train_batch_size,
            eval_batch_size=eval_batch_size,
            seed=t.seed,
            with_prompts=config.task.eval_generation,
            accumulation=t.gradient_accumulation_steps,
            step_batch=t.global_batch_size,
            generation_samples=config.evaluation.generation_samples,
        )
        if config.lora.enabled:
            model = hf.apply_lora(model, config.lora)
        trainable, total = hf.count_parameters(model)
        print(f"model: {base_dir} ({total:,} parameters, {trainable:,} trained)")
        return cls(
            model=model,
            tokenizer=tokenizer,
            train_loader=data.train_loader,
            val_loader=data.val_loader,
            test_loader=data.test_loader,
            num_train_samples=data.num_train,
            config=config,
            base_dir=base_dir,
            output_path=output_path,
            data_stats=data.stats,
            eval_batch_size=eval_batch_size,
        )

    @property
    def base_model(self) -> str:
        """The base model as provenance names it (trainforge.json, the trackers' params): as
        written where that is the folder loaded (a Hugging Face id names its snapshot), else
        the folder loaded: the corpus's own `NAME-<corpus>-<hash>` (`models.base_model`) or
        another run's output model under `model.init_from`."""
        from trainforge.models.hub import is_hub_id

        given = self.config.model.model_name_or_path
        models_dir = self.config.output.models_dir
        if given and is_hub_id(given, models_dir):
            return given
        if given and hf.resolve_model_dir(given, models_dir) == self.base_dir:
            return given
        return str(self.base_dir)

    # ------------------------------------------------------------ the loop
    def to_device(self, batch: dict[str, Any], device: torch.device, train: bool) -> dict:
        non_blocking = device.type == "cuda"
        return {
            k: v.to(device, non_blocking=non_blocking) if isinstance(v, Tensor) else v
            for k, v in batch.items()
        }

    def batch_size(self, batch: dict[str, Any]) -> int:
        return int(batch["input_ids"].shape[0])

    def step(self, model: nn.Module, batch: dict[str, Any]) -> StepOutput:
        """Loss and accuracy over the target tokens, without the `[B, T, V]` logits: the
        head is applied chunk by chunk to the target rows only (`tasks.lm_loss`)."""
        # No KV cache: a loss needs none, and transformers reads packed position_ids only
        # without one.
        inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        inputs["use_cache"] = False
        if "position_ids" in batch:  # packed rows: transformers builds the block-diagonal mask
            inputs.update(position_ids=batch["position_ids"], attention_mask=None)
        loss_sum, correct = lm_loss.next_token_loss(model, inputs, batch["labels"])
        num_targets = int(batch["num_targets"])  # counted on the host by the loader
        sums = {"correct": correct}
        if not model.training and self.config.task.eval_generation and "prompt_ids" in batch:
            sums.update(self._generation_sums(model, batch))
        return StepOutput(loss=loss_sum / max(1, num_targets), weight=num_targets, sums=sums)

    def metrics(self, loss_sum: float, weight: int, sums: dict[str, float]) -> dict[str, float]:
        loss = loss_sum / max(1, weight)
        out = {
            "loss": loss,
            "perplexity": math.exp(min(loss, 50.0)),
            "accuracy": sums.get("correct", 0.0) / max(1, weight),
        }
        if sums.get("sequences"):
            out["per"] = sums["unit_errors"] / max(1.0, sums["ref_units"])
            out["wer"] = sums["seq_errors"] / sums["sequences"]
        return out

    # ---------------------------------------------------------- generation
    def generate(
        self,
        model: nn.Module,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        max_target_tokens: int | None = None,
    ) -> list[str]:
        """Greedy continuation of left-padded prompts, decoded without special tokens: one
        batch, the model's KV cache, each row stopping at its end token.

        With `max_target_tokens` (the longest reference of the batch), generation stops at
        1.5 times that plus 4 tokens when `task.max_new_tokens` is longer: a row still going
        by then is wrong (wer), and per counts its extra units up to there. An untrained
        model that never ends its rows costs that many steps, not max_new_tokens. A stop
        request (`engine.stop`) ends generation at the next token.
        """
        from transformers import StoppingCriteriaList

        limit = self.config.task.max_new_tokens
        if max_target_tokens:
            limit = min(limit, max_target_tokens + max(4, max_target_tokens // 2))
        criteria = [] if torch.distributed.is_initialized() else [stop.GenerationStop()]
        generated = model.generate(
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            max_new_tokens=limit,
            do_sample=False,
            use_cache=True,
            pad_token_id=pad_token_id(self.tokenizer),
            eos_token_id=self.tokenizer.eos_token_id,
            stopping_criteria=StoppingCriteriaList(criteria),
        )
        new_tokens = generated[:, prompt_ids.shape[1] :]
        return [
            t.strip() for t in self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        ]

    def _generation_sums(self, model: nn.Module, batch: dict[str, Any]) -> dict[str, Tensor]:
        hyps = self.generate(
            model, batch["prompt_ids"], batch["prompt_mask"], batch.get("max_target_tokens")
        )
        counts = error_counts(hyps, batch["references"])
        return {
            "unit_errors": torch.tensor(float(counts.unit_errors)),
            "ref_units": torch.tensor(float(counts.ref_units)),
            "seq_errors": torch.tensor(float(counts.seq_errors)),
            "sequences": torch.tensor(float(counts.sequences)),
        }

    # ------------------------------------------------------- final evaluation
    @torch.no_grad()
    def evaluate_dataset(self, model: nn.Module, dataset: Any) -> dict[str, float]:
        """Metrics of `model` on a whole `TokenDataset`, as validation computes them (with
        `task.eval_generation`, greedy per/wer over the rows it decodes). A stop request
        ends the pass with `engine.stop.StopRequested`.

        Reads the data set in order rather than through a loader: under torch.distributed
        a loader holds one rank's shard, and only rank 0 writes the final model.
        """
        device = next(model.parameters()).device
        precision = PrecisionPlan.create(self.config.training.precision, device)
        size = self.eval_batch_size or self.config.evaluation.per_device_eval_batch_size
        # Rows of similar length share a batch: less padding to run the model over (the
        # metrics are sums, so the order does not change them).
        order = sorted(range(len(dataset)), key=lambda i: len(dataset.examples[i].input_ids))
        batches = (
            dataset.__getitems__(order[start : start + size])
            for start in range(0, len(dataset), size)
        )
        loss_sum, weight, sums = evaluate_batches(
            self, model, batches, device=device, precision=precision,
            stoppable=not torch.distributed.is_initialized(),
        )  # fmt: skip
        return self.metrics(loss_sum, weight, sums)

    def evaluate_split(self, model: nn.Module, loader: Any) -> dict[str, float]:
        """Every prompt of the loader's whole data set decoded (a validation set decodes only
        a sample of them while training)."""
        dataset = loader.dataset
        whole = dataset.all_generated() if hasattr(dataset, "all_generated") else dataset
        return self.evaluate_dataset(model, whole)

    def evaluate_test(self, model: nn.Module) -> dict[str, float] | None:
        """Metrics on the whole test split (None without one), every prompt decoded."""
        if self.test_loader is None:
            return None
        return self.evaluate_dataset(model, self.test_loader.dataset)

    def final_evaluation(self, run_dir: Path, model: nn.Module, global_step: int) -> None:
        """The end of a run: the closing validation, every prompt decoded (training decodes
        `evaluation.generation_samples` of them), as a `val` record, then the test
        split as a `test` record. A signal ends it at the next batch or token; the model
        is saved all the same."""
        val = self.val_loader.dataset
        passes = [("test", self.test_loader.dataset if self.test_loader is not None else None)]
        passes.insert(0, ("val", val.all_generated()))
        with stop.watch():
            try:
                for split, dataset in passes:
                    if dataset is None:
                        continue
                    metrics = self.evaluate_dataset(model, dataset)
                    self._log_final(run_dir, split, len(dataset), metrics, global_step)
                    if split == "test":
                        self.test_metrics = metrics
                    else:
                        self.validation_metrics = metrics
            except stop.StopRequested as request:
                self.final_stop = str(request)
                print(f"{request}: final evaluation stopped; the model is saved")
            finally:
                stop.clear()

    def _log_final(
        self, run_dir: Path, split: str, count: int, metrics: dict[str, float], step: int
    ) -> None:
        """One line and one metrics.jsonl record after the loop's own records (its loggers
        are closed by then, so this appends through a fresh JSONL logger)."""
        shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        name = "validation" if split == "val" else split
        print(f"{name} ({count} examples): {shown}")
        if not self.config.logging.jsonl:
            return
        from trainforge.observe.loggers import JsonlLogger

        # The loop's epoch count: optimizer steps per epoch from the loader's batches.
        accumulation = self.config.training.gradient_accumulation_steps
        steps_per_epoch = max(1, math.ceil(len(self.train_loader) / accumulation))
        logger = JsonlLogger(RunFolder(run_dir).metrics)
        try:
            logger.log(split, metrics, step, round(step / steps_per_epoch, 4))
        finally:
            logger.close()

    # ---------------------------------------------------------- final model
    def save_final(
        self,
        run_dir: Path,
        *,
        model: nn.Module,
        metrics: dict[str, float],
        config_hash: str,
        global_step: int,
    ) -> Path:
        """Evaluate the test split, then write the Hugging Face folder(s) of the trained
        model; return the output folder."""
        self.final_evaluation(run_dir, model, global_step)
        summary = self.summary(metrics, config_hash, global_step)
        summary["run_dir"] = str(run_dir.resolve())  # the run that owns the output model
        model.config.use_cache = True  # inference default; training turned it off
        folder = RunFolder(run_dir)
        if hf.is_peft(model):
            adapter = folder.hf_adapter
            hf.save_model_folder(model, self.tokenizer, adapter, summary)
            result = adapter
            if self.config.lora.merge_adapter:
                merged = model.merge_and_unload()
                hf.save_model_folder(merged, self.tokenizer, folder.hf_model, summary)
                result = folder.hf_model
        else:
            result = folder.hf_model
            hf.save_model_folder(model, self.tokenizer, result, summary)
        print(f"Hugging Face model: {result}")
        if self.output_path is not None:
            hf.copy_model_folder(result, self.output_path)
            print(f"output model: {self.output_path}")
            result = self.output_path
        return result

    def summary(self, metrics: dict[str, float], config_hash: str, global_step: int) -> dict:
        import transformers

        c = self.config
        lora = c.lora.model_dump(mode="json") if c.lora.enabled else None
        return {
            "created_by": "trainforge train",
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "task": self.name,
            "base_model": self.base_model,
            "base_model_path": str(self.base_dir),
            "dataset": {
                "train_file": c.data.options.train_file,
                "validation_file": c.data.options.validation_file,
                "test_file": c.data.options.test_file,
                "max_seq_length": c.data.options.max_seq_length,
                "packing": c.data.options.packing,
                "splits": {name: s.as_dict() for name, s in self.data_stats.items()},
            },
            "lora": lora,
            "config_hash": config_hash,
            "global_step": global_step,
            "metrics": metrics,
            "test_metrics": self.test_metrics,
            "validation_metrics": self.validation_metrics,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        }


def _eval_batch(model: nn.Module, config: RunConfig) -> int:
    """The configured eval batch, lowered (with one line) where the model's head would not
    fit it in memory (`config.plan.lm_eval_batch`): the budget is
    `hardware.memory_budget_gib` when set, else the memory this process may still take."""
    import psutil

    from trainforge.config.plan import LMShape, lm_eval_batch
    from trainforge.hardware.limits import memory_available

    cfg = model.config
    wanted = config.evaluation.per_device_eval_batch_size
    shape = LMShape(
        vocab_size=int(cfg.vocab_size),
        hidden_size=int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "n_embd", 0)),
        num_layers=int(getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layer", 0)),
        seq_len=config.data.options.max_seq_length,
        model_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
        chunk_elements=lm_loss.CHUNK_ELEMENTS,
    )
    budget_gib = config.hardware.memory_budget_gib
    available = memory_available(psutil.virtual_memory().available)
    budget = budget_gib * 1024**3 if budget_gib else available
    size, line = lm_eval_batch(wanted, shape, int(budget))
    if line:
        print(line)
    return size


def _check_positions(model: nn.Module, max_seq_length: int) -> None:
    cfg = model.config
    limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    if limit and max_seq_length > limit:
        raise UserError(
            f"data.options.max_seq_length = {max_seq_length}: the model has only {limit} positions",
            f"set data.options.max_seq_length to {limit} or less",
        )
