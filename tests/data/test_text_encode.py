"""Text records -> ids and labels: loss on completion tokens only, truncation counted,
chat templates, TSV pairs, packing and padded batches."""

from __future__ import annotations

import json

import pytest
import torch

from fakes.tiny_lm import make_model, write_corpus
from trainforge.data.text import IGNORE, Encoder, TextRecord, TokenDataset, pack, read_records
from trainforge.errors import UserError
from trainforge.models.hf import load_tokenizer


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return list(write_corpus(tmp_path_factory.mktemp("corpus")).values())


@pytest.fixture(scope="module")
def gpt2_tok(tmp_path_factory, corpus):
    """Tokenizer of a tiny GPT-2 from `models init`: no chat template."""
    return load_tokenizer(make_model(tmp_path_factory.mktemp("m") / "gpt2", "gpt2", False, corpus))


@pytest.fixture(scope="module")
def chat_tok(tmp_path_factory, corpus):
    """Tokenizer of a tiny Llama from `models init --chat-template` (ChatML)."""
    return load_tokenizer(make_model(tmp_path_factory.mktemp("m") / "llama", "llama", True, corpus))


def test_prompt_tokens_are_masked_and_response_plus_eos_learned(gpt2_tok):
    record = TextRecord("hand", prompt="What is 2 plus 2?", response="4")
    [example], stats = Encoder(gpt2_tok, max_seq_length=64).encode([record])
    prompt_ids = gpt2_tok("What is 2 plus 2?\n", add_special_tokens=False)["input_ids"]
    answer_ids = gpt2_tok("4", add_special_tokens=False)["input_ids"]
    assert example.input_ids == prompt_ids + answer_ids + [gpt2_tok.eos_token_id]
    assert example.labels == [IGNORE] * len(prompt_ids) + answer_ids + [gpt2_tok.eos_token_id]
    assert example.prompt_len == len(prompt_ids) and example.reference == "4"
    assert stats.num_target_tokens == len(answer_ids) + 1 and stats.num_truncated == 0


def test_truncation_is_counted_and_empty_examples_dropped(gpt2_tok):
    records = [
        TextRecord("short", prompt="hi", response="yes"),
        TextRecord("long answer", prompt="hi", response="one two three four five six " * 5),
        TextRecord("long prompt", prompt="word " * 40, response="lost"),
    ]
    examples, stats = Encoder(gpt2_tok, max_seq_length=16).encode(records)
    assert stats.num_truncated == 2 and stats.num_dropped == 1
    assert stats.truncated_where == ["long answer", "long prompt"]
    assert len(examples) == 2 and all(len(e.input_ids) <= 16 for e in examples)
    assert "2 truncated to max_seq_length=16, 1 dropped" in stats.line("train", 16)


def test_chat_template_learns_only_assistant_turns(chat_tok):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "Again."},
        {"role": "assistant", "content": "hi again"},
    ]
    record = TextRecord("chat", messages=tuple(messages))
    encoder = Encoder(chat_tok, max_seq_length=128)
    assert encoder.chat
    [example], _ = encoder.encode([record])
    learned = [t for t, label in zip(example.input_ids, example.labels, strict=True) if label >= 0]
    assert chat_tok.decode(learned) == "hi<|im_end|>\nhi again<|im_end|>\n"
    full = chat_tok.apply_chat_template(messages, tokenize=False)
    assert chat_tok.decode(example.input_ids) == full
    prompt = chat_tok.decode(example.input_ids[: example.prompt_len])
    assert prompt == chat_tok.apply_chat_template(messages[:-1], tokenize=False,
                                                  add_generation_prompt=True)  # fmt: skip
    assert example.reference == "hi again"


def test_prompt_response_goes_through_the_chat_template_too(chat_tok):
    [example], _ = Encoder(chat_tok, max_seq_length=128).encode(
        [TextRecord("r", prompt="Say yes.", response="yes")]
    )
    learned = [t for t, label in zip(example.input_ids, example.labels, strict=True) if label >= 0]
    assert chat_tok.decode(learned) == "yes<|im_end|>\n"
    off = Encoder(chat_tok, max_seq_length=128, use_chat_template=False)
    [plain], _ = off.encode([TextRecord("r", prompt="Say yes.", response="yes")])
    assert "<|im_start|>" not in chat_tok.decode(plain.input_ids)


