"""A toy export format added through the export-format registry alone: weights as numpy .npz.

The writer uses the export job's own pieces (fresh model, evaluation, summary); the artifact
runs on a new runtime, `numpy-npz`, whose predictor loader rebuilds the model from the
artifact's config and loads the arrays back. Its own options (`export --option KEY=VALUE`):
compress the archive, and the precision of the stored arrays. Importing this file registers
`toy-npz`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
import yaml
from pydantic import Field

from trainforge.config.schema import RunConfig
from trainforge.export.artifacts import CONFIG, ArtifactDir, TorchPredictor
from trainforge.export.formats import ExportFormat
from trainforge.export.kinds import kind_class
from trainforge.options import Options
from trainforge.registry import EXPORT_FORMATS

NAME = "toy-npz"
RUNTIME = "numpy-npz"
WEIGHTS = "weights.npz"


class NpzOptions(Options):
    compress: bool = Field(False, description="Write a compressed archive (np.savez_compressed).")
    dtype: Literal["float32", "float16"] = Field("float32", description="Stored precision.")


def write_npz(job) -> list:
    from trainforge.export.pipeline import Result

    o: NpzOptions = job.options.of(NAME)
    with ArtifactDir(job.out_root, NAME) as folder:
        model = job.fresh_model()
        arrays = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
        arrays = {k: v.astype(o.dtype) if v.dtype.kind == "f" else v for k, v in arrays.items()}
        (np.savez_compressed if o.compress else np.savez)(folder / WEIGHTS, **arrays)
        job.write_config(folder)
        predict = TorchPredictor(model)
        _, metrics = job.evaluate(predict)
        summary = job.summarize(
            folder,
            fmt=NAME,
            runtime=RUNTIME,
            precision=o.dtype,
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
        state = {k: torch.from_numpy(arrays[k]) for k in arrays.files}
        model.load_state_dict(
            {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
        )
    return TorchPredictor(model, device)


EXPORT_FORMATS.register(
    NAME,
    ExportFormat(
        "weights as numpy .npz (a test's toy)", write_npz, {RUNTIME: load_npz}, NpzOptions
    ),
)
