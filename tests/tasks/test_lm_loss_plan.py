"""The eval batch the plan gives a causal LM: lowered, with one line, where the head's
logits would not fit the memory budget at the configured batch; unchanged where they fit."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fakes.tiny_lm import lm_config
from trainforge.config.plan import LMShape, lm_eval_batch, lm_eval_bytes
from trainforge.tasks import build_task

GIB = 1024**3
GEMMA_HEAD = LMShape(
    vocab_size=262_144, hidden_size=64, num_layers=2, seq_len=64, model_bytes=70 * 2**20
)


def test_a_262k_head_at_eval_batch_512_is_lowered_to_what_fits():
    assert lm_eval_bytes(GEMMA_HEAD, 512) > 1 * GIB  # the decoding logits alone: 1.5 GiB
    size, line = lm_eval_batch(512, GEMMA_HEAD, budget_bytes=1 * GIB)
    assert 1 <= size < 512
    assert lm_eval_bytes(GEMMA_HEAD, size) <= 1 * GIB < lm_eval_bytes(GEMMA_HEAD, size + 1)
    assert line.startswith(f"evaluation: per_device_eval_batch_size 512 lowered to {size}:")
    assert "262,144-token head" in line and "\n" not in line


def test_an_eval_batch_that_fits_is_kept_and_the_estimate_is_not_b_t_v():
    size, line = lm_eval_batch(512, GEMMA_HEAD, budget_bytes=8 * GIB)
    assert (size, line) == (512, None)
    full_logits = 512 * 64 * 262_144 * 4  # what the old loss held: 32 GiB
    assert lm_eval_bytes(GEMMA_HEAD, 512) < full_logits / 10


def test_nothing_fits_still_gives_one_row():
    assert lm_eval_batch(64, GEMMA_HEAD, budget_bytes=1)[0] == 1


@pytest.mark.usefixtures("single_thread")
def test_the_task_evaluates_at_the_lowered_batch(tiny_gpt2, lm_corpus, capsys):
    # the tiny model's per-row estimate is ~1 MiB: a 20 MiB budget fits a few rows only
    config = lm_config(
        tiny_gpt2,
        lm_corpus["json"],
        **{"evaluation.per_device_eval_batch_size": 512, "hardware.memory_budget_gib": 0.02},
    )
    task = build_task(config)
    assert 1 <= task.eval_batch_size < 512
    assert "per_device_eval_batch_size 512 lowered to" in capsys.readouterr().out


class _LargestLogits(TorchDispatchMode):
    """The most elements of any op output whose last dimension is the vocabulary (logits,
    or their log-softmax), the head's [V, H] weight and its gradient aside."""

    def __init__(self, vocab_size: int, hidden_size: int):
        super().__init__()
        self.vocab_size, self.hidden_size, self.largest = vocab_size, hidden_size, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            logits = isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] == self.vocab_size
            if logits and tuple(t.shape) != (self.hidden_size, self.vocab_size):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.usefixtures("single_thread")
def test_evaluation_and_greedy_decoding_never_hold_the_whole_logits(
    tiny_gpt2, lm_corpus, monkeypatch
):
    """Loss, perplexity, accuracy and greedy decoding over a validation set: no tensor wider
    than a loss chunk or one decoding step's [batch, V] exists, where the whole logits of
    one eval batch would be [batch, T, V]."""
    from trainforge.tasks import lm_loss

    config = lm_config(
        tiny_gpt2, lm_corpus["json"],
        **{"task.eval_generation": "true", "evaluation.per_device_eval_batch_size": 4},
    )  # fmt: skip
    task = build_task(config)
    model = task.model.eval()
    vocab, hidden = model.config.vocab_size, model.config.n_embd
    monkeypatch.setattr(lm_loss, "CHUNK_ELEMENTS", 2 * vocab)  # two target rows per chunk
    dataset = task.val_loader.dataset
    rows = [len(e.input_ids) for e in dataset.examples]
    assert len(rows) >= 4 and max(rows) > 8
    with _LargestLogits(vocab, hidden) as seen:
        metrics = task.evaluate_split(model, task.val_loader)
    assert metrics["loss"] > 0 and "per" in metrics  # the decoding ran
    assert seen.largest <= 4 * vocab  # a decoding step of the batch of 4, or a loss chunk
    with _LargestLogits(vocab, hidden) as full, torch.no_grad():
        batch = dataset.__getitems__(list(range(4)))
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    assert full.largest >= 4 * 8 * vocab  # what a plain forward of that batch holds


@pytest.mark.usefixtures("single_thread")
def test_the_batch_fit_probe_pays_the_real_chunked_loss_at_its_batch(
    tiny_gpt2, lm_corpus, monkeypatch
):
    """`per_device_train_batch_size: auto` measures full training steps of the task itself
    (engine.batch_probe): at each probed size the head's loss runs over that many rows'
    targets, chunk by chunk, as the run will; a fit from a model without its head's cost
    would plan too large a batch for a 262k vocabulary."""
    from trainforge.engine.batch_probe import StepRunner
    from trainforge.tasks import lm_loss

    config = lm_config(tiny_gpt2, lm_corpus["json"])
    task = build_task(config)
    seen: list[tuple[int, int]] = []
    chunked = lm_loss.linear_cross_entropy

    def spy(hidden, weight, targets, **kwargs):
        seen.append((int(targets.shape[0]), int(weight.shape[0])))
        return chunked(hidden, weight, targets, **kwargs)

    monkeypatch.setattr(lm_loss, "linear_cross_entropy", spy)
    runner = StepRunner(task, config, torch.device("cpu"))
    for size in (2, 6):
        seen.clear()
        batch = runner.batch(size)
        runner(size)
        targets = int((batch["labels"][:, 1:] != -100).sum())
        assert seen == [(targets, task.model.config.vocab_size)]
    runner.close()
