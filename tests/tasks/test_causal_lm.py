"""The causal-lm task on the one training loop: loss falls, accumulation is exact, LoRA trains
only the adapter and merges faithfully, resume through the engine's checkpoints is exact."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from fakes.tiny_lm import lm_config
from trainforge.engine.callbacks import Callback
from trainforge.engine.trainer import Trainer
from trainforge.tasks import build_task
from trainforge.tasks.causal_lm import CausalLM

pytestmark = pytest.mark.usefixtures("single_thread")


def trainer_for(config, run_dir) -> Trainer:
    torch.manual_seed(config.training.seed)
    task = build_task(config)
    return Trainer(task, config, run_dir=run_dir, device=torch.device("cpu"), callbacks=[])


def test_training_lowers_the_validation_loss(tmp_path, tiny_gpt2, lm_corpus):
    config = lm_config(tiny_gpt2, lm_corpus["json"], **{"training.max_steps": 30})
    trainer = trainer_for(config, tmp_path)
    assert isinstance(trainer.task, CausalLM) and trainer.task.items_name == "tokens"
    before = trainer.evaluate()
    trainer.fit()
    after = trainer.evaluate()
    assert after["loss"] < 0.6 * before["loss"]
    assert after["accuracy"] > before["accuracy"] + 0.2
    assert math.isclose(after["perplexity"], math.exp(after["loss"]))


def test_step_weight_is_the_number_of_target_tokens(tmp_path, tiny_gpt2, lm_corpus):
    task = build_task(lm_config(tiny_gpt2, lm_corpus["json"]))
    batch = next(iter(task.train_loader))
    out = task.step(task.model, task.to_device(batch, torch.device("cpu"), True))
    assert out.weight == int((batch["labels"][:, 1:] != -100).sum()) > 0
    assert out.sums["correct"].dim() == 0  # a device tensor, summed by the loop later


def test_accumulation_equals_one_big_batch(tmp_path, tiny_llama_chat, lm_corpus):
    """4 micro-batches of 1 (different lengths) + accumulation 4 == one batch of 4.

    Llama: no dropout, whose masks would differ between the two batch shapes.
    Compared on the gradient the optimizer receives: Adam's first step is lr * sign(g) for
    tiny g, which would turn rounding noise into visible parameter differences.
    """
    grads = []
    for batch_size, accumulation in ((4, 1), (1, 4)):
        config = lm_config(
            tiny_llama_chat,
            lm_corpus["json"],
            **{
                "training.max_steps": 1,
                "training.per_device_train_batch_size": batch_size,
                "training.gradient_accumulation_steps": accumulation,
            },
        )
        trainer = trainer_for(config, tmp_path / str(batch_size))
        real_step = trainer.optimizer.step

        def spy(*args, trainer=trainer, real_step=real_step, **kwargs):
            grads.append([p.grad.detach().clone() for p in trainer.params])
            return real_step(*args, **kwargs)

        trainer.optimizer.step = spy
        trainer.fit()
    assert len(grads) == 2
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_gradient_checkpointing_reaches_the_hf_model(tmp_path, tiny_gpt2, lm_corpus):
    config = lm_config(tiny_gpt2, lm_corpus["json"], **{"training.gradient_checkpointing": True})
    model = build_task(config).model
    assert getattr(model, "is_activation_checkpointing", None) or model.is_gradient_checkpointing


def test_lora_trains_only_the_adapter_and_merges_faithfully(tmp_path, tiny_llama_chat, lm_corpus):
    config = lm_config(
        tiny_llama_chat,
        lm_corpus["chat"],
        **{
            "training.max_steps": 5,
            "training.per_device_train_batch_size": 2,
            "lora.enabled": True,
            "lora.r": 4,
            "lora.target_modules": "[q_proj, v_proj]",
            "lora.merge_adapter": True,
        },
    )
    trainer = trainer_for(config, tmp_path)
    model = trainer.model
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    frozen_before = {
        n: p.detach().clone() for n, p in model.named_parameters() if n not in trainable
    }
    adapter_before = {n: p.detach().clone() for n, p in model.named_parameters() if n in trainable}
    assert len(trainer.optimizer.param_groups[0]["params"]) + len(
        trainer.optimizer.param_groups[1]["params"]
    ) == len(trainable)
    trainer.fit()
    for name, p in model.named_parameters():
        if name in trainable:
            continue
        assert torch.equal(p, frozen_before[name]), name
    assert any(
        not torch.equal(p, adapter_before[n]) for n, p in model.named_parameters() if n in trainable
    )

    ids = torch.tensor([[5, 17, 42, 9, 33, 12]])
    model.eval()
    with torch.no_grad():
        unmerged = model(input_ids=ids).logits
    out = trainer.task.save_final(
        tmp_path, model=model, metrics={"loss": 1.0}, config_hash="x", global_step=5
    )
    assert out == tmp_path / "model" and (tmp_path / "adapter" / "adapter_config.json").is_file()
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    def load_base():
        return AutoModelForCausalLM.from_pretrained(tiny_llama_chat, local_files_only=True).eval()

    merged = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    untouched = load_base()  # PeftModel.from_pretrained injects LoRA layers into its base
    adapted = PeftModel.from_pretrained(load_base(), tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits, unmerged, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(adapted(input_ids=ids).logits, unmerged, rtol=1e-4, atol=1e-5)
        plain = untouched(input_ids=ids).logits
    # The adapter changed the outputs by far more than the tolerance used above.
    gap = (plain - unmerged).abs().max().item()
    assert gap > 1e-3
    # Merging changed exactly the adapted projections of the base weights.
    base_state, merged_state = untouched.state_dict(), merged.state_dict()
    assert base_state.keys() == merged_state.keys()
    changed = {n for n, w in base_state.items() if not torch.equal(w, merged_state[n])}
    assert changed and {n.rsplit(".", 2)[-2] for n in changed} == {"q_proj", "v_proj"}


def test_lora_alpha_and_dropout_reach_peft(tiny_llama_chat, lm_corpus):
    sets = {
        "lora.enabled": True,
        "lora.r": 4,
        "lora.lora_alpha": 24,
        "lora.lora_dropout": 0.2,
        "lora.target_modules": "[q_proj, v_proj]",
    }
    model = build_task(lm_config(tiny_llama_chat, lm_corpus["chat"], **sets)).model
    peft_config = model.peft_config["default"]
    assert (peft_config.r, peft_config.lora_alpha, peft_config.lora_dropout) == (4, 24, 0.2)
    layers = [m for n, m in model.named_modules() if n.endswith("q_proj") or n.endswith("v_proj")]
    assert len(layers) == 4  # 2 layers x (q, v)
    for layer in layers:
        assert layer.scaling["default"] == pytest.approx(24 / 4)
        assert layer.lora_dropout["default"].p == pytest.approx(0.2)


def test_packed_run_keeps_completion_masking_and_trains(tmp_path, tiny_gpt2, lm_corpus):
    """data.packing through build_text_data and the real Trainer: rows hold several
    examples, every label equals the unpacked examples' labels token for token (prompt
    tokens after a packed boundary stay masked), and the loss falls."""
    sets = {"data.max_seq_length": 64, "training.max_steps": 25}
    plain = build_task(lm_config(tiny_gpt2, lm_corpus["json"], **sets))
    config = lm_config(tiny_gpt2, lm_corpus["json"], **sets, **{"data.packing": True})
    trainer = trainer_for(config, tmp_path)
    examples = plain.train_loader.dataset.examples
    rows = trainer.task.train_loader.dataset.examples
    assert len(rows) < len(examples) // 3 and all(len(r.input_ids) <= 64 for r in rows)
    flat = [t for e in examples for t in e.labels]
    assert [t for r in rows for t in r.labels] == flat
    assert [t for r in rows for t in r.input_ids] == [t for e in examples for t in e.input_ids]
    # Row 0 holds examples 0, 1, ...: example 1's prompt sits inside it and is masked.
    first, second = examples[0], examples[1]
    start = len(first.input_ids)
    assert rows[0].labels[start : start + second.prompt_len] == [-100] * second.prompt_len
    assert rows[0].labels[start + second.prompt_len] != -100
    batch = next(iter(trainer.task.train_loader))
    learned = batch["labels"] != -100
    assert torch.equal(batch["labels"][learned], batch["input_ids"][learned])
    assert batch["num_targets"] == int(learned[:, 1:].sum())

    before = trainer.evaluate()  # validation is never packed: comparable before and after
    losses = TrainLosses()
    trainer.callbacks.append(losses)
    trainer.fit()
    after = trainer.evaluate()
    assert len(losses.values) == 25 and all(math.isfinite(x) for x in losses.values)
    assert sum(losses.values[-5:]) < 0.7 * sum(losses.values[:5])
    assert after["loss"] < 0.8 * before["loss"]


class TrainLosses(Callback):
    """The training loss of every optimizer step."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def on_step_end(self, trainer: Trainer) -> None:
        self.values.append(trainer.pop_train_metrics()["loss"])