def test_chat_without_template_uses_role_lines(gpt2_tok):
    record = TextRecord(
        "c",
        messages=(
            {"role": "user", "content": "Say hi."},
            {"role": "assistant", "content": "hi"},
        ),
    )
    [example], _ = Encoder(gpt2_tok, max_seq_length=64).encode([record])
    assert gpt2_tok.decode(example.input_ids[: example.prompt_len]) == "User: Say hi.\nAssistant: "
    learned = [t for t, label in zip(example.input_ids, example.labels, strict=True) if label >= 0]
    assert learned == gpt2_tok("hi", add_special_tokens=False)["input_ids"] + [
        gpt2_tok.eos_token_id
    ]


def test_tsv_pairs_and_their_errors(tmp_path, gpt2_tok):
    path = tmp_path / "g2p.tsv"
    path.write_text("# word<TAB>phonemes\nhello\tHH AH L OW\n\nworld\tW ER L D\n")
    records = read_records(path)
    assert [(r.prompt, r.response) for r in records] == [
        ("hello", "HH AH L OW"),
        ("world", "W ER L D"),
    ]
    assert records[1].where.endswith(":4")
    [example, _], _ = Encoder(gpt2_tok, max_seq_length=64, prompt_template="{prompt}\n").encode(
        records
    )
    assert gpt2_tok.decode(example.input_ids[: example.prompt_len]) == "hello\n"
    path.write_text("hello\tHH AH\textra\n")
    with pytest.raises(UserError, match=r"g2p.tsv:1: expected source<TAB>target, got 3"):
        read_records(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[{"prompt": "a"}]', "not prompt/response or messages"),
        ('[{"messages": [{"role": "user", "content": "a"}]}]', "no assistant turn"),
        ('{"a": 1}', "expected a list of records"),
        ("[1, 2", "invalid JSON at line 1"),
        ('[{"prompt": "", "response": "x"}]', "prompt must be non-empty text"),
    ],
)
def test_bad_records_are_one_line_errors(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(UserError, match=message) as info:
        read_records(path)
    assert "\n" not in str(info.value)


def test_jsonl_alpaca_and_completion_aliases(tmp_path):
    path = tmp_path / "d.jsonl"
    lines = [
        {"instruction": "Add", "input": "1 and 2", "output": "3"},
        {"prompt": "p", "completion": "c", "system": "s"},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines))
    first, second = read_records(path)
    assert (first.prompt, first.response) == ("Add\n\n1 and 2", "3")
    assert (second.prompt, second.response, second.system) == ("p", "c", "s")


def test_packing_keeps_labels_and_respects_the_length(gpt2_tok):
    records = [TextRecord(str(i), prompt=f"q{i}", response=f"a{i}") for i in range(10)]
    examples, _ = Encoder(gpt2_tok, max_seq_length=32).encode(records)
    rows = pack(examples, 32)
    assert len(rows) < len(examples) and all(len(r.input_ids) <= 32 for r in rows)
    assert sum(len(r.input_ids) for r in rows) == sum(len(e.input_ids) for e in examples)
    assert [x for r in rows for x in r.labels] == [x for e in examples for x in e.labels]


def test_batches_pad_right_prompts_left_and_count_targets(gpt2_tok):
    records = [
        TextRecord("a", prompt="one", response="x"),
        TextRecord("b", prompt="two three four", response="yy zz"),
    ]
    examples, stats = Encoder(gpt2_tok, max_seq_length=64).encode(records)
    batch = TokenDataset(examples, pad_id=0, with_prompts=True).__getitems__([0, 1])
    assert batch["num_targets"] == stats.num_target_tokens
    assert batch["attention_mask"].sum().item() == sum(len(e.input_ids) for e in examples)
    short = len(examples[0].input_ids)
    assert (batch["labels"][0, short:] == IGNORE).all() and (
        batch["input_ids"][0, short:] == 0
    ).all()
    assert batch["prompt_mask"][0, 0] == 0 and batch["prompt_mask"][:, -1].all()
    assert torch.equal(
        batch["prompt_ids"][1], torch.tensor(examples[1].input_ids[: examples[1].prompt_len])
    )
    assert batch["references"] == ["x", "yy zz"]


