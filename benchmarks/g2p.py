"""G2P on CMUdict: PER and WER on the test split after a fixed CPU training budget.

Trains `config/g2p_cmudict.yaml`'s flow (a small randomly initialised Llama with a tokenizer
trained on the train split) for `--budget-s` seconds of training on the CPU, then greedy-
decodes the test words. The untrained model is measured side by side in the same run, and
both are set against the published reference for CMUdict: a Transformer at 5.2% PER /
22.1% WER (Yolchuyeva, Németh and Gyires-Tóth, "Transformer based Grapheme-to-Phoneme
Conversion", Interspeech 2019), which trained to convergence on a GPU.

The step count is calibrated first (20 timed steps) so the learning-rate schedule ends with
the budget; a time limit stops the run there in any case.

    python benchmarks/g2p.py [--budget-s 600] [--test-words N] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
warnings.filterwarnings("ignore", message=".*set_vital.*")

from common import machine_line  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
G2P = REPO / "example_datasets" / "g2p"
REFERENCE = {"per": 0.052, "wer": 0.221}


def _config(work: Path, test_file: Path, max_steps: int, threads: int):
    from trainforge.config import load

    sets = {
        "model.model_name_or_path": str(work / "g2p-small"),
        "data.test_file": str(test_file),
        "data.dataloader_num_workers": 0,
        "training.max_steps": max_steps,
        "training.num_threads": threads,
        "training.per_device_train_batch_size": 64,
        "schedule.warmup_steps": min(200, max_steps // 10),
        "logging.tensorboard": False,
        "logging.jsonl": False,
        "logging.progress_bar": False,
    }
    overrides = [f"{k}={v}" for k, v in sets.items()]
    return load(REPO / "config" / "g2p_cmudict.yaml", profile="cpu", overrides=overrides).config


def _trainer(config, run_dir: Path, budget_s: float):
    from trainforge.engine.callbacks import TimeLimit
    from trainforge.engine.trainer import Trainer
    from trainforge.tasks import build_task

    torch.manual_seed(config.training.seed)
    task = build_task(config)
    limit = TimeLimit(budget_s / 3600.0, save=False)
    return Trainer(task, config, run_dir=run_dir, device=torch.device("cpu"), callbacks=[limit])


def _test_metrics(trainer) -> dict[str, float]:
    trainer.task.val_loader = trainer.task.test_loader
    return trainer.evaluate()


def run(budget_s: float = 600.0, test_words: int | None = None, threads: int = 2):
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        test_file = G2P / "cmudict_test.tsv"
        if test_words:
            test_file = work / "test.tsv"
            lines = (G2P / "cmudict_test.tsv").read_text().splitlines(True)[:test_words]
            test_file.write_text("".join(lines))
        calibrate = _trainer(_config(work, test_file, 20, threads), work / "cal", budget_s)
        start = time.perf_counter()
        calibrate.fit()
        step_s = (time.perf_counter() - start) / 20
        steps = max(50, int(budget_s / step_s))
        trainer = _trainer(_config(work, test_file, steps, threads), work / "run", budget_s)
        untrained = _test_metrics(trainer)
        result = trainer.fit()
        trained = _test_metrics(trainer)
        n = len(test_file.read_text().splitlines()) if test_words else "all"
    rows = [
        f"G2P CMUdict test split ({n} words), CPU budget {budget_s:.0f} s "
        f"({result.state.global_step} steps x 64 words, {result.state.train_time_s:.0f} s trained, "
        f"stop: {result.stop_reason})",
        f"{'model':<34} {'PER':>8} {'WER':>8}",
        f"{'untrained (random init)':<34} {untrained['per']:>8.1%} {untrained['wer']:>8.1%}",
        f"{'trainforge, small llama, budget':<34} {trained['per']:>8.1%} {trained['wer']:>8.1%}",
        f"{'Yolchuyeva et al. 2019 (reference)':<34} {REFERENCE['per']:>8.1%} "
        f"{REFERENCE['wer']:>8.1%}",
        f"ratio to reference: PER x{trained['per'] / REFERENCE['per']:.2f}, "
        f"WER x{trained['wer'] / REFERENCE['wer']:.2f}",
    ]
    ratios = {
        "g2p_per_ratio_to_reference": trained["per"] / REFERENCE["per"],
        "g2p_per_ratio_to_untrained": trained["per"] / max(untrained["per"], 1e-9),
    }
    return "\n".join(rows), ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=600.0, help="training seconds")
    parser.add_argument("--test-words", type=int, default=None, help="first N test words")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"machine: {machine_line()}\n")
    text, _ = run(args.budget_s, args.test_words, args.threads)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
