"""The base model of a causal-LM run, and the tie between a model created on first use and
the corpus its tokenizer was trained on.

With `model.init_arch`, a missing `model.model_name_or_path` is created from
`data.options.train_file` (`trainforge models init`'s code), and its trainforge.json records each
corpus file's path, SHA-256 and size. A model's tokenizer fits only text like its corpus:
a base model made from a two-line smoke-test file must never become the real run's. So a
later run whose corpus differs (another hash) never reuses it: it uses a base model of its
own, named with its corpus (`NAME-<corpus stem>-<hash prefix>`), created on first use as
well, and says so in one line. A model that records no corpus (downloaded, or made by an
older version) is used as it is. A Hugging Face id (`org/name[@rev]`, `trainforge.models.hub`)
is its snapshot in the cache, never a folder to create: `model.init_arch` is for local paths.

The name as written belongs to the config's own corpus (`model.init_corpus`, planned from the
config file's train file): a smoke test run first with `--data_file test_mini.tsv` makes
`NAME-test_mini-<hash>`, never NAME, so the real run that follows makes NAME from the real
corpus.

Library considered: `huggingface_hub`'s cache keys folders by repository and revision,
not by the data a tokenizer was trained on; nothing there ties a model to a corpus.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from trainforge.errors import UserError
from trainforge.models import hf
from trainforge.models.hub import is_hub_id, resolve_hub_model

HASH_PREFIX = 8  # characters of the corpus hash in a derived model name


def made_from(folder: Path) -> list[dict[str, Any]] | None:
    """The corpus files a model was made from (trainforge.json), or None when it records
    none. An older record lists paths only: those compare by path."""
    try:
        summary = json.loads((folder / hf.SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or summary.get("created_by") != "trainforge models init":
        return None
    if isinstance(summary.get("corpus_files"), list):
        return summary["corpus_files"]
    return [{"path": p} for p in summary.get("corpus") or []] or None


def same_corpus(recorded: list[dict[str, Any]], fact: dict[str, Any]) -> bool:
    if len(recorded) != 1:
        return False
    one = recorded[0]
    if "sha256" in one:
        return one["sha256"] == fact["sha256"] and one.get("size_bytes") == fact["size_bytes"]
    return Path(one.get("path", "")) == Path(fact["path"])


def corpus_model_path(path: Path, fact: dict[str, Any]) -> Path:
    """The base model of its own for a corpus: NAME-<corpus stem>-<hash prefix>."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(fact["path"]).stem).strip("._-") or "corpus"
    return path.with_name(f"{path.name}-{stem}-{fact['sha256'][:HASH_PREFIX]}")


def check_base_model_named(config: Any) -> None:
    """What `resolve_base_model` would refuse without reading a file or importing torch: no
    base model named, or a local folder that is missing or has no config.json. A folder that
    `model.init_arch` creates on first use, a Hugging Face id (resolved in the cache) and
    another run's weights (`model.init_from`) are left to it."""
    m = config.model
    if m.init_from:
        return
    if not m.model_name_or_path:
        raise _no_base_model()
    if is_hub_id(m.model_name_or_path, config.output.models_dir):
        return
    path = hf.resolve_model_dir(m.model_name_or_path, config.output.models_dir)
    if m.init_arch:
        # Created on first use, into a folder that is missing or empty; a folder with files
        # but no model would be refused only after the corpus was read and a tokenizer
        # trained.
        if path.is_dir() and not (path / "config.json").is_file() and any(path.iterdir()):
            raise UserError(
                f"base model folder {path} holds files but no model (no config.json), and "
                f"model.init_arch would create a random {m.init_arch} there",
                "pick a model folder (--base-model), or empty or remove that folder",
            )
        return
    from trainforge.models.folder_check import check_folder_shape

    check_folder_shape(path)


def _no_base_model() -> UserError:
    return UserError(
        "model.model_name_or_path is not set: causal-lm needs a base model",
        "pick a base model (--base-model models/NAME, or model.model_name_or_path); "
        "`trainforge models init NAME --corpus FILE` makes a small one",
    )


def resolve_base_model(config: Any, create: bool = True) -> Path:
    """The base model folder; with `model.init_arch`, the one made from this run's corpus,
    created on first use (`create=False`: one line saying it is missing instead)."""
    m = config.model
    base = hf.init_from_folders(m.init_from, config.lora.enabled)[0] if m.init_from else None
    if base is not None:  # another run's output model is a base model
        print(f"init_from {m.init_from}: base model {base}")
        return hf.check_model_dir(base)
    if not m.model_name_or_path:
        raise _no_base_model()
    if is_hub_id(m.model_name_or_path, config.output.models_dir):  # never made at random
        found = resolve_hub_model(m.model_name_or_path)
        print(f"base model {found.repo_id}@{found.revision}: commit {found.commit} ({found.path})")
        return hf.check_model_dir(found.path)
    path = hf.resolve_model_dir(m.model_name_or_path, config.output.models_dir)
    if not m.init_arch or not config.data.options.train_file:
        return hf.check_model_dir(path)
    corpus = Path(config.data.options.train_file)
    if not corpus.is_file():
        return hf.check_model_dir(path)  # the data check names the missing file
    from trainforge.models.hf_init import corpus_fact

    fact = corpus_fact(corpus)
    if not (path / "config.json").is_file():
        own = corpus_model_path(path, fact)
        if (own / "config.json").is_file():  # made earlier for this corpus
            return hf.check_model_dir(own)
        if m.init_corpus and not _same_corpus_file(Path(m.init_corpus), corpus, fact):
            print(
                f"base model {path} is kept for the config's corpus {m.init_corpus}; this "
                f"run's corpus {corpus} is another, so it uses {own}"
            )
            path = own
    else:
        recorded = made_from(path)
        if recorded is None or same_corpus(recorded, fact):
            return hf.check_model_dir(path)
        own = corpus_model_path(path, fact)
        print(
            f"base model {path} was made from {recorded[0]['path']}; this run's corpus "
            f"{corpus} is another, so it uses {own}"
        )
        path = own
        if (path / "config.json").is_file():
            return hf.check_model_dir(path)
    if not create:
        raise UserError(
            f"base model {path} (made from {corpus} when the run started) is missing",
            "score the run where its models/ folder is, or copy that folder here",
        )
    _create(path, m, corpus, fact, config.training.seed)
    return hf.check_model_dir(path)


def _same_corpus_file(declared: Path, corpus: Path, fact: dict[str, Any]) -> bool:
    """Whether the run's corpus is the one the config declares (model.init_corpus): the same
    file, or one with the same bytes."""
    if not declared.is_file():
        return declared == corpus
    if declared.resolve() == corpus.resolve():
        return True
    from trainforge.models.hf_init import corpus_fact

    other = corpus_fact(declared)
    return (other["sha256"], other["size_bytes"]) == (fact["sha256"], fact["size_bytes"])


def _create(path: Path, m: Any, corpus: Path, fact: dict[str, Any], seed: int) -> None:
    from trainforge.models.hf_init import init_model

    print(f"creating base model {path}: random {m.init_arch} {m.init_size}, tokenizer "
          f"trained on {corpus}")  # fmt: skip
    init_model(
        path.name,
        arch=m.init_arch,
        size=m.init_size,
        corpus=[corpus],
        seed=seed,
        dest=path,
        corpus_files=[fact],
    )
