"""The chunked next-token loss equals the full-logits cross-entropy in value, accuracy and
gradients (plain math, a tiny Llama, GPT-2 with its tied head, a LoRA-wrapped Llama and a
softcapped Gemma 2), never holds more than one chunk of vocabulary-sized logits, and leaves
the model's head, state_dict and generation untouched."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from trainforge.tasks import lm_loss

pytestmark = pytest.mark.usefixtures("single_thread")

VOCAB = 96


def test_chunked_math_equals_full_cross_entropy_with_bias_and_softcap():
    torch.manual_seed(0)
    hidden = torch.randn(37, 16, requires_grad=True)
    weight = torch.randn(VOCAB, 16, requires_grad=True)
    bias = torch.randn(VOCAB, requires_grad=True)
    targets = torch.randint(0, VOCAB, (37,))
    targets[:5] = (hidden[:5].detach() @ weight.detach().t() + bias.detach()).argmax(-1)
    for softcap in (None, 3.0):
        loss, correct = lm_loss.linear_cross_entropy(
            hidden, weight, targets, bias=bias, softcap=softcap, rows_per_chunk=5
        )
        grads = torch.autograd.grad(loss * 0.7, (hidden, weight, bias))
        z = F.linear(hidden, weight, bias)
        z = torch.tanh(z / softcap) * softcap if softcap else z
        ref_loss, ref_correct = lm_loss.full_cross_entropy(z, targets)
        ref_grads = torch.autograd.grad(ref_loss * 0.7, (hidden, weight, bias))
        torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-5)
        assert int(correct) == int(ref_correct) >= 5
        for got, want in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_frozen_head_gets_no_gradient_and_no_target_gives_zero():
    hidden = torch.randn(4, 8, requires_grad=True)
    weight = torch.randn(VOCAB, 8)  # frozen (LoRA leaves the head alone)
    loss, _ = lm_loss.linear_cross_entropy(hidden, weight, torch.tensor([1, 2, 3, 4]))
    (grad,) = torch.autograd.grad(loss, (hidden,))
    assert grad.shape == hidden.shape and grad.abs().sum() > 0
    empty, correct = lm_loss.linear_cross_entropy(hidden[:0], weight, torch.tensor([]).long())
    assert float(empty.detach()) == 0.0 and int(correct) == 0 and empty.requires_grad


def test_target_rows_keep_only_labelled_next_tokens():
    states = torch.arange(2 * 4, dtype=torch.float32).reshape(2, 4, 1)
    labels = torch.tensor([[-100, -100, 7, 8], [-100, 5, -100, -100]])
    rows, targets = lm_loss.target_rows(states, labels)
    assert targets.tolist() == [7, 8, 5]
    assert rows.squeeze(-1).tolist() == [1.0, 2.0, 4.0]  # the positions that predict them


# ------------------------------------------------------------------ on real HF models
def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    return GPT2LMHeadModel(config)


def _lora_llama():
    from peft import LoraConfig, get_peft_model

    model = _llama()
    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]))


def _gemma2_softcapped():
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        max_position_embeddings=64, final_logit_softcapping=2.0,
    )  # fmt: skip
    return Gemma2ForCausalLM(config)


def _batch():
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (3, 12))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0  # right padding
    labels = ids.clone()
    labels[:, :4] = -100  # the prompt
    labels[mask == 0] = -100
    return {"input_ids": ids, "attention_mask": mask}, labels


def _full_logits_loss(model, inputs, labels):
    logits = model(**inputs).logits[:, :-1]
    targets = labels[:, 1:]
    loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
        ignore_index=-100, reduction="sum",
    )  # fmt: skip
    correct = ((logits.argmax(-1) == targets) & (targets != -100)).sum()
    return loss, correct


@pytest.mark.parametrize("build", [_llama, _gpt2, _lora_llama, _gemma2_softcapped])
def test_model_loss_and_gradients_equal_the_full_logits_path(build):
    torch.manual_seed(0)
    model = build().train()
    params = [p for p in model.parameters() if p.requires_grad]
    inputs, labels = _batch()
    assert lm_loss.output_head(model) is not None  # the chunked path, not the fallback
    results = []
    for compute in (lm_loss.next_token_loss, _full_logits_loss):
        loss, correct = compute(model, inputs, labels)
        results.append((loss, int(correct), torch.autograd.grad(loss, params)))
    (loss, correct, grads), (ref_loss, ref_correct, ref_grads) = results
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-5)
    assert correct == ref_correct
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


class _LargestVocabTensor(TorchDispatchMode):
    """The most elements of any op output shaped like logits (last dimension the vocabulary,
    not the [H, V] transposed head weight)."""

    def __init__(self, hidden_size):
        super().__init__()
        self.hidden_size, self.largest = hidden_size, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] == VOCAB:
                if t.shape[:-1] == (self.hidden_size,):
                    continue
                self.largest = max(self.largest, t.numel())
        return out


def test_no_more_than_one_chunk_of_logits_exists(monkeypatch):
    model = _llama().train()
    inputs, labels = _batch()
    monkeypatch.setattr(lm_loss, "CHUNK_ELEMENTS", 4 * VOCAB)  # 4 rows per chunk
    rows = int((labels[:, 1:] != -100).sum())
    hidden_size = model.config.hidden_size
    with _LargestVocabTensor(hidden_size) as seen:
        loss, _ = lm_loss.next_token_loss(model, inputs, labels)
        loss.backward()
    assert rows > 8
    assert seen.largest == 4 * VOCAB  # one chunk: no [rows, V] or [B, T, V] logits
    with _LargestVocabTensor(hidden_size) as full:
        _full_logits_loss(model, inputs, labels)[0].backward()
    assert full.largest >= 3 * 11 * VOCAB  # the plain path does build the whole logits


class _NewHeadSizedTensors(TorchDispatchMode):
    """How many op outputs shaped like the head weight were new tensors (in-place ops,
    whose names end in `_`, write into one that exists)."""

    def __init__(self, shape):
        super().__init__()
        self.shape, self.count = tuple(shape), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inplace = func.__name__.split(".")[0].endswith("_")
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor) and tuple(t.shape) == self.shape and not inplace:
                self.count += 1
        return out


def test_the_head_gradient_is_one_accumulator_not_a_copy_per_chunk():
    # A [V, H] product per chunk beside the accumulator is 640 MiB more at the peak for
    # Gemma 3's head: the chunks add into the one accumulator in place.
    torch.manual_seed(0)
    hidden = torch.randn(40, 16, requires_grad=True)
    weight = torch.randn(VOCAB, 16, requires_grad=True)
    targets = torch.randint(0, VOCAB, (40,))
    with _NewHeadSizedTensors(weight.shape) as seen:
        loss, _ = lm_loss.linear_cross_entropy(hidden, weight, targets, rows_per_chunk=5)
    assert seen.count == 1  # the accumulator; 8 chunks each made one more before
    (grad,) = torch.autograd.grad(loss, (weight,))
    (ref,) = torch.autograd.grad(
        lm_loss.full_cross_entropy(hidden @ weight.t(), targets)[0], (weight,)
    )
    torch.testing.assert_close(grad, ref, rtol=1e-5, atol=1e-5)


def test_head_state_dict_and_generation_are_unchanged():
    model = _gpt2().eval()
    keys = list(model.state_dict())
    head_weight = model.get_output_embeddings().weight
    inputs, labels = _batch()
    with torch.no_grad():
        before = model(**inputs).logits
        lm_loss.next_token_loss(model, inputs, labels)
        after = model(**inputs).logits
    assert after.shape[-1] == VOCAB and torch.equal(before, after)
    assert list(model.state_dict()) == keys
    assert model.get_output_embeddings().weight is head_weight is model.transformer.wte.weight
    assert "forward" not in model.get_output_embeddings().__dict__
    out = model.generate(input_ids=inputs["input_ids"][:1, :4], max_new_tokens=3, do_sample=False)
    assert out.shape == (1, 7)


def test_packed_row_with_position_ids_equals_its_examples_alone():
    """position_ids restarting per example and no attention mask: transformers blocks
    attention between the examples, so the packed loss is the sum of the separate ones."""
    torch.manual_seed(0)
    model = _llama().eval()
    a, b = torch.randint(0, VOCAB, (1, 5)), torch.randint(0, VOCAB, (1, 7))
    with torch.no_grad():
        alone = sum(
            lm_loss.next_token_loss(model, {"input_ids": x, "attention_mask": None}, x)[0]
            for x in (a, b)
        )
        packed_ids = torch.cat([a, b], dim=1)
        labels = packed_ids.clone()
        labels[0, 5] = -100  # the first token of b is not predicted from a
        positions = torch.cat([torch.arange(5), torch.arange(7)])[None]
        inputs = {"input_ids": packed_ids, "position_ids": positions, "attention_mask": None}
        inputs["use_cache"] = False  # transformers reads packed positions without a cache
        packed, _ = lm_loss.next_token_loss(model, inputs, labels)
    torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)
