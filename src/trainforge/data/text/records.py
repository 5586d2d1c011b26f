"""Text records from files: JSON, JSONL, TSV and CSV, checked record by record.

Owns `TextRecord` and `read_records`. Accepted shapes (per record, so one file may mix them):
    {"prompt": ..., "response": ...}            also "completion" for "response", and the
                                                Alpaca form "instruction" [+ "input"] + "output"
    {"messages": [{"role": ..., "content": ...}, ...]}   chat; needs an assistant turn
    {"system": ...} may accompany a prompt/response record.
A JSON file holds a list of records (or {"records": [...]}); a JSONL file one record per
line; a TSV file `source<TAB>target` per line (the DGX Spark G2P plan), blank lines and
lines starting with `#` skipped; a CSV file two columns `prompt,response` per row (quoted as
the `csv` module reads RFC 4180), a first row naming the columns (e.g. `prompt,response`,
`source,target`) skipped. The file-level checks (a file, not empty, UTF-8) are
`trainforge.data.validate`'s. Every problem names the file, the line or record, and the fix.

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


@dataclass(frozen=True)
class TextRecord:
    """One training example: a prompt/response pair or a chat conversation."""

    where: str  # "file:line" or "file record N", for messages
    prompt: str | None = None
    response: str | None = None
    system: str | None = None
    messages: tuple[dict[str, str], ...] | None = None

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
        return [t for t in (self.system, self.prompt, self.response) if t]


def read_records(path: str | Path, field: str = "data.train_file") -> list[TextRecord]:
    """Every record of a .json, .jsonl, .tsv or .csv file; `field` names it in errors."""
    from trainforge.data.validate import validate_text_file

    text = validate_text_file(path, field)
    path = Path(path).expanduser()
    readers = {".tsv": _read_tsv, ".csv": _read_csv, ".jsonl": _read_jsonl, ".json": _read_json}
    records = readers[path.suffix.lower()](path, text)
    if not records:
        raise UserError(f"{path}: no records found", "add prompt/response records or lines")
    return records


# A first CSV row that names the columns instead of holding a record.
CSV_HEADERS = {("prompt", "response"), ("prompt", "completion"), ("source", "target")}
CSV_HEADERS |= {("input", "output"), ("instruction", "output")}


def _read_csv(path: Path, text: str) -> list[TextRecord]:
    out = []
    reader = csv.reader(text.splitlines(keepends=True))
    try:
        for row in reader:
            number = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if not out and tuple(c.strip().lower() for c in row) in CSV_HEADERS:
                continue
            if len(row) != 2 or not row[0].strip() or not row[1].strip():
                raise UserError(
                    f"{path}:{number}: expected 2 columns prompt,response, got {len(row)}",
                    "write one pair per row; quote a field that holds a comma",
                )
            out.append(
                TextRecord(f"{path}:{number}", prompt=row[0].strip(), response=row[1].strip())
            )
    except csv.Error as err:
        raise UserError(f"{path}:{reader.line_num}: malformed CSV ({err})") from None
    return out


def _read_tsv(path: Path, text: str) -> list[TextRecord]:
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise UserError(
                f"{path}:{number}: expected source<TAB>target, got {len(parts)} field(s)",
                "write one pair per line separated by a single tab",
            )
        out.append(
            TextRecord(f"{path}:{number}", prompt=parts[0].strip(), response=parts[1].strip())
        )
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


def _messages(value: Any, where: str) -> tuple[dict[str, str], ...]:
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
    if not any(m["role"] == "assistant" for m in out):
        raise UserError(f"{where}: messages have no assistant turn", "add the answer to learn")
    return tuple(out)
