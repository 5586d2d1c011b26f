"""A toy export format added through the export-format registry alone: weights as numpy .npz.

The writer uses the export job's own pieces (fresh model, evaluation, summary); the artifact
runs on a new runtime, `numpy-npz`, whose predictor loader rebuilds the model from the
artifact's config and loads the arrays back. Importing this file registers `toy-npz`.
"""

from __future__ import annotations

import numpy as np
import torch
import yaml

from trainforge.config.schema import RunConfig
from trainforge.export.artifacts import CONFIG, ArtifactDir, TorchPredictor
from trainforge.export.formats import ExportFormat
from trainforge.export.kinds import kind_class
from trainforge.registry import EXPORT_FORMATS

NAME = "toy-npz"
RUNTIME = "numpy-npz"
WEIGHTS = "weights.npz"


def write_npz(job) -> list:
    from trainforge.export.pipeline import Result

    with ArtifactDir(job.out_root, NAME) as folder:
        model = job.fresh_model()
        arrays = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
        np.savez(folder / WEIGHTS, **arrays)
        job.write_config(folder)
        predict = TorchPredictor(model)
        _, metrics = job.evaluate(predict)
        summary = job.summarize(
            folder,
            fmt=NAME,
            runtime=RUNTIME,
            precision="fp32",
            artifact=WEIGHTS,
            predict=predict,
            metrics=metrics,
        )
    return [Result(job.out_root / NAME, summary)]


def load_npz(artifact, device: str, threads: int | None) -> TorchPredictor:
    config = RunConfig.model_validate(yaml.safe_load((artifact.folder / CONFIG).read_text()))
    cls = kind_class(artifact.summary["task"], source=str(artifact.folder))
    model = cls.build_model(config, artifact.summary["model"])
    with np.load(artifact.model_file) as arrays:
        model.load_state_dict({k: torch.from_numpy(arrays[k]) for k in arrays.files})
    return TorchPredictor(model, device)


EXPORT_FORMATS.register(
    NAME,
    ExportFormat("fp32 weights as numpy .npz (a test's toy)", write_npz, {RUNTIME: load_npz}),
)
