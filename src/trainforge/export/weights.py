"""The `safetensors` format: the source's fp32 weights and config as a standalone artifact.

A checkpoint also holds optimizer and loader state; this artifact keeps only what inference
needs (weights, config, model facts), checked to reproduce the source's validation metric.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from safetensors.torch import save_file

from trainforge.export.artifacts import ArtifactDir, TorchPredictor

if TYPE_CHECKING:
    from trainforge.export.job import ExportJob, Result

WEIGHTS_FILE = "model.safetensors"


def write_safetensors(job: ExportJob) -> list[Result]:
    from trainforge.export.job import Result

    with ArtifactDir(job.out_root, "safetensors") as folder:
        model = job.fresh_model()
        state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(folder / WEIGHTS_FILE), metadata={"task": job.kind.kind})
        job.write_config(folder)
        predict = TorchPredictor(model)
        _, metrics = job.evaluate(predict)
        summary = job.summarize(
            folder,
            fmt="safetensors",
            runtime="torch",
            precision="fp32",
            artifact=WEIGHTS_FILE,
            predict=predict,
            metrics=metrics,
        )
    return [Result(job.out_root / "safetensors", summary)]