def test_shipped_jetson_dataset_is_what_the_script_builds():
    """example_datasets/jetson_training.json is generated from the schema and profiles: a
    changed field description must come with the regenerated file."""
    import importlib.util
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(
        "build_jetson_dataset", repo / "scripts/build_jetson_dataset.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    shipped = repo / "example_datasets" / "jetson_training.json"
    built = script.build()
    assert json.loads(shipped.read_text(encoding="utf-8")) == built, (
        "example_datasets/jetson_training.json is stale: run "
        "`python scripts/build_jetson_dataset.py`"
    )
    assert shipped.read_text(encoding="utf-8") == script.render(built)
    records = read_records(shipped)
    assert len(records) >= 200
    assert sum(r.messages is not None for r in records) >= 1  # the chat records too


def _conversational(tmp_path):
    path = tmp_path / "conv.jsonl"
    record = {
        "prompt": [
            {"role": "user", "content": "Say hi."},
            {"role": "assistant", "content": "hello there"},
            {"role": "user", "content": "Again."},
        ],
        "completion": [{"role": "assistant", "content": "hi"}],
    }
    path.write_text(json.dumps(record) + "\n" + json.dumps({"text": "plain words here"}) + "\n")
    return read_records(path)


def _learned(tok, example):
    return tok.decode(
        [t for t, label in zip(example.input_ids, example.labels, strict=True) if label >= 0]
    )


def test_trl_conversational_prompt_completion_learns_the_completion_only(tmp_path, chat_tok):
    conv, text = _conversational(tmp_path)
    assert conv.learn_from == 3 and len(conv.messages) == 4 and text.text == "plain words here"
    [example, lm], _ = Encoder(chat_tok, max_seq_length=128).encode([conv, text])
    learned = _learned(chat_tok, example)
    # The prompt's own assistant turn is context, as in TRL's prompt-completion datasets.
    assert learned.startswith("hi") and "hello there" not in learned
    rendered = chat_tok.apply_chat_template(list(conv.messages), tokenize=False)
    assert chat_tok.decode(example.input_ids) == rendered
    # A `text` record is language modeling: every token learned (the template plays no part).
    assert all(label >= 0 for label in lm.labels[1:])
    assert "plain words here" in chat_tok.decode(lm.input_ids)


def test_trl_formats_without_a_chat_template(tmp_path, gpt2_tok):
    conv, text = _conversational(tmp_path)
    [example, lm], stats = Encoder(gpt2_tok, max_seq_length=128).encode([conv, text])
    assert _learned(gpt2_tok, example) == "hi" + gpt2_tok.eos_token
    assert lm.labels == lm.input_ids and lm.input_ids[-1] == gpt2_tok.eos_token_id
    assert (
        stats.num_target_tokens
        == sum(label >= 0 for label in example.labels[1:]) + len(lm.input_ids) - 1
    )


def test_a_conversational_completion_needs_an_answer(tmp_path):
    path = tmp_path / "bad.jsonl"
    record = {"prompt": [{"role": "user", "content": "a"}], "completion": [
        {"role": "user", "content": "b"}]}  # fmt: skip
    path.write_text(json.dumps(record))
    with pytest.raises(UserError, match="completion: messages have no assistant turn"):
        read_records(path)


def test_a_tokenizer_without_a_chat_template_is_said_once(capsys, gpt2_tok, chat_tok):
    from trainforge.data.options.text import TextOptions
    from trainforge.data.text.build import _encoder

    assert not _encoder(TextOptions(), gpt2_tok).chat
    assert capsys.readouterr().out == (
        "the tokenizer has no chat template: records are written with "
        "data.options.prompt_template '{prompt}\\n'\n"
    )
    assert _encoder(TextOptions(), chat_tok).chat and capsys.readouterr().out == ""
    assert not _encoder(TextOptions(use_chat_template=False), gpt2_tok).chat
    assert capsys.readouterr().out == ""  # asked for: nothing to say
