"""The eval batch the plan gives a causal LM: lowered, with one line, where the head's
logits would not fit the memory budget at the configured batch; unchanged where they fit."""

from __future__ import annotations

import pytest

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
