"""The input-pipeline benchmark times the same transforms on both sides (small sizes here)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import input_pipeline as ip

from trainforge.data.augment import crop_flip


def test_both_pipelines_compute_the_same_images_for_the_same_random_choices():
    assert ip.same_transforms(num_images=8) == 0.0


def test_earlier_gather_diagnostic_equals_crop_flip_in_values_and_layout():
    generator = torch.Generator().manual_seed(3)
    images = torch.randint(0, 256, (12, 3, 32, 32), dtype=torch.uint8, generator=generator)
    offsets_y = torch.randint(0, 9, (12,), generator=generator)
    offsets_x = torch.randint(0, 9, (12,), generator=generator)
    flips = torch.rand(12, generator=generator) < 0.5
    expected = crop_flip(images, offsets_y, offsets_x, flips, 4)
    earlier = ip.crop_flip_gather(images, offsets_y, offsets_x, flips, 4)
    assert torch.equal(earlier, expected) and earlier.stride() == expected.stride()


def test_each_round_is_one_full_epoch_of_the_same_images_on_every_side():
    pipelines = ip.Pipelines(num_images=64, batch_size=16, workers=0)
    try:
        assert pipelines.seed() > 0
        assert pipelines.trainforge() > 0
        assert pipelines.trainforge(pipelines.gather_augment) > 0
        assert len(pipelines.seed_loader.dataset) == len(pipelines.loader.dataset) == 64
        seed_images = torch.from_numpy(pipelines.seed_loader.dataset.data).permute(0, 3, 1, 2)
        assert torch.equal(seed_images, pipelines.loader.dataset.images)
    finally:
        pipelines.close()


def test_data_wait_comes_from_the_trainers_timed_window():
    metrics = ip.data_wait_run(warmup_steps=1, timed_steps=2, batch_size=16, dim=16)
    assert 0.0 < metrics["data_wait_share"] < 1.0
    assert metrics["samples_per_s"] > 0 and metrics["step_time_s"] > 0


def test_run_reports_the_speedup_and_the_data_wait_share(monkeypatch):
    # Equal cores: trainforge's row runs with as many torch threads as the seed has worker
    # processes; the diagnostic row with one.
    threads_seen = []
    timed = ip.Pipelines.trainforge

    def recording(self, augment=None):
        threads_seen.append(torch.get_num_threads())
        return timed(self, augment)

    monkeypatch.setattr(ip.Pipelines, "trainforge", recording)
    text, ratios = ip.run(repeats=1, batch_size=16, batches_per_epoch=2, workers=2,
                          train_steps=(1, 2), threads=1)  # fmt: skip
    assert sorted(set(threads_seen)) == [1, 2]
    assert "seed: torchvision per sample, 2 worker processes" in text
    assert "trainforge: uint8 in memory + BatchAugment, 2 thread(s)" in text
    assert "(diag) trainforge on 1 thread" in text
    assert ratios["input_pipeline_one_thread_speedup"] > 0
    assert "same transforms: max |difference| 0.00e+00" in text
    assert ratios["input_pipeline_speedup"] > 0
    assert ratios["input_pipeline_gather_speedup"] > 0
    header = next(line for line in text.splitlines() if line.startswith("pipeline"))
    assert "peak RSS MiB" in header and "workers' peak RSS MiB" in header
    seed_row = next(line for line in text.splitlines() if line.startswith("seed:"))
    ours_row = next(line for line in text.splitlines() if line.startswith("trainforge:"))
    # Two live workers each hold at least the interpreter and torch: tens of MiB apiece.
    assert float(seed_row.split()[-1].replace(",", "")) > 50
    assert ours_row.rstrip().endswith("no workers")
    assert 0.0 < ratios["data_wait_share"] < 1.0
    assert ratios["input_transform_max_diff"] == 0.0
