"""One side of the language-model benchmark in a process of its own (`benchmarks/lm_peers.py`).

    python benchmarks/peers/lm_side.py SPEC.json

SPEC.json says which side (`trainforge`, `trl`, `hf`), the model folder, the data, the recipe
(steps, batch, learning rate, warm-up, clipping, threads, seed) and where to write the result.
Every side runs here under the same instruments, installed before the framework is imported:

- torch's global optimizer-step hook (`register_optimizer_step_post_hook`) stamps the end of
  every optimizer step with the wall clock, so the first and last steps are seen the same
  way in trainforge's Trainer, TRL's SFTTrainer and the HF Trainer;
- a forward pre-hook on the model's input embedding counts the non-pad tokens it is fed in
  training mode (padded, length-grouped or padding-free batches alike).

The result JSON is written when the process exits (`atexit`), so the parent measures the
whole process (start to exit, peak RSS from `wait4`) and reads the step stamps from the file.
The trainforge side is the real `trainforge train` command (`trainforge.cli.entry`) on the
G2P recipe with `--set` overrides, what a user runs; the peers are in `trl_side.py`.
"""

from __future__ import annotations

import atexit
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

STARTED = time.time()


class Instruments:
    """Step stamps and the non-pad token count, read from hooks every side triggers."""

    def __init__(self, pad_id: int, vocab_size: int) -> None:
        self.pad_id, self.vocab_size = int(pad_id), int(vocab_size)
        self.step_ends: list[float] = []
        self.tokens_at_step: list[int] = []
        self.tokens = torch.zeros((), dtype=torch.long)  # summed on the host, read at steps
        self._embedding_hooked = False

    def install(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(self._on_step)
        # Global module hook until the model's input embedding is met, then a hook on it alone
        # (a global hook on every module call would cost each side the same, but more).
        self._global = nn.modules.module.register_module_forward_pre_hook(self._find_embedding)

    def _find_embedding(self, module: nn.Module, args: tuple) -> None:
        if self._embedding_hooked or not isinstance(module, nn.Embedding):
            return
        if module.num_embeddings != self.vocab_size:
            return
        self._embedding_hooked = True
        module.register_forward_pre_hook(self._count)
        self._global.remove()
        self._count(module, args)

    def _count(self, module: nn.Module, args: tuple) -> None:
        if module.training and args:
            self.tokens += (args[0] != self.pad_id).sum()

    def _on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.step_ends.append(time.time())
        self.tokens_at_step.append(int(self.tokens))

    def result(self) -> dict[str, Any]:
        return {
            "started": STARTED,
            "step_ends": [self.step_ends[0], self.step_ends[-1]] if self.step_ends else [],
            "steps": len(self.step_ends),
            "tokens_at_first_step": self.tokens_at_step[0] if self.tokens_at_step else 0,
            "tokens": self.tokens_at_step[-1] if self.tokens_at_step else 0,
        }


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def trainforge_argv(spec: dict[str, Any]) -> list[str]:
    """`trainforge train` on the G2P recipe with the benchmark's recipe and no evaluation
    during training; the run ends as it always does (final validation on the small
    validation file, the model saved, the report written)."""
    sets = {
        "model.model_name_or_path": spec["model_dir"],
        "output.models_dir": spec["models_dir"],
        "output.dir": spec["runs_dir"],
        "output.model_name": f"bench-{spec['name']}",
        "output.overwrite": True,
        "data.options.train_file": spec["train_file"],
        "data.options.validation_file": spec["validation_file"],
        "data.options.test_file": None,
        "data.options.max_seq_length": spec["max_seq_length"],
        "task.eval_generation": False,
        "evaluation.eval_every_epochs": None,
        "evaluation.eval_steps": None,
        "evaluation.per_device_eval_batch_size": spec["batch"],
        "checkpoint.save_steps": None,
        "checkpoint.save_every_epochs": None,
        "checkpoint.save_best": False,
        "logging.tensorboard": False,
        "logging.progress_bar": False,
        "training.max_steps": spec["steps"],
        "training.per_device_train_batch_size": spec["batch"],
        "training.gradient_accumulation_steps": 1,
        "training.num_threads": spec["threads"],
        "training.max_grad_norm": spec["max_grad_norm"],
        "training.seed": spec["seed"],
        "training.precision": "fp32",
        "training.device": "cpu",
        "optimizer.learning_rate": spec["learning_rate"],
        "optimizer.weight_decay": spec["weight_decay"],
        "schedule.lr_scheduler_type": "cosine",
        "schedule.warmup_steps": spec["warmup_steps"],
        **spec.get("trainforge_sets", {}),
    }
    argv = ["trainforge", "train", spec["config"], "--profile", "cpu"]
    for key, value in sets.items():
        argv += ["--set", f"{key}={_yaml(value)}"]
    return argv


def run_trainforge(spec: dict[str, Any]) -> None:
    from trainforge import cli

    sys.argv = trainforge_argv(spec)
    try:
        cli.entry()
    except SystemExit as err:
        if err.code not in (0, None):
            raise


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(int(spec["threads"]))
    instruments = Instruments(spec["pad_id"], spec["vocab_size"])
    instruments.install()
    out = Path(spec["result"])
    atexit.register(lambda: out.write_text(json.dumps(instruments.result())))
    if spec["side"] == "trainforge":
        run_trainforge(spec)
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from trl_side import run_peer

        run_peer(spec)


if __name__ == "__main__":
    main(sys.argv[1])
