"""A corpus of broken inputs behind a valid config: each is answered by `trainforge train`
before training, in one stderr line naming the file (and line or record), exit 2, no
traceback, and nothing written (no run folder, no checkpoint, no models/<name>).

Every case runs the real entry point in this process (fast: one import of torch and
transformers for the whole corpus); the same corpus runs in a subprocess per case under the
`slow` marker, and a few representative cases run in a subprocess in every `make test`.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fakes.in_process import run_in_process
from fakes.tiny_lm import RECORDS

RUN_NAME = "broken"
OUTPUT_MODEL = "should-not-exist"


@dataclass
class Case:
    name: str
    build: Callable[[Path, Path], list[str]]  # (tmp folder, good base model) -> --set values
    expect: str  # regex the one stderr line must match; {tmp} is the case's folder
    kind: str = "image"  # image, text or cifar: which base config


# ----------------------------------------------------------------- image folders
def png(path: Path, value: int = 0, size: tuple[int, int] = (12, 12), mode: str = "RGB") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.full((size[1], size[0], 3), value, dtype=np.uint8)
    Image.fromarray(pixels).convert(mode).save(path)
    return path


def good_images(root: Path, classes=("cat", "dog"), per_class: int = 4) -> Path:
    for label, name in enumerate(classes):
        for index in range(per_class):
            png(root / name / f"{index}.png", 60 * label + index)
    return root


def image_sets(root: Path, **extra: str) -> list[str]:
    return [f"data.root={root}", *(f"{k}={v}" for k, v in extra.items())]


def _corrupt_image(tmp: Path, _model: Path) -> list[str]:
    root = good_images(tmp / "imgs")
    (root / "dog" / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    (root / "cat" / "worse.jpg").write_bytes(b"\xff\xd8\xff garbage")
    return image_sets(root)


def _truncated_png(tmp: Path, _model: Path) -> list[str]:
    root = good_images(tmp / "imgs")
    big = png(root / "dog" / "big.png", 7, size=(64, 64))
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), np.uint8)).save(big)
    data = big.read_bytes()
    big.write_bytes(data[: len(data) // 2])
    return image_sets(root)


def _one_class(tmp: Path, _model: Path) -> list[str]:
    return image_sets(good_images(tmp / "imgs", classes=("cat",)))


def _hidden_second_class(tmp: Path, _model: Path) -> list[str]:
    root = good_images(tmp / "imgs", classes=("cat",))
    png(root / ".ipynb_checkpoints" / "x.png")  # hidden: not a class
    return image_sets(root)


def _empty_class(tmp: Path, _model: Path) -> list[str]:
    root = good_images(tmp / "imgs")
    (root / "owl").mkdir()
    (root / "owl" / "notes.txt").write_text("no images, only notes")
    (root / "owl" / "._0.png").write_bytes(b"macOS resource fork")  # hidden: ignored
    return image_sets(root)


def _no_class_folders(tmp: Path, _model: Path) -> list[str]:
    root = tmp / "imgs"
    png(root / "loose.png")
    return image_sets(root)


def _root_missing(tmp: Path, _model: Path) -> list[str]:
    return image_sets(tmp / "nowhere")


def _root_is_file(tmp: Path, _model: Path) -> list[str]:
    return image_sets(png(tmp / "one.png"))


def _val_unknown_class(tmp: Path, _model: Path) -> list[str]:
    root = tmp / "imgs"
    good_images(root / "train")
    good_images(root / "val", classes=("cat", "fox"), per_class=1)
    return image_sets(root)


def _val_empty_class(tmp: Path, _model: Path) -> list[str]:
    root = tmp / "imgs"
    good_images(root / "train")
    good_images(root / "val", classes=("cat",), per_class=1)
    (root / "val" / "dog").mkdir()
    return image_sets(root)


def _all_bad_skipped(tmp: Path, _model: Path) -> list[str]:
    root = tmp / "imgs"
    for name in ("cat", "dog"):
        (root / name).mkdir(parents=True)
        (root / name / "x.png").write_bytes(b"broken")
    return image_sets(root, **{"data.skip_bad_images": "true"})


# ------------------------------------------------------------------- text data
def text_file(tmp: Path, name: str, content: str | bytes) -> Path:
    path = tmp / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


GOOD_LINES = [json.dumps(record) for record in RECORDS[:20]]


def text_case(name: str, content: str | bytes, field: str = "data.options.train_file"):
    def build(tmp: Path, _model: Path) -> list[str]:
        sets = [f"{field}={text_file(tmp, name, content)}"]
        if field != "data.options.train_file":
            sets.append(
                f"data.options.train_file={text_file(tmp, 'good.jsonl', chr(10).join(GOOD_LINES))}"
            )
        return sets

    return build


def _train_file_is_folder(tmp: Path, _model: Path) -> list[str]:
    (tmp / "records.jsonl").mkdir()
    return [f"data.options.train_file={tmp / 'records.jsonl'}"]


def _train_file_missing(tmp: Path, _model: Path) -> list[str]:
    return [f"data.options.train_file={tmp / 'absent.jsonl'}"]


# --------------------------------------------------------------------- base models
def broken_model(change: Callable[[Path], None]):
    def build(tmp: Path, model: Path) -> list[str]:
        copy = tmp / "models" / "base"
        shutil.copytree(model, copy)
        change(copy)
        return [f"model.model_name_or_path={copy}"]

    return build


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _set_model_type(folder: Path, model_type: str) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = model_type
    (folder / "config.json").write_text(json.dumps(config))


def _config_is_folder(folder: Path) -> None:
    (folder / "config.json").unlink()
    (folder / "config.json").mkdir()


def _model_path_is_file(tmp: Path, _model: Path) -> list[str]:
    return [f"model.model_name_or_path={text_file(tmp, 'model.bin', b'x')}"]


def _model_missing(tmp: Path, _model: Path) -> list[str]:
    return [f"model.model_name_or_path={tmp / 'models' / 'absent'}"]


# ---------------------------------------------------------------------- CIFAR-10
def cifar_archive(root: Path) -> Path:
    """A cifar-10-python.tar.gz with the real member names (contents need not unpickle)."""
    root.mkdir(parents=True, exist_ok=True)
    archive = root / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        names = [f"data_batch_{n}" for n in range(1, 6)] + ["test_batch", "batches.meta"]
        for name in names:
            blob = np.random.default_rng(len(name)).integers(0, 255, 40_000, np.uint8).tobytes()
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return archive


def _cifar_truncated(tmp: Path, _model: Path) -> list[str]:
    _truncate(cifar_archive(tmp / "cifar"))
    return [f"data.root={tmp / 'cifar'}"]


def _cifar_garbage(tmp: Path, _model: Path) -> list[str]:
    (tmp / "cifar").mkdir()
    (tmp / "cifar" / "cifar-10-python.tar.gz").write_bytes(gzip.compress(b"not a tar") * 3)
    return [f"data.root={tmp / 'cifar'}"]


def _cifar_partial_folder(tmp: Path, _model: Path) -> list[str]:
    folder = tmp / "cifar" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in ("data_batch_1", "data_batch_2", "batches.meta"):
        (folder / name).write_bytes(b"x" * 100)
    return [f"data.root={tmp / 'cifar'}"]


def _cifar_corrupt_batch(tmp: Path, _model: Path) -> list[str]:
    folder = tmp / "cifar" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [f"data_batch_{n}" for n in range(1, 6)] + ["test_batch", "batches.meta"]:
        (folder / name).write_bytes(b"not a pickle")
    return [f"data.root={tmp / 'cifar'}"]


BAD_UTF8 = "\n".join(GOOD_LINES[:3]).encode() + b'\n{"prompt": "caf\xe9", "response": "x"}\n'
CORPUS = [
    # image folders
    Case("image-corrupt", _corrupt_image,
         r"image file {tmp}/imgs/cat/worse\.jpg could not be read .*; 2 of 10 checked images are "
         r"unreadable\. .*data\.skip_bad_images=true"),
    Case("image-truncated", _truncated_png,
         r"image file {tmp}/imgs/dog/big\.png could not be read .*1 of 9 checked"),
    Case("image-one-class", _one_class, r"{tmp}/imgs has 1 class folder\(s\) \['cat'\]: .*two"),
    Case("image-hidden-not-a-class", _hidden_second_class, r"{tmp}/imgs has 1 class folder"),
    Case("image-empty-class", _empty_class, r"class folder {tmp}/imgs/owl has no images"),
    Case("image-no-class-folders", _no_class_folders, r"{tmp}/imgs has 0 class folder\(s\)"),
    Case("image-root-missing", _root_missing, r"data\.root {tmp}/nowhere does not exist"),
    Case("image-root-is-file", _root_is_file, r"data\.root {tmp}/one\.png is a file, not a folder"),
    Case("image-val-unknown-class", _val_unknown_class,
         r"{tmp}/imgs/val has class folder\(s\) \['fox'\] that the train folder does not have"),
    Case("image-val-empty-class", _val_empty_class,
         r"class folder {tmp}/imgs/val/dog has no images"),
    Case("image-all-unreadable-skipped", _all_bad_skipped,
         r"every image in {tmp}/imgs is unreadable \(first {tmp}/imgs/cat/x\.png\)"),
    # text data
    Case("jsonl-malformed", text_case("t.jsonl", "\n".join([*GOOD_LINES[:2], '{"prompt": "a",'])),
         r"{tmp}/t\.jsonl:3: invalid JSON", "text"),
    Case("json-malformed",
         text_case("t.json", '[\n  {"prompt": "a", "response": "b"},\n  {oops}\n]'),
         r"{tmp}/t\.json: invalid JSON at line 3 column 4", "text"),
    Case("jsonl-missing-field",
         text_case("t.jsonl", "\n".join([*GOOD_LINES[:4], '{"prompt": "no answer"}'])),
         r"{tmp}/t\.jsonl:5: record has keys \['prompt'\], not prompt/response", "text"),
    Case("json-missing-field",
         text_case("t.json", json.dumps([*RECORDS[:2], {"prompt": "a", "reply": "b"}])),
         r"{tmp}/t\.json record 3: record has keys \['prompt', 'reply'\]", "text"),
    Case("json-empty-response",
         text_case("t.json", json.dumps([*RECORDS[:2], {"prompt": "a", "response": " "}])),
         r"{tmp}/t\.json record 3: response must be non-empty text", "text"),
    Case("json-not-a-list", text_case("t.json", '{"prompt": "a", "response": "b"}'),
         r"{tmp}/t\.json: expected a list of records, got dict", "text"),
    Case("chat-no-assistant",
         text_case("t.jsonl", json.dumps({"messages": [{"role": "user", "content": "hi"}]})),
         r"{tmp}/t\.jsonl:1: messages have no assistant turn", "text"),
    Case("tsv-wrong-columns", text_case("t.tsv", "hello\tHH AH L OW\nworld\tW ER\tL D\n"),
         r"{tmp}/t\.tsv:2: expected source<TAB>target, got 3 field\(s\)", "text"),
    Case("tsv-one-column", text_case("t.tsv", "# G2P pairs\nhello\tHH AH L OW\nworld\n"),
         r"{tmp}/t\.tsv:3: expected source<TAB>target, got 1 field\(s\)", "text"),
    Case("csv-wrong-columns", text_case("t.csv", 'prompt,response\n"a, b",c\nd,e,f\n'),
         r"{tmp}/t\.csv:3: expected 2 columns prompt,response, got 3", "text"),
    Case("not-utf8", text_case("t.jsonl", BAD_UTF8), r"{tmp}/t\.jsonl:4: not UTF-8 text", "text"),
    # a byte-order mark, a header line and mixed line endings are read; the line numbers of
    # a later bad row stay those of the file
    Case("csv-bom-header-then-bad-row",
         text_case("t.csv", "\ufeffword,phonemes\r\ncat,K AE T\rdog\n"),
         r"{tmp}/t\.csv:3: expected 2 columns prompt,response, got 1", "text"),
    Case("tsv-bom-header-then-bad-line",
         text_case("t.tsv", "\ufeffword\tphonemes\nhello\tHH AH L OW\r\nworld\n"),
         r"{tmp}/t\.tsv:3: expected source<TAB>target, got 1 field\(s\)", "text"),
    Case("empty-file", text_case("t.jsonl", "\n  \n"), r"{tmp}/t\.jsonl is empty", "text"),
    Case("train-file-is-folder", _train_file_is_folder,
         r"data\.options\.train_file = '{tmp}/records\.jsonl' is a folder, not a file", "text"),
    Case("train-file-missing", _train_file_missing,
         r"data\.options\.train_file = '{tmp}/absent\.jsonl': file not found", "text"),
    Case("validation-file-malformed",
         text_case("v.jsonl", '{"prompt": "a", "response": "b"}\n[1, 2',
                   "data.options.validation_file"),
         r"{tmp}/v\.jsonl:2: invalid JSON", "text"),
    Case("test-file-empty", text_case("t.csv", "", "data.options.test_file"),
         r"{tmp}/t\.csv is empty", "text"),
    # base models
    Case("model-missing", _model_missing, r"'{tmp}/models/absent': not a Hugging Face model folder "
         r"\(no such folder\)", "text"),
    Case("model-path-is-file", _model_path_is_file, r"'{tmp}/model\.bin' is a file, not a model",
         "text"),
    Case("model-no-config", broken_model(lambda m: (m / "config.json").unlink()),
         r"'{tmp}/models/base': not a Hugging Face model folder \(no config\.json in it\)", "text"),
    Case("model-config-not-json",
         broken_model(lambda m: (m / "config.json").write_text('{\n  "model_type": gpt2\n}')),
         r"model config {tmp}/models/base/config\.json:2: invalid JSON", "text"),
    Case("model-config-unreadable", broken_model(_config_is_folder),
         r"model config {tmp}/models/base/config\.json is a folder, not a file", "text"),
    Case("model-unknown-architecture", broken_model(lambda m: _set_model_type(m, "gpt9000")),
         r"{tmp}/models/base/config\.json: model_type 'gpt9000' is an architecture this "
         r"transformers version does not know", "text"),
    Case("model-not-causal", broken_model(lambda m: _set_model_type(m, "vit")),
         r"model_type 'vit' is not a causal language model", "text"),
    Case("model-weights-missing", broken_model(lambda m: (m / "model.safetensors").unlink()),
         r"no model weights in {tmp}/models/base", "text"),
    Case("model-weights-truncated", broken_model(lambda m: _truncate(m / "model.safetensors")),
         r"weight file {tmp}/models/base/model\.safetensors is truncated or corrupt \(\d+ bytes",
         "text"),
    Case("model-weights-garbage",
         broken_model(lambda m: (m / "model.safetensors").write_bytes(b"\x00" * 64)),
         r"weight file {tmp}/models/base/model\.safetensors is truncated or corrupt", "text"),
    Case("tokenizer-missing",
         broken_model(lambda m: (m / "tokenizer.json").unlink()),
         r"no tokenizer in {tmp}/models/base", "text"),
    Case("tokenizer-corrupt",
         broken_model(lambda m: (m / "tokenizer.json").write_text('{"version": "1.0", "model":')),
         r"tokenizer file {tmp}/models/base/tokenizer\.json:1: invalid JSON", "text"),
    Case("tokenizer-does-not-load",
         broken_model(lambda m: (m / "tokenizer.json").write_text('{"model": {"type": "Nope"}}')),
         r"cannot load the tokenizer in {tmp}/models/base", "text"),
    # CIFAR-10
    Case("cifar-truncated-archive", _cifar_truncated,
         r"CIFAR-10 archive {tmp}/cifar/cifar-10-python\.tar\.gz is corrupted or unreadable",
         "cifar"),
    Case("cifar-garbage-archive", _cifar_garbage,
         r"CIFAR-10 archive {tmp}/cifar/cifar-10-python\.tar\.gz is corrupted or unreadable",
         "cifar"),
    Case("cifar-partial-folder", _cifar_partial_folder,
         r"CIFAR-10 not found in {tmp}/cifar \({tmp}/cifar/cifar-10-batches-py/data_batch_3 is "
         r"missing, data\.download is false\)", "cifar"),
    Case("cifar-corrupt-batches", _cifar_corrupt_batch,
         r"CIFAR-10 files in {tmp}/cifar/cifar-10-batches-py are corrupted", "cifar"),
]  # fmt: skip
# Run in a subprocess in every `make test`: one per input kind.
SUBPROCESS_SMOKE = {"image-corrupt", "model-weights-truncated"}

BASE = {
    "image": [
        "data.dataset=image-folder", "model.patch_size=4", "model.embedding_dim=32",
        "model.num_layers=1", "model.num_heads=2", "model.mlp_size=32",
    ],
    "cifar": ["data.dataset=cifar10", "data.download=false", "model.embedding_dim=32",
              "model.num_layers=1", "model.num_heads=2", "model.mlp_size=32"],
    "text": [
        "task.kind=causal-lm", "model.arch=hf", "data.dataset=text",
        "data.options.max_seq_length=64",
        f"output.model_name={OUTPUT_MODEL}",
    ],
}  # fmt: skip


def case_args(case: Case, tmp: Path, model: Path) -> list[str]:
    sets = [*BASE[case.kind], f"output.dir={tmp / 'runs'}", f"output.run_name={RUN_NAME}",
            f"output.models_dir={tmp / 'models'}", "training.max_steps=2",
            "logging.progress_bar=false"]  # fmt: skip
    if case.kind == "text":
        sets += [
            f"model.model_name_or_path={model}",
            f"data.options.train_file={tmp / 'default.jsonl'}",
        ]
        text_file(tmp, "default.jsonl", "\n".join(GOOD_LINES))
    sets += case.build(tmp, model)  # later --set values win
    config = tmp / "run.yaml"
    config.write_text("name: broken-input\n")
    return ["train", str(config), "--profile", "cpu", *[a for s in sets for a in ("--set", s)]]


def check_answer(case: Case, tmp: Path, code: int, err: str, out: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"exit {code}\nstdout:\n{out}\nstderr:\n{err}"
    assert len(lines) == 1, err
    assert "Traceback" not in err + out
    pattern = case.expect.replace("{tmp}", re.escape(str(tmp)))
    assert re.search(pattern, lines[0]), f"{lines[0]!r} does not match {pattern!r}"
    assert not (tmp / "runs").exists(), "a run folder was written"
    assert not (tmp / "models" / OUTPUT_MODEL).exists(), "an output model was written"


@pytest.fixture
def case_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "case"
    folder.mkdir()
    return folder


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_broken_input_in_process(case, case_dir, tiny_gpt2, monkeypatch, capsys):
    args = case_args(case, case_dir, tiny_gpt2)
    monkeypatch.chdir(case_dir)
    code, out, err = run_in_process(monkeypatch, capsys, *args)
    check_answer(case, case_dir, code, err, out)


def _subprocess(case: Case, case_dir: Path, model: Path) -> None:
    args = case_args(case, case_dir, model)
    done = subprocess.run(
        [sys.executable, "-m", "trainforge", *args], cwd=case_dir, capture_output=True,
        text=True, timeout=600, env={**__import__("os").environ, "COLUMNS": "200"},
    )  # fmt: skip
    check_answer(case, case_dir, done.returncode, done.stderr, done.stdout)


@pytest.mark.parametrize(
    "case", [c for c in CORPUS if c.name in SUBPROCESS_SMOKE], ids=sorted(SUBPROCESS_SMOKE)
)
def test_broken_input_subprocess_smoke(case, case_dir, tiny_gpt2):
    _subprocess(case, case_dir, tiny_gpt2)


@pytest.mark.slow
@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_broken_input_subprocess(case, case_dir, tiny_gpt2):
    _subprocess(case, case_dir, tiny_gpt2)


def test_corpus_covers_every_input_kind():
    kinds = {case.kind for case in CORPUS}
    assert kinds == {"image", "text", "cifar"} and len(CORPUS) >= 30
