"""Packed rows are padding-free batches: every packed example's logits equal its logits
alone (tiny random Llama and GPT-2, fp32, SDPA and eager on the CPU; flash-attention's
variable-length path on CUDA), the labels at example boundaries are never targets, and the
target count is exact."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from trainforge.data.text import IGNORE, TokenDataset, pack
from trainforge.data.text.encode import Example

VOCAB = 97


def _examples(lengths: list[int], seed: int = 0) -> list[Example]:
    """Random token rows, the first two tokens of each a prompt (not learned)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in lengths:
        ids = torch.randint(1, VOCAB, (n,), generator=g).tolist()
        out.append(Example(ids, [IGNORE, IGNORE, *ids[2:]], 2, ""))
    return out


def _model(kind: str, attn: str, device: str = "cpu", dtype=torch.float32):
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    torch.manual_seed(0)
    if kind == "llama":
        config = LlamaConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        )  # fmt: skip
    else:
        config = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    config._attn_implementation = attn
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn)
    return model.to(device=device, dtype=dtype).eval()


def _check_packed_equals_alone(model, device: str, atol: float) -> None:
    lengths = [5, 9, 3, 12, 7, 4, 10, 2, 6]
    examples = _examples(lengths)
    rows = pack(examples, 24)
    assert len(rows) >= 3 and any(r.position_ids.count(0) > 1 for r in rows)
    data = TokenDataset(rows, pad_id=0)
    batch = data.__getitems__(list(range(len(rows))))
    assert (batch["position_ids"][:, 0] == 0).all()
    with torch.no_grad():
        packed = model(
            input_ids=batch["input_ids"].to(device),
            position_ids=batch["position_ids"].to(device),
            attention_mask=None,
            use_cache=False,
        ).logits.float()
        compared = 0
        for r, row in enumerate(rows):
            starts = [i for i, p in enumerate(row.position_ids) if p == 0]
            ends = [*starts[1:], len(row.input_ids)]
            for start, end in zip(starts, ends, strict=True):
                alone_ids = torch.tensor([row.input_ids[start:end]], device=device)
                alone = model(input_ids=alone_ids, use_cache=False).logits.float()
                torch.testing.assert_close(packed[r, start:end], alone[0], atol=atol, rtol=0)
                compared += 1
    assert compared == len(examples)


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_every_packed_example_has_its_logits_alone(kind, attn):
    _check_packed_equals_alone(_model(kind, attn), "cpu", atol=1e-5)


def test_without_position_ids_a_packed_example_sees_the_one_before():
    """The check above can fail: the same rows without per-example positions (what packing
    did before) give other logits for every example after a row's first."""
    model = _model("llama", "sdpa")
    rows = pack(_examples([5, 9, 3]), 24)
    ids = torch.tensor([rows[0].input_ids])
    with torch.no_grad():
        run_on = model(input_ids=ids, use_cache=False).logits
        alone = model(input_ids=ids[:, 5:14], use_cache=False).logits
    assert not torch.allclose(run_on[0, 5:14], alone[0], atol=1e-3)


def test_boundaries_are_not_targets_and_the_target_count_is_exact():
    examples = _examples([5, 9, 3, 12, 7])
    rows = pack(examples, 24)
    alone = TokenDataset(examples, pad_id=0).__getitems__(list(range(len(examples))))
    batch = TokenDataset(rows, pad_id=0).__getitems__(list(range(len(rows))))
    assert batch["num_targets"] == alone["num_targets"] == sum(n - 2 for n in [5, 9, 3, 12, 7])
    starts = batch["position_ids"] == 0
    assert (batch["labels"][starts] == IGNORE).all()
    # The pad tail of the shorter row is a run of its own, masked from the loss.
    short = min(range(len(rows)), key=lambda i: len(rows[i].input_ids))
    n = len(rows[short].input_ids)
    assert batch["position_ids"][short, n] == 0 and (batch["labels"][short, n:] == IGNORE).all()


def test_unpacked_batches_carry_no_position_ids():
    batch = TokenDataset(_examples([4, 6]), pad_id=0).__getitems__([0, 1])
    assert "position_ids" not in batch and batch["attention_mask"].sum() == 10


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_cuda_sdpa_packing_matches_alone(kind):
    # SDPA's CUDA kernels with the block-diagonal mask transformers builds from position_ids;
    # fp32 (no TF32 for matmuls by default), so a bound near the CPU's.
    _check_packed_equals_alone(_model(kind, "sdpa", device="cuda"), "cuda", atol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is None, reason="needs flash_attn")
def test_flash_attention_varlen_packing_matches_alone():
    # flash-attention computes in bf16/fp16: the bound is bf16's, not fp32's.
    model = _model("llama", "flash_attention_2", device="cuda", dtype=torch.bfloat16)
    _check_packed_equals_alone(model, "cuda", atol=2e-2)


def test_batching_is_the_recipes_choice_and_said_in_one_line():
    from trainforge.config.plan import text_batching as batching
    from trainforge.data.options.text import TextOptions

    assert batching(TextOptions()) == (False, False, "batching: padded batches (data.options)")
    assert batching(TextOptions(packing=True)) == (
        True, False, "batching: padding-free packed rows (per-example position ids) (data.options)"
    )  # fmt: skip
    grouped = TextOptions(group_by_length=True)
    assert batching(grouped)[:2] == (False, True)
    assert batching(TextOptions(packing=True, group_by_length=True))[:2] == (True, False)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_the_device_never_changes_the_batching(tmp_path, device):
    # Packing changes how many examples a step holds: a hardware choice would change the recipe.
    from trainforge.config import Target, finalize
    from trainforge.config.loading import load

    path = tmp_path / "run.yaml"
    path.write_text(
        "task: {kind: causal-lm}\ndata: {dataset: text, options: {max_seq_length: 64}}\n"
    )
    final = finalize(load(path, overrides=[], profile="cpu", flags={}), Target(device, False, "t"))
    options = final.config.data.options
    assert (options.packing, options.group_by_length) == (False, False)
    assert "batching: padded batches (data.options)" in final.notes
