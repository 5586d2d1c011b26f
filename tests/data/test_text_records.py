"""Text records from TSV and CSV files as users write them: a header line (detected, or as
`data.header` declares), a UTF-8 byte-order mark, and mixed line endings."""

from __future__ import annotations

import pytest

from trainforge.data.text.records import read_records


def _pairs(records) -> list[tuple[str, str]]:
    return [(r.prompt, r.response) for r in records]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("w.csv", "word,phonemes\ncat,K AE1 T\ndog,D AO1 G\n"),
        ("w.tsv", "Word\tPhonemes\ncat\tK AE1 T\ndog\tD AO1 G\n"),
        ("w.csv", "\ufeffword,phonemes\r\ncat,K AE1 T\rdog,D AO1 G\n"),  # BOM, CRLF, CR, LF
        ("w.tsv", "\ufeffword\tphonemes\r\ncat\tK AE1 T\r\n\rdog\tD AO1 G"),
    ],
)
def test_a_header_line_is_detected_and_said(tmp_path, capsys, name, text):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    records = read_records(path)
    assert _pairs(records) == [("cat", "K AE1 T"), ("dog", "D AO1 G")]
    out = capsys.readouterr().out
    assert f"{path}: line 1 (" in out and ") is a header, not a record (data.header: auto)" in out
    assert records[0].where == f"{path}:2"


def test_data_header_declares_what_auto_cannot_know(tmp_path, capsys):
    path = tmp_path / "w.tsv"
    path.write_text("cat\tK AE1 T\ndog\tD AO1 G\n", encoding="utf-8")
    assert len(read_records(path)) == 2  # auto: no column names, no header
    assert "header" not in capsys.readouterr().out
    assert _pairs(read_records(path, header=True)) == [("dog", "D AO1 G")]
    assert "line 1 (cat, K AE1 T) is a header, not a record (data.header: true)" in (
        capsys.readouterr().out
    )
    named = tmp_path / "n.csv"
    named.write_text("word,phonemes\ncat,K AE1 T\n", encoding="utf-8")
    assert _pairs(read_records(named, header=False))[0] == ("word", "phonemes")


def test_a_byte_order_mark_never_reaches_the_first_prompt(tmp_path):
    jsonl = '{"prompt": "cat", "response": "K"}\n'
    for name, text in (("b.tsv", "cat\tK AE1 T\n"), ("b.jsonl", jsonl)):
        path = tmp_path / name
        path.write_bytes(text.encode("utf-8-sig"))
        assert read_records(path)[0].prompt == "cat"