@pytest.mark.parametrize("fixture", ["tiny_gpt2", "tiny_llama_chat"])
def test_resume_mid_epoch_is_exact(tmp_path, request, lm_corpus, fixture):
    """6 steps straight == 3 steps, checkpoint, fresh task and trainer, load, 3 more steps.

    GPT-2 ties lm_head to wte: the checkpoint must write and restore both names.
    """
    model_dir = request.getfixturevalue(fixture)
    sets = {
        "training.max_steps": 6,
        "training.per_device_train_batch_size": 4,
        "schedule.lr_scheduler_type": "cosine",
        "schedule.warmup_steps": 2,
        "lora.enabled": fixture == "tiny_llama_chat",
    }
    config = lm_config(model_dir, lm_corpus["json"], **sets)
    straight = trainer_for(config, tmp_path / "a")
    straight.fit()

    first = trainer_for(config, tmp_path / "b")
    first.total_steps = 3
    first.fit()
    path = first.save_checkpoint("checkpoint-3", wait=True)
    torch.manual_seed(1234)
    second = trainer_for(config, tmp_path / "b")
    second.load_checkpoint(path)
    second.fit()
    assert second.state.global_step == 6
    for (name, a), b in zip(
        straight.model.named_parameters(), second.model.parameters(), strict=True
    ):
        assert torch.equal(a, b), name


