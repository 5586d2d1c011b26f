"""Export and edge optimisation: from a trained run to models that run fast on the edge.

`export(RUN_OR_CHECKPOINT, formats)` writes artifact folders under `RUN/export/`:
    onnx/         model.onnx (dynamic batch, verified with onnxruntime against PyTorch)
    int8/         dynamic INT8 Linear layers for PyTorch on the CPU (int8 safetensors)
    int8-onnx/    static QDQ INT8 ONNX, calibrated on training batches (onnxruntime)
    pruned/       global magnitude pruning, optionally fine-tuned through the engine
    safetensors/  the fp32 weights alone
each with `summary.json` (size, accuracy next to the fp32 reference, batch-1 latency).
`load_artifact()` reads one back as a predictor; `bench` compares them side by side.
Formats are registered in `trainforge.registry.EXPORT_FORMATS` (built-ins: `export.formats`);
task kinds plug in through their `trainforge.registry.TASKS` entry (see `export.kinds`).
"""

from __future__ import annotations

from trainforge.registry import lazy_attributes

# Imported on first use: `trainforge export --format typo` answers before torch loads.
_MODULES = {
    "trainforge.export.options": ("ExportOptions",),
    "trainforge.export.pipeline": ("Result", "export"),
    "trainforge.export.artifacts": ("Artifact", "find_artifacts", "load_artifact"),
}
__all__ = sorted(name for names in _MODULES.values() for name in names)
__getattr__ = lazy_attributes(__name__, _MODULES)
