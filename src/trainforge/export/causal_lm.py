"""Export of the causal-lm task: LoRA adapters merged into the base weights, as safetensors.

The run's checkpoint (adapter and base weights as the engine saved them) is loaded into the
task's own model (base model folder + peft LoRA from the run config), evaluated, merged with
peft's `merge_and_unload`, evaluated again, and written as a Hugging Face folder
(`save_pretrained` safetensors + tokenizer) that loads with `AutoModelForCausalLM` alone.
The merge is verified: the largest logit difference between adapted and merged model on the
validation batches must stay within `--tolerance`. Without LoRA the weights are written as
they are. ONNX export of the decoder is not offered for this task yet.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from trainforge.config.schema import RunConfig
from trainforge.errors import UserError
from trainforge.export.artifacts import ArtifactDir, folder_size, write_summary
from trainforge.runfolder import SUMMARY

if TYPE_CHECKING:
    from trainforge.export.job import ExportJob, Result

WEIGHTS_FILE = "model.safetensors"


class CausalLMExport:
    kind: ClassVar[str] = "causal-lm"
    formats: ClassVar[tuple[str, ...]] = ("safetensors",)
    metric: ClassVar[str] = "loss"
    input_name: ClassVar[str] = "input_ids"
    output_name: ClassVar[str] = "logits"

    def __init__(self, config: RunConfig) -> None:
        self.config = config

    @cached_property
    def task(self):
        from trainforge.tasks import build_task

        return build_task(self.config)

    def _loaded_model(self, job: ExportJob):
        from trainforge.export.source import load_weights

        return load_weights(self.task.model, job.source.state_dict, job.source.weights)

    def _evaluate(self, model, batches: list[dict]) -> tuple[dict[str, float], list[torch.Tensor]]:
        """Task metrics over `batches` and the logits of each batch."""
        loss_sum, weight, sums, logits = 0.0, 0, {}, []
        with torch.inference_mode():
            for batch in batches:
                out = self.task.step(model, batch)
                loss_sum += float(out.loss) * out.weight
                weight += out.weight
                for key, value in out.sums.items():
                    sums[key] = sums.get(key, 0.0) + float(value)
                ids, mask = batch["input_ids"], batch["attention_mask"]
                logits.append(model(input_ids=ids, attention_mask=mask).logits.float())
        return self.task.metrics(loss_sum, weight, sums), logits

    def write_safetensors(self, job: ExportJob) -> list[Result]:
        from trainforge.export.job import Result
        from trainforge.models import hf

        model = self._loaded_model(job)
        cpu = torch.device("cpu")
        batches = [self.task.to_device(raw, cpu, False) for raw in self.task.val_loader]
        adapted, adapted_logits = self._evaluate(model, batches)
        lora = hf.is_peft(model)
        merged = model.merge_and_unload() if lora else model
        metrics, merged_logits = self._evaluate(merged, batches)
        max_diff = max(
            float((a - b).abs().max()) for a, b in zip(adapted_logits, merged_logits, strict=True)
        )
        if not max_diff <= job.options.of("safetensors").tolerance:
            raise UserError(
                f"merged model differs from the adapted one by up to {max_diff:.2e} in logits "
                f"(tolerance {job.options.of('safetensors').tolerance:g})",
                "raise --tolerance, or check the adapter",
            )
        with ArtifactDir(job.out_root, "safetensors") as folder:
            merged.config.use_cache = True  # inference default; training turned it off
            merged.save_pretrained(str(folder), safe_serialization=True)
            self.task.tokenizer.save_pretrained(str(folder))
            summary = self._summary(job, folder, metrics, adapted, lora, max_diff)
            write_summary(folder, summary)
        return [Result(job.out_root / "safetensors", summary)]

    def _summary(
        self,
        job: ExportJob,
        folder,
        metrics: dict[str, float],
        adapted: dict[str, float],
        lora: bool,
        max_diff: float,
    ) -> dict[str, Any]:
        from trainforge.run.recipe import config_hash

        folder_final = job.out_root / "safetensors"
        files = sorted(p.name for p in folder.iterdir() if p.is_file())
        weights = [f for f in files if f.endswith(".safetensors")]
        return {
            "format": "safetensors",
            "runtime": "transformers",
            "precision": "fp32",
            "artifact": WEIGHTS_FILE,
            "files": [*files, SUMMARY],
            "task": self.kind,
            "source": str(job.source.weights),
            "config_hash": config_hash(self.config),
            "base_model": self.task.base_model,  # the folder the run loaded
            "lora_merged": lora,
            "lora": self.config.lora.model_dump(mode="json") if lora else None,
            "metric": self.metric,
            "metrics": metrics,
            "reference_metrics": adapted,
            "metric_delta": {k: v - adapted[k] for k, v in metrics.items() if k in adapted},
            "max_abs_diff": max_diff,
            "tolerance": job.options.of("safetensors").tolerance,
            "size_bytes": folder_size(folder, weights),
            "load_with": f"AutoModelForCausalLM.from_pretrained({str(folder_final)!r})",
        }
