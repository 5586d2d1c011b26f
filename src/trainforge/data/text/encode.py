"""Records -> token ids and labels with the loss on completion tokens only.

A record becomes text segments, each marked "learn" (response / assistant turns) or not
(prompt, system, template scaffolding). Segments are tokenized separately and concatenated;
labels copy the ids of learned segments and are -100 (ignored by cross-entropy) elsewhere.

Without a chat template: `[BOS] prompt_template.format(prompt=...)` then `response EOS`
(learned); chat messages become `User: ...` / `Assistant: ...` lines with the assistant's
text learned and EOS after the last answer. With a chat template (and `use_chat_template`):
the template renders the conversation; the span each assistant turn adds after
`add_generation_prompt=True` is learned, including the template's end-of-turn marker, so the
model learns to stop. A conversational prompt/completion record (`learn_from`) learns the
completion's assistant turns only; a `text` record is learned whole (language modeling).

Examples longer than `max_seq_length` keep their first `max_seq_length` tokens and are
counted; one left with no learned token is dropped and counted. `pack` concatenates
examples into rows of up to `max_seq_length` tokens (first fit, in order). Each packed row
carries per-example `position_ids` restarting at 0, as TRL's padding-free packing and HF's
`DataCollatorWithFlattening` do: given `attention_mask=None`, transformers'
`masking_utils.find_packed_sequence_indices` turns them into a block-diagonal causal mask
(SDPA, eager, flex) or variable-length spans (flash-attention), so no example sees another.
The first token of each example after the first is never a target: it is not predicted
from the previous example's last token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainforge.data.text.records import TextRecord
from trainforge.errors import UserError

IGNORE = -100


@dataclass
class Example:
    input_ids: list[int]
    labels: list[int]
    prompt_len: int  # tokens before the last learned segment: the generation prompt
    reference: str  # the text of the last response
    # Packed rows only: each example's positions, restarting at 0 (None: 0..len-1).
    position_ids: list[int] | None = None


@dataclass
class EncodeStats:
    num_records: int = 0
    num_examples: int = 0
    num_truncated: int = 0
    num_dropped: int = 0
    num_tokens: int = 0
    num_target_tokens: int = 0
    max_length: int = 0
    truncated_where: list[str] = field(default_factory=list)

    def line(self, label: str, max_seq_length: int) -> str:
        return (
            f"{label}: {self.num_records} records -> {self.num_examples} examples, "
            f"{self.num_truncated} truncated to max_seq_length={max_seq_length}, "
            f"{self.num_dropped} dropped (no response tokens left), "
            f"{self.num_target_tokens:,} target tokens"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.num_records,
            "examples": self.num_examples,
            "truncated": self.num_truncated,
            "dropped": self.num_dropped,
            "tokens": self.num_tokens,
            "target_tokens": self.num_target_tokens,
            "longest_example_tokens": self.max_length,
        }


class Encoder:
    def __init__(
        self,
        tokenizer: Any,
        *,
        max_seq_length: int,
        prompt_template: str = "{prompt}\n",
        use_chat_template: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.max_seq_length = int(max_seq_length)
        self.prompt_template = prompt_template
        self.chat = bool(use_chat_template and getattr(tokenizer, "chat_template", None))
        if tokenizer.eos_token_id is None:
            raise UserError(
                "the tokenizer has no eos_token",
                "set eos_token in the model folder's tokenizer_config.json",
            )
        with_special = tokenizer("a", add_special_tokens=True)["input_ids"]
        without = tokenizer("a", add_special_tokens=False)["input_ids"]
        cut = len(with_special) - len(without)
        self.prefix_ids = with_special[:cut] if with_special[cut:] == without else []

    # ----------------------------------------------------------- segments
    def segments(self, record: TextRecord) -> list[tuple[str, bool]]:
        """(text, learn) pieces of one record, in order."""
        if record.text is not None:
            return [(record.text, True)]  # language modeling: every token (TRL's `text`)
        if self.chat:
            return self._chat_segments(record)
        if record.messages is not None:
            return self._plain_chat_segments(record)
        prompt = self.prompt_template.format(prompt=record.prompt)
        if record.system:
            prompt = f"{record.system}\n{prompt}"
        return [(prompt, False), (record.response or "", True)]

    @staticmethod
    def _plain_chat_segments(record: TextRecord) -> list[tuple[str, bool]]:
        """Chat without a template: `Role: text` lines, the assistant's text learned."""
        out: list[tuple[str, bool]] = []
        for i, m in enumerate(record.as_messages()):
            role = m["role"].capitalize()
            if m["role"] == "assistant" and i >= record.learn_from:
                out += [(f"{role}: ", False), (m["content"], True), ("\n", False)]
            else:
                out.append((f"{role}: {m['content']}\n", False))
        if out[-1] == ("\n", False):
            out.pop()  # the last answer ends with EOS instead
        return out

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )

    def _chat_segments(self, record: TextRecord) -> list[tuple[str, bool]]:
        messages = record.as_messages()
        full = self._render(messages, False)
        turns = [
            i for i, m in enumerate(messages) if m["role"] == "assistant" and i >= record.learn_from
        ]
        spans = []
        for i in turns:
            start = self._render(messages[:i], True)
            end = self._render(messages[: i + 1], False)
            if not (end.startswith(start) and full.startswith(end)):
                spans = []  # template rewrites earlier turns: learn the last turn only
                break
            spans.append((len(start), len(end)))
        if not spans:
            start = self._render(messages[: turns[-1]], True)
            if not full.startswith(start):
                raise UserError(
                    f"{record.where}: the chat template renders this conversation inconsistently",
                    "set data.use_chat_template=false to use prompt_template instead",
                )
            spans = [(len(start), len(full))]
        out, cursor = [], 0
        for start, end in spans:
            out += [(full[cursor:start], False), (full[start:end], True)]
            cursor = end
        out.append((full[cursor:], False))
        return [(text, learn) for text, learn in out if text]

    # ------------------------------------------------------------- encode
    def encode(self, records: list[TextRecord]) -> tuple[list[Example], EncodeStats]:
        stats = EncodeStats(num_records=len(records))
        pieces = [self.segments(r) for r in records]
        flat = [text for segs in pieces for text, _ in segs]
        ids_flat = self.tokenizer(flat, add_special_tokens=False)["input_ids"] if flat else []
        cursor = 0
        examples = []
        for record, segs in zip(records, pieces, strict=True):
            ids: list[int] = list(self.prefix_ids)
            labels: list[int] = [IGNORE] * len(ids)
            prompt_len = 0
            last_learned = max(i for i, (_, learn) in enumerate(segs) if learn)
            for text_index, (_, learn) in enumerate(segs):
                seg_ids = list(ids_flat[cursor + text_index])
                if not self.chat and text_index == last_learned:
                    seg_ids.append(self.tokenizer.eos_token_id)
                if learn:
                    prompt_len = len(ids)
                ids += seg_ids
                labels += seg_ids if learn else [IGNORE] * len(seg_ids)
            cursor += len(segs)
            stats.max_length = max(stats.max_length, len(ids))
            if len(ids) > self.max_seq_length:
                stats.num_truncated += 1
                stats.truncated_where.append(record.where)
                ids, labels = ids[: self.max_seq_length], labels[: self.max_seq_length]
                if all(label == IGNORE for label in labels[1:]):
                    stats.num_dropped += 1
                    continue
            examples.append(Example(ids, labels, prompt_len, _reference(record)))
            stats.num_tokens += len(ids)
            stats.num_target_tokens += sum(label != IGNORE for label in labels[1:])
        stats.num_examples = len(examples)
        return examples, stats


def _reference(record: TextRecord) -> str:
    """The text the last learned segment holds, for comparing generated output."""
    if record.text is not None:
        return record.text.strip()
    if record.messages is None:
        return (record.response or "").strip()
    return [m for m in record.messages if m["role"] == "assistant"][-1]["content"].strip()


def pack(examples: list[Example], max_seq_length: int) -> list[Example]:
    """Concatenate examples into rows of at most max_seq_length tokens, first fit in order.
    A row's `position_ids` restart at each example; the label of each example's first token
    is IGNORE (it was never a target: the loss predicts token t+1 from tokens <= t, and
    label 0 of an example alone has nothing before it), so the targets stay the same."""
    rows: list[Example] = []
    for example in examples:
        n = len(example.input_ids)
        if rows and len(rows[-1].input_ids) + n <= max_seq_length:
            row = rows[-1]
            row.input_ids += example.input_ids
            row.labels += [IGNORE, *example.labels[1:]]
            row.position_ids = [*(row.position_ids or []), *range(n)]
        else:
            labels = [IGNORE, *example.labels[1:]]
            rows.append(Example(list(example.input_ids), labels, 0, "", list(range(n))))
    return rows
