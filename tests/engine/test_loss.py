"""The vision task's loss is the guide's label-smoothed cross-entropy in closed form."""

from __future__ import annotations

import torch

from trainforge.tasks.vision import ImageClassification


def test_label_smoothed_loss_matches_closed_form():
    torch.manual_seed(0)
    k, alpha = 10, 0.1
    logits = torch.randn(32, k)
    labels = torch.randint(0, k, (32,))
    task = ImageClassification(
        model=None,
        train_loader=None,
        val_loader=None,
        augment=None,
        num_train_samples=0,
        num_classes=k,
        class_names=[],
        label_smoothing=alpha,
    )
    out = task.step(lambda images: images, (logits, labels))
    y_true = torch.nn.functional.one_hot(labels, k).float()
    y_smooth = (1 - alpha) * y_true + alpha / k
    expected = -(y_smooth * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
    torch.testing.assert_close(out.loss, expected, atol=1e-6, rtol=0)
    assert out.weight == 32
    assert int(out.sums["correct"]) == int((logits.argmax(1) == labels).sum())


def test_metrics_from_sums():
    task = ImageClassification(
        model=None,
        train_loader=None,
        val_loader=None,
        augment=None,
        num_train_samples=0,
        num_classes=2,
        class_names=[],
        label_smoothing=0.0,
    )
    assert task.metrics(12.0, 8, {"correct": 6.0}) == {"loss": 1.5, "accuracy": 0.75}
