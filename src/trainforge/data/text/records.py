"""Text records from files: JSON, JSONL, TSV and CSV, checked record by record.

Owns `TextRecord`, `read_records` and the file-level checks before them
(`validate_text_file`). Accepted shapes (per record, so one file may mix them):
    {"prompt": ..., "response": ...}            also "completion" for "response", and the
                                                Alpaca form "instruction" [+ "input"] + "output"
    {"messages": [{"role": ..., "content": ...}, ...]}   chat; needs an assistant turn
    {"prompt": [messages], "completion": [messages]}     TRL's conversational prompt-
                                                completion: only the completion is learned
    {"text": ...}                               TRL's language-modeling form: every token
    {"system": ...} may accompany a prompt/response record.
A JSON file holds a list of records (or {"records": [...]}); a JSONL file one record per
line; a TSV file `source<TAB>target` per line (the DGX Spark G2P plan), blank lines and
lines starting with `#` skipped; a CSV file two columns `prompt,response` per row (quoted as
the `csv` module reads RFC 4180). A first TSV/CSV line naming the columns (`word,phonemes`,
`prompt,response`, ...) is a header and skipped, or as `data.header` declares. Any line
ending (LF, CRLF, CR, mixed) and a UTF-8 byte-order mark are read. The file-level checks
(a file, not a folder, not empty, UTF-8, a known suffix) come first. Every problem names
the file, the line or record, and the fix.

`datasets.load_dataset("json")` was considered; it caches Arrow files under the user's home
and reports malformed records without their position, which plain `json` does better here.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainforge.errors import UserError

ROLES = ("system", "user", "assistant")
TEXT_SUFFIXES = (".json", ".jsonl", ".tsv", ".csv")


@dataclass(frozen=True)
class TextRecord:
    """One training example: a prompt/response pair or a chat conversation."""

    where: str  # "file:line" or "file record N", for messages
    prompt: str | None = None
    response: str | None = None
    system: str | None = None
    messages: tuple[dict[str, str], ...] | None = None
    # Assistant turns before this message are context, not learned (TRL's conversational
    # prompt/completion: the completion's turns are learned, the prompt's are not).
    learn_from: int = 0
    text: str | None = None  # a plain-text record: every token is learned

    def as_messages(self) -> list[dict[str, str]]:
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        out = [{"role": "system", "content": self.system}] if self.system else []
        out.append({"role": "user", "content": self.prompt or ""})
        out.append({"role": "assistant", "content": self.response or ""})
        return out

    def texts(self) -> list[str]:
        """Every piece of text in the record (for training a tokenizer)."""
        if self.messages is not None:
            return [m["content"] for m in self.messages]
        return [t for t in (self.system, self.prompt, self.response, self.text) if t]


def validate_text_file(path: str | Path, field_name: str = "data.train_file") -> str:
    """The text of a records file, after the file-level checks; raises one line otherwise."""
    file = Path(path).expanduser()
    if file.is_dir():
        raise UserError(
            f"{field_name} = {str(path)!r} is a folder, not a file",
            "point it at a .json, .jsonl, .tsv or .csv file",
        )
    if not file.is_file():
        raise UserError(f"{field_name} = {str(path)!r}: file not found", f"check {field_name}")
    if file.suffix.lower() not in TEXT_SUFFIXES:
        raise UserError(
            f"{file}: unknown text format {file.suffix!r}", "use .json, .jsonl, .tsv or .csv"
        )
    try:
        data = file.read_bytes()
    except OSError as err:
        raise UserError(
            f"{file} cannot be read ({err.strerror})", "check its permissions"
        ) from None
    if not data.strip():
        raise UserError(f"{file} is empty", "add records, or point the field at another file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise UserError(
            f"{file}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x})",
            "save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
        ) from None


def read_records(
    path: str | Path, field: str = "data.train_file", header: bool | str = "auto"
) -> list[TextRecord]:
    """Every record of a .json, .jsonl, .tsv or .csv file; `field` names it in errors.
    `header` (`data.header`): whether the first line of a TSV or CSV file names the
    columns; auto when both its cells are column names (`HEADER_WORDS`). A skipped
    header is said in one line."""
    text = validate_text_file(path, field)  # read as utf-8-sig: a byte-order mark is dropped
    path = Path(path).expanduser()
    suffix = path.suffix.lower()
    if suffix in (".tsv", ".csv"):
        records = _read_table(path, text, suffix, header)
    else:
        records = {".jsonl": _read_jsonl, ".json": _read_json}[suffix](path, text)
    if not records:
        raise UserError(f"{path}: no records found", "add prompt/response records or lines")
    return records


# Words that name a column: a first TSV/CSV line made of two of them is a header.
HEADER_WORDS = {"prompt", "response", "completion", "source", "target", "input", "output"}
HEADER_WORDS |= {"instruction", "word", "words", "phoneme", "phonemes", "grapheme"}
HEADER_WORDS |= {"graphemes", "pronunciation", "ipa", "text", "label", "question", "answer"}
HEADER_WORDS |= {"spelling", "transcription", "translation", "english", "query"}


def is_header(cells: list[str]) -> bool:
    return len(cells) == 2 and all(c.strip().lower() in HEADER_WORDS for c in cells)


def _read_table(path: Path, text: str, suffix: str, header: bool | str) -> list[TextRecord]:
    """A TSV or CSV file, its first line skipped when it is (or is declared) a header."""
    rows = _csv_rows(path, text) if suffix == ".csv" else _tsv_rows(text)
    if rows and (header is True or (header == "auto" and is_header(rows[0][1]))):
        number, cells = rows.pop(0)
        print(
            f"{path}: line {number} ({', '.join(c.strip() for c in cells)}) is a header, not "
            f"a record (data.header: {str(header).lower()})"
        )
    return [_pair(path, number, cells, suffix) for number, cells in rows]


def _pair(path: Path, number: int, cells: list[str], suffix: str) -> TextRecord:
    if len(cells) != 2 or not cells[0].strip() or not cells[1].strip():
        if suffix == ".csv":
            raise UserError(
                f"{path}:{number}: expected 2 columns prompt,response, got {len(cells)}",
                "write one pair per row; quote a field that holds a comma",
            )
        raise UserError(
            f"{path}:{number}: expected source<TAB>target, got {len(cells)} field(s)",
            "write one pair per line separated by a single tab",
        )
    return TextRecord(f"{path}:{number}", prompt=cells[0].strip(), response=cells[1].strip())


def _tsv_rows(text: str) -> list[tuple[int, list[str]]]:
    """(line number, fields) of every line but blank ones and `#` comments; any line ending
    (LF, CRLF, CR, mixed in one file) ends a line."""
    return [
        (number, line.split("\t"))
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.startswith("#")
    ]


def _csv_rows(path: Path, text: str) -> list[tuple[int, list[str]]]:
    out = []
    reader = csv.reader(text.splitlines(keepends=True))
    try:
        for row in reader:
            if any(cell.strip() for cell in row):
                out.append((reader.line_num, row))
    except csv.Error as err:
        raise UserError(f"{path}:{reader.line_num}: malformed CSV ({err})") from None
    return out


def _read_jsonl(path: Path, text: str) -> list[TextRecord]:
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(
                f"{path}:{number}: invalid JSON: {err.msg}", "one JSON object per line"
            ) from None
        out.append(_record(item, f"{path}:{number}"))
    return out


def _read_json(path: Path, text: str) -> list[TextRecord]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(
            f"{path}: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}",
            "fix the syntax",
        ) from None
    if isinstance(data, dict) and isinstance(data.get("records"), list):
        data = data["records"]
    if not isinstance(data, list):
        raise UserError(
            f"{path}: expected a list of records, got {type(data).__name__}",
            'write [{"prompt": ..., "response": ...}, ...] or {"records": [...]}',
        )
    return [_record(item, f"{path} record {i + 1}") for i, item in enumerate(data)]


def _record(item: Any, where: str) -> TextRecord:
    if not isinstance(item, dict):
        raise UserError(f"{where}: a record must be an object, got {type(item).__name__}")
    if "messages" in item:
        return TextRecord(where, messages=_messages(item["messages"], where))
    if isinstance(item.get("prompt"), list) and isinstance(item.get("completion"), list):
        return _conversation(item, where)
    if "text" in item and "prompt" not in item:
        return TextRecord(where, text=_text(item, "text", where))
    if "instruction" in item and "output" in item:
        prompt = _text(item, "instruction", where)
        extra = item.get("input")
        if extra:
            prompt = f"{prompt}\n\n{_text(item, 'input', where)}"
        return TextRecord(where, prompt=prompt, response=_text(item, "output", where))
    response_key = "response" if "response" in item else "completion"
    if "prompt" not in item or response_key not in item:
        raise UserError(
            f"{where}: record has keys {sorted(item)}, not prompt/response or messages",
            'write {"prompt": ..., "response": ...} or {"messages": [...]}',
        )
    system = _text(item, "system", where) if item.get("system") else None
    return TextRecord(
        where,
        prompt=_text(item, "prompt", where),
        response=_text(item, response_key, where),
        system=system,
    )


def _text(item: dict, key: str, where: str) -> str:
    value = item[key]
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: {key} must be non-empty text, got {value!r:.40}")
    return value


def _conversation(item: dict, where: str) -> TextRecord:
    """TRL's conversational prompt/completion: two message lists, the completion learned."""
    prompt = _messages(item["prompt"], f"{where} prompt", need_answer=False)
    completion = _messages(item["completion"], f"{where} completion")
    return TextRecord(where, messages=prompt + completion, learn_from=len(prompt))


def _messages(value: Any, where: str, need_answer: bool = True) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise UserError(f"{where}: messages must be a non-empty list", "add role/content turns")
    out = []
    for i, message in enumerate(value):
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if role not in ROLES or not isinstance(content, str):
            raise UserError(
                f"{where}: messages[{i}] must be {{role, content}} with role in {list(ROLES)}",
                'write {"role": "user", "content": "..."}',
            )
        out.append({"role": role, "content": content})
    if need_answer and not any(m["role"] == "assistant" for m in out):
        raise UserError(f"{where}: messages have no assistant turn", "add the answer to learn")
    return tuple(out)
