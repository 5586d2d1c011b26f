"""A quiet console: third-party noise that says nothing to a trainforge user, silenced once
at process start, each item narrowly (by message and module, or by one named logger) and
with the reason it is noise. Everything else, warnings included, still reaches the console.

- torchdata's StatefulDataLoader calls `torch.set_vital`, which torch itself deprecates.
- torchdata's "This DataLoader will create N worker processes in total" (twice per loader,
  with a site-packages path): `data.loaders` says it once in trainforge's words, with the
  setting to change, whenever the workers outnumber the CPUs this process may use (never
  more than torchdata's own count, so it is said whenever torchdata would say it).
- DDP's "Grad strides do not match bucket view strides": the batched augmentation hands the
  ViT channels-last image batches, so the patch convolution's weight gradient comes out
  channels-last while its parameter (and DDP's bucket view) is contiguous; the reducer copies
  that one small gradient into its bucket, which costs nothing measurable.
- transformers 5's "`is_gradient_checkpointing` is deprecated": peft's `get_peft_model` reads
  that property when LoRA is added; trainforge's own code uses the successor
  (`models.hf.enable_checkpointing`), so only a peft release can remove the call.
- TorchInductor's "TensorFloat32 tensor cores for float32 matrix multiplication available but
  not enabled" (a compiled fp32 run on an Ampere or newer GPU): TF32 would change what an
  fp32 run computes, and the recipe's `training.precision` (bf16 or fp16) is the fast path a
  user chooses; the hint is not trainforge's to take.
- MLflow's "Creating initial MLflow database tables..." INFO lines from its SQLite store
  (MLFLOW_LOGGING_LEVEL, when set, is honoured instead).
- Hugging Face "Loading weights" / "Writing model shards" bars: off through
  huggingface_hub's own switch, which transformers follows (HF_HUB_DISABLE_PROGRESS_BARS,
  when set, is honoured instead).

Python's `warnings` filters and `logging` levels do all of it; no output is captured or
rewritten, so a new warning from any library still shows (and tests fail on it).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

# (message regex, category, module regex of the code the warning is attributed to)
WARNINGS: tuple[tuple[str, type[Warning], str], ...] = (
    (r"'set_vital' is deprecated", UserWarning, r"torchdata\."),
    (r"This DataLoader will create \d+ worker processes in total", UserWarning, r"torchdata\."),
    (r"Grad strides do not match bucket view strides", UserWarning, r"torch\.autograd\."),
    (r"`is_gradient_checkpointing` is deprecated", FutureWarning, r"transformers\."),
    (r"TensorFloat32 tensor cores for float32 matrix multiplication", UserWarning,
     r"torch\._inductor\."),
)  # fmt: skip
# Loggers whose INFO lines are set-up chatter, raised to WARNING.
CHATTY_LOGGERS = ("mlflow.store.db.utils",)

_installed = False


def install(env: Mapping[str, str] | None = None) -> None:
    """Install the filters (idempotent: once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    env = os.environ if env is None else env
    for message, category, module in WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    if "MLFLOW_LOGGING_LEVEL" not in env:
        for name in CHATTY_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    if "HF_HUB_DISABLE_PROGRESS_BARS" not in env:
        if "huggingface_hub" in sys.modules:
            _hf_bars_off()
        else:  # flipped when a command first imports it: `validate` never pays the import
            sys.meta_path.insert(0, _AfterImport("huggingface_hub", _hf_bars_off))


def _hf_bars_off() -> None:
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    # transformers reads huggingface_hub's switch once, when imported: one imported before
    # this (a notebook, a test's model fixture) is told too. Mid-import (transformers
    # importing huggingface_hub) it has not read the switch yet, and reads it off.
    hf_logging = sys.modules.get("transformers.utils.logging")
    if hf_logging is not None and hasattr(hf_logging, "disable_progress_bar"):
        hf_logging.disable_progress_bar()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `then()` right after module `name` has been imported, once, then steps aside."""

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, then = spec.loader, self.then

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)
                then()

        spec.loader = _Loader()
        return spec
