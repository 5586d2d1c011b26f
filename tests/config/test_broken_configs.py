"""A corpus of broken configs: each gives one clear line, exit 2, in under 1 s, no data read.

Every case runs the real entry point (`cli.main`) in this process. `validate` checks the
message; `train` checks that nothing is written (no run folder). That neither loads torch or
a data library is a property of a fresh process, so one child runs every case in turn and
reports what each had imported.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fakes.in_process import REPO, run_main

# (case name, file name, file text, text the one-line error must contain)
CORPUS = [
    (
        "misspelt-top",
        "a.yaml",
        "trainig:\n  seed: 1\n",
        "trainig: unknown key; did you mean training?",
    ),
    (
        "misspelt-lr",
        "a.yaml",
        "optimizer:\n  lerning_rate: 0.1\n",
        "did you mean optimizer.learning_rate",
    ),
    (
        "lr-in-wrong-section",
        "a.yaml",
        "training:\n  learning_rate: 0.1\n",
        "did you mean optimizer.learning_rate",
    ),
    (
        "batch-size-alias",
        "a.yaml",
        "training:\n  batch_size: 8\n",
        "training.batch_size: unknown key",
    ),
    ("unknown-section", "a.yaml", "wandb:\n  project: x\n", "wandb: unknown key"),
    ("misspelt-heads", "a.yaml", "model:\n  num_head: 4\n", "did you mean model.num_heads"),
    (
        "batch-not-int",
        "a.yaml",
        "training:\n  per_device_train_batch_size: big\n",
        "training.per_device_train_batch_size = 'big'",
    ),
    (
        "batch-zero",
        "a.yaml",
        "training:\n  per_device_train_batch_size: 0\n",
        "greater than or equal to 1",
    ),
    (
        "batch-negative",
        "a.yaml",
        "training:\n  per_device_train_batch_size: -4\n",
        "per_device_train_batch_size = -4",
    ),
    (
        "accum-zero",
        "a.yaml",
        "training:\n  gradient_accumulation_steps: 0\n",
        "gradient_accumulation_steps = 0",
    ),
    (
        "lr-negative",
        "a.yaml",
        "optimizer:\n  learning_rate: -0.001\n",
        "optimizer.learning_rate = -0.001",
    ),
    (
        "lr-string",
        "a.yaml",
        "optimizer:\n  learning_rate: fast\n",
        "optimizer.learning_rate = 'fast'",
    ),
    ("beta-one", "a.yaml", "optimizer:\n  adam_beta1: 1.0\n", "optimizer.adam_beta1 = 1.0"),
    ("smoothing-one", "a.yaml", "task:\n  label_smoothing: 1.0\n", "task.label_smoothing = 1.0"),
    (
        "dropout-big",
        "a.yaml",
        "model:\n  attention_dropout: 1.5\n",
        "model.attention_dropout = 1.5",
    ),
    ("bad-precision", "a.yaml", "training:\n  precision: fp8\n", "training.precision = 'fp8'"),
    ("bad-device", "a.yaml", "training:\n  device: tpu\n", "training.device = 'tpu'"),
    ("bad-dataset", "a.yaml", "data:\n  dataset: imagenet\n", "data.dataset = 'imagenet'"),
    ("bad-arch", "a.yaml", "model:\n  arch: resnet\n", "model.arch = 'resnet'"),
    ("bad-task", "a.yaml", "task:\n  kind: detection\n", "task.kind = 'detection'"),
    (
        "bad-scheduler",
        "a.yaml",
        "schedule:\n  lr_scheduler_type: step\n",
        "schedule.lr_scheduler_type = 'step'",
    ),
    (
        "bad-metric",
        "a.yaml",
        "evaluation:\n  metric_for_best_model: f1\n",
        "evaluation.metric_for_best_model = 'f1'",
    ),
    ("section-not-mapping", "a.yaml", "training: 5\n", "training = 5"),
    ("file-is-list", "a.yaml", "- 1\n- 2\n", "must be a mapping of sections"),
    ("bad-yaml", "a.yaml", "training:\n  seed: [1, 2\n", "invalid YAML at line"),
    ("bad-json", "a.json", '{"training": {"seed": 1,}}', "invalid JSON at line 1"),
    (
        "unknown-profile",
        "a.yaml",
        "profile: jetson-nano-9000\n",
        "profile = 'jetson-nano-9000': unknown profile",
    ),
    (
        "heads-not-dividing",
        "a.yaml",
        "model:\n  embedding_dim: 100\n  num_heads: 3\n",
        "does not divide model.embedding_dim = 100",
    ),
    (
        "patch-not-dividing",
        "a.yaml",
        "model:\n  patch_size: 5\n",
        "model.patch_size = 5: does not divide the 32-pixel images",
    ),
    (
        "warmup-too-long",
        "a.yaml",
        "schedule:\n  warmup_epochs: 20\ntraining:\n  num_train_epochs: 10\n",
        "warmup_epochs = 20: not shorter than training.num_train_epochs = 10",
    ),
    (
        "warmup-steps-too-long",
        "a.yaml",
        "schedule:\n  warmup_steps: 500\ntraining:\n  max_steps: 100\n",
        "warmup_steps = 500: not shorter than training.max_steps = 100",
    ),
    ("max-steps-zero", "a.yaml", "training:\n  max_steps: 0\n", "training.max_steps = 0"),
    ("fp16-on-cpu", "a.yaml", "training:\n  precision: fp16\n", "needs a CUDA device"),
    ("cuda-on-cpu", "a.yaml", "training:\n  device: cuda\n", "training.device = 'cuda'"),
    (
        "run-name-escape",
        "a.yaml",
        "output:\n  run_name: ../../etc\n",
        "output.run_name = '../../etc'",
    ),
    (
        "norm-length",
        "a.yaml",
        "data:\n  dataset: digits\n  normalize_mean: [0.5, 0.5, 0.5]\n"
        "  normalize_std: [0.2, 0.2, 0.2]\n",
        "digits images have 1 channel",
    ),
    (
        "norm-half",
        "a.yaml",
        "data:\n  normalize_mean: [0.5, 0.5, 0.5]\n",
        "normalize_mean and normalize_std must be given together",
    ),
    (
        "best-without-eval",
        "a.yaml",
        "evaluation:\n  eval_every_epochs: null\n",
        "checkpoint.save_best = true needs validation",
    ),
    (
        "image-size-on-cifar",
        "a.yaml",
        "data:\n  image_size: 64\n",
        "data.image_size = 64: cifar10 images are 32x32",
    ),
    (
        # nine nested aliases of nine: 9^9 strings once written out ("billion laughs");
        # before the bound, the layering and validation of this value ran for hours
        "alias-bomb",
        "a.yaml",
        "data:\n  options:\n    x: &a [l, l, l, l, l, l, l, l, l]\n"
        + "".join(
            f"    {b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n"
            for a, b in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        "its aliases stand for more than 100,000 values",
    ),
]


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 30
    assert len({c[0] for c in CORPUS}) == len(CORPUS)


HEAVY = {"torch", "torchvision", "transformers", "sklearn", "PIL"}
TRAIN_CASES = {"misspelt-lr", "fp16-on-cpu", "bad-dataset", "heads-not-dividing"}


def validate_args(path) -> list[str]:
    text = path.read_text()
    return ["validate", str(path)] + ([] if "profile" in text else ["--profile", "cpu"])


def train_args(tmp_path, name, text) -> list[str]:
    path = tmp_path / name
    path.write_text(text + "output:\n  dir: " + str(tmp_path / "runs") + "\n")
    return ["train", str(path), "--profile", "cpu"]


@pytest.mark.parametrize(("case", "name", "text", "expected"), CORPUS, ids=[c[0] for c in CORPUS])
def test_validate_reports_one_line(tmp_path, case, name, text, expected):
    path = tmp_path / name
    path.write_text(text)
    result = run_main(*validate_args(path))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, lines
    assert expected in lines[0]
    assert str(path) in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("case", "name", "text", "expected"), [c for c in CORPUS if c[0] in TRAIN_CASES]
)
def test_train_fails_before_touching_data(tmp_path, case, name, text, expected):
    result = run_main(*train_args(tmp_path, name, text))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2
    assert len(lines) == 1 and expected in lines[0], lines
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


# Each case in turn through `cli.main` in one fresh interpreter; after each, the top-level
# modules loaded so far. A case that loads one shows it there (later cases show it too).
CHILD = """
import json, sys
from trainforge import cli
seen = []
for argv in json.loads(sys.argv[1]):
    sys.argv = ["trainforge", *argv]
    try:
        cli.main()
    except SystemExit as exit_:
        code = exit_.code
    seen.append([code, sorted({name.split(".")[0] for name in sys.modules})])
print(json.dumps(seen))
"""


def test_no_case_loads_torch_or_a_data_library(tmp_path):
    """The process boundary is what this tests: a fresh interpreter's imports."""
    runs = []
    for case, name, text, _ in CORPUS:
        folder = tmp_path / case
        folder.mkdir()
        (folder / name).write_text(text)
        runs.append((case, validate_args(folder / name)))
        if case in TRAIN_CASES:
            runs.append((f"train {case}", train_args(folder, name, text)))
    child = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps([argv for _, argv in runs])],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr
    seen = json.loads(child.stdout.strip().splitlines()[-1])
    assert len(seen) == len(runs) == len(CORPUS) + len(TRAIN_CASES)
    for (case, _), (code, imported) in zip(runs, seen, strict=True):
        assert code == 2, case
        assert not HEAVY & set(imported), case  # answered before torch or any data library