def test_the_base_model_recorded_is_the_folder_loaded(tmp_path):
    """A run on another corpus loads models/NAME-<corpus>-<hash>, not the name the config
    writes: the model's trainforge.json (`models list`'s "base:") and the trackers' params
    name the folder that was loaded."""
    from types import SimpleNamespace

    from trainforge.train import logged_params

    def task(written: str, loaded: str) -> CausalLM:
        t = CausalLM.__new__(CausalLM)  # only what provenance reads
        model = SimpleNamespace(model_name_or_path=written)
        t.config = SimpleNamespace(model=model, output=SimpleNamespace(models_dir="models"))
        t.base_dir = Path(loaded)
        return t

    derived = task("models/g2p-small", "models/g2p-small-data-53d346bf")
    assert derived.base_model == "models/g2p-small-data-53d346bf"
    assert task("models/tiny", "models/tiny").base_model == "models/tiny"
    assert task("tiny", "models/tiny").base_model == "tiny"  # looked up in models/: as written
    hub = task("org/name", str(tmp_path / "hub" / "snapshots" / "abc"))
    assert hub.base_model == "org/name"  # an id names its snapshot

    config = lm_config(tmp_path / "base", tmp_path / "train.tsv")
    params = logged_params(config, derived)
    assert params["model.model_name_or_path"] == "models/g2p-small-data-53d346bf"
