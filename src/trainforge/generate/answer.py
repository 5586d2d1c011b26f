"""A loaded model that answers: the prompt in the model's training layout, the stop tokens
of its generation config, greedy or sampled continuation (the package doc says why each)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainforge.errors import UserError
from trainforge.generate.sources import DEFAULT_MAX_NEW_TOKENS, PLAIN_TEMPLATE, Settings, Source

SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "typical_p")


@dataclass
class Loaded:
    """A model ready to answer, with what it was asked in the layout it was trained on."""

    source: Source
    model: Any
    tokenizer: Any
    chat: bool  # rendered with the model's chat template
    prompt_template: str
    stop_ids: list[int]
    max_new_tokens: int

    def describe(self) -> str:
        layout = "its chat template" if self.chat else f"prompt_template {self.prompt_template!r}"
        stops = ", ".join(self.tokenizer.convert_ids_to_tokens(self.stop_ids))
        return f"model {self.source.label}: {self.source.line()} ({layout}; stops at {stops})"


def load(source: Source, settings: Settings) -> Loaded:
    """The model, tokenizer and generation settings of `source`, ready on `settings.device`."""
    from trainforge.models import hf

    hf.require_llm_extra()
    tokenizer = hf.load_tokenizer(source.model_dir)
    model = hf.load_causal_lm(source.model_dir)
    if source.adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(source.adapter_dir)).merge_and_unload()
    if source.checkpoint is not None:
        model = _read_checkpoint(model, source)
    model.config.use_cache = True  # inference: load_causal_lm turned it off for training
    model.to(settings.device).eval()
    options = (source.run_config.get("data") or {}).get("options") or {}
    use_template = options.get("use_chat_template", True) is not False
    chat = bool(use_template and getattr(tokenizer, "chat_template", None))
    task = source.run_config.get("task") or {}
    limit = settings.max_new_tokens or task.get("max_new_tokens")
    limit = limit or model.generation_config.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    return Loaded(
        source=source,
        model=model,
        tokenizer=tokenizer,
        chat=chat,
        prompt_template=options.get("prompt_template") or PLAIN_TEMPLATE,
        stop_ids=stop_ids(model.generation_config, tokenizer),
        max_new_tokens=int(limit),
    )


def _read_checkpoint(model: Any, source: Source) -> Any:
    """An unfinished run's weights onto its base model (with its LoRA layers when it trained
    LoRA), read with safetensors (`engine.checkpoint.read_weights`)."""
    from trainforge.engine import checkpoint as ckpt
    from trainforge.export.source import load_weights
    from trainforge.models import hf

    lora = source.run_config.get("lora") or {}
    if lora.get("enabled"):
        from types import SimpleNamespace

        model = hf.apply_lora(model, SimpleNamespace(**{**_LORA_DEFAULTS, **lora}))
    load_weights(model, ckpt.read_weights(source.checkpoint), source.checkpoint)
    return model.merge_and_unload() if hf.is_peft(model) else model


_LORA_DEFAULTS = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": None}


def stop_ids(generation_config: Any, tokenizer: Any) -> list[int]:
    """Every stop token: the generation config's `eos_token_id` (an int or a list) and the
    tokenizer's EOS, in that order, once each."""
    given = generation_config.eos_token_id
    ids = list(given) if isinstance(given, list | tuple) else [given]
    ids.append(tokenizer.eos_token_id)
    return list(dict.fromkeys(int(i) for i in ids if i is not None))


def prompt_ids(loaded: Loaded, conversation: list[dict[str, str]]) -> list[int]:
    """The token ids the model continues: the conversation so far (its last turn the
    user's) as `data.text.encode` renders a training example up to the answer."""
    tok = loaded.tokenizer
    if loaded.chat:
        text = tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    elif len(conversation) == 1:
        text = loaded.prompt_template.format(prompt=conversation[0]["content"])
    else:  # a chat without a template: `Role: text` lines, as training writes them
        lines = [f"{m['role'].capitalize()}: {m['content']}" for m in conversation]
        text = "\n".join(lines) + "\nAssistant: "
    return _prefix_ids(tok) + tok(text, add_special_tokens=False)["input_ids"]


def _prefix_ids(tokenizer: Any) -> list[int]:
    """The ids the tokenizer puts before a text (its BOS), as training adds them."""
    with_special = tokenizer("a", add_special_tokens=True)["input_ids"]
    without = tokenizer("a", add_special_tokens=False)["input_ids"]
    cut = len(with_special) - len(without)
    return with_special[:cut] if with_special[cut:] == without else []


def answer(loaded: Loaded, conversation: list[dict[str, str]], settings: Settings) -> str:
    """The model's next turn, decoded without special tokens."""
    import torch

    ids = prompt_ids(loaded, conversation)
    limit = _positions(loaded.model) - len(ids)
    if limit <= 0:
        raise UserError(
            f"the prompt is {len(ids)} tokens: the model has {_positions(loaded.model)} positions",
            "shorten the prompt (or start a new --chat)",
        )
    sample = bool(settings.temperature)
    _set_sampling(loaded.model.generation_config, settings, sample)
    if settings.seed is not None:
        torch.manual_seed(settings.seed)
    device = next(loaded.model.parameters()).device
    inputs = torch.tensor([ids], device=device)
    with torch.no_grad():
        out = loaded.model.generate(
            input_ids=inputs,
            attention_mask=torch.ones_like(inputs),
            max_new_tokens=min(loaded.max_new_tokens, limit),
            do_sample=sample,
            eos_token_id=loaded.stop_ids,
            pad_token_id=loaded.tokenizer.pad_token_id,
        )
    new = out[0, len(ids) :].tolist()
    # generate() keeps the stop token it ended on; a listed stop token need not be special
    # (skip_special_tokens would not drop it), so the answer ends before the first one.
    ends = [i for i, token in enumerate(new) if token in loaded.stop_ids]
    new = new[: ends[0]] if ends else new
    return loaded.tokenizer.decode(new, skip_special_tokens=True).strip()


def _set_sampling(config: Any, settings: Settings, sample: bool) -> None:
    """The loaded model's own generation config for this call: greedy clears the sampling
    fields (the model's defaults, e.g. Gemma 3's top_k 64 and top_p 0.95, would otherwise
    be reported as unused); sampling takes the temperature and top-p asked for."""
    config.do_sample = sample
    for name in SAMPLING_FIELDS:
        if hasattr(config, name):
            setattr(config, name, None)
    if sample:
        config.temperature = settings.temperature
        config.top_p = settings.top_p


def _positions(model: Any) -> int:
    cfg = model.config
    limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    return int(limit or 1 << 30)
