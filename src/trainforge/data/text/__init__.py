"""Text datasets for causal language models: records from JSON/JSONL/TSV/CSV files,
tokenized with the loss on completion tokens only, truncation counted, optional packing,
resumable loaders.

`build_text_data(cfg.data, tokenizer, ...)` is the entry point.
"""

from trainforge.data.text.build import TextData, TokenDataset, build_text_data, pad_token_id
from trainforge.data.text.encode import IGNORE, Encoder, EncodeStats, Example, pack
from trainforge.data.text.records import TextRecord, read_records

__all__ = [
    "IGNORE",
    "EncodeStats",
    "Encoder",
    "Example",
    "TextData",
    "TextRecord",
    "TokenDataset",
    "build_text_data",
    "pack",
    "pad_token_id",
    "read_records",
]
