"""The main job as a careful user would write it by hand: config/vit_digits.yaml's recipe in
one plain PyTorch script, the reference of benchmarks/whole_job.py.

Same data (scikit-learn's digits, trainforge's fixed split: the last 20 % of a seed-0
permutation is validation), the same ViT class (trainforge.models.vit), the same recipe
(batch 64, 40 epochs, AdamW 2e-3 with weight decay 0.05 on matrices only, 3 warm-up epochs
then cosine per step, label smoothing 0.1, gradient clipping at 1.0, 1 px random crops,
evaluation every 5 epochs) and one final save. It prints `first_step_unix`, `last_step_unix`
(after the last epoch's evaluation) and the validation accuracy; whole_job.py times the
process around them.

Usage: python benchmarks/peers/plain_digits.py OUT_DIR [--epochs N] [--warmup-epochs N] [--seed N]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

from trainforge.models.vit import VisionTransformer

# config/vit_digits.yaml (tests/benchmarks/test_whole_job.py checks they agree)
RECIPE = {
    "val_fraction": 0.2,
    "batch_size": 64,
    "eval_batch_size": 256,
    "num_epochs": 40,
    "learning_rate": 0.002,
    "weight_decay": 0.05,
    "warmup_epochs": 3,
    "max_grad_norm": 1.0,
    "label_smoothing": 0.1,
    "eval_every_epochs": 5,
    "crop_padding": 1,
    "seed": 0,
}
MEAN, STD = 0.3053, 0.3759  # of all 1797 images scaled to 0..1


def load_data(val_fraction: float):
    bunch = load_digits()
    scaled = np.rint(bunch.images * (255.0 / 16)).astype(np.uint8)
    images = (torch.from_numpy(scaled).float().div_(255).unsqueeze(1) - MEAN) / STD
    labels = torch.from_numpy(bunch.target.astype(np.int64))
    order = np.random.default_rng(0).permutation(len(labels))
    num_train = len(labels) - round(len(labels) * val_fraction)
    train, val = np.sort(order[:num_train]), np.sort(order[num_train:])
    return images[train], labels[train], images[val], labels[val]


def random_crop(images: torch.Tensor, padding: int, generator: torch.Generator) -> torch.Tensor:
    """Zero-pad by `padding` and crop back at a random offset per image (one gather)."""
    b, c, h, w = images.shape
    padded = F.pad(images, (padding,) * 4, value=-MEAN / STD)  # a black pixel, normalised
    oy = torch.randint(0, 2 * padding + 1, (b,), generator=generator)
    ox = torch.randint(0, 2 * padding + 1, (b,), generator=generator)
    rows = (oy[:, None] + torch.arange(h))[:, None, :, None]
    cols = (ox[:, None] + torch.arange(w))[:, None, None, :]
    return padded[torch.arange(b)[:, None, None, None], torch.arange(c)[None, :, None, None],
                  rows, cols]  # fmt: skip


def evaluate(model, images, labels, batch_size: int) -> float:
    model.eval()
    correct = 0
    with torch.inference_mode():
        for start in range(0, len(labels), batch_size):
            logits = model(images[start : start + batch_size])
            correct += int((logits.argmax(1) == labels[start : start + batch_size]).sum())
    model.train()
    return correct / len(labels)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--epochs", type=int, default=RECIPE["num_epochs"])
    parser.add_argument("--warmup-epochs", type=int, default=RECIPE["warmup_epochs"])
    parser.add_argument("--seed", type=int, default=RECIPE["seed"])
    args = parser.parse_args()
    r = RECIPE
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    train_x, train_y, val_x, val_y = load_data(r["val_fraction"])
    model = VisionTransformer(
        image_size=8, channels=1, num_classes=10, patch_size=4, embedding_dim=128,
        num_layers=4, num_heads=4, mlp_size=256, attention_dropout=0.0, mlp_dropout=0.0,
    )  # fmt: skip
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and n != "pos_embed"]
    decay = [p for p in decay if p is not model.cls_token]  # as trainforge: no decay on either
    rest = [p for p in model.parameters() if all(p is not d for d in decay)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": r["weight_decay"]}, {"params": rest, "weight_decay": 0}],
        lr=r["learning_rate"],
        fused=True,
    )
    steps_per_epoch = math.ceil(len(train_y) / r["batch_size"])
    total, warmup = steps_per_epoch * args.epochs, args.warmup_epochs * steps_per_epoch

    def lr_factor(step: int) -> float:
        if step < warmup:
            return step / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    accuracy = 0.0
    print(f"first_step_unix {time.time():.3f}", flush=True)
    for epoch in range(1, args.epochs + 1):
        for batch in torch.randperm(len(train_y), generator=generator).split(r["batch_size"]):
            images = random_crop(train_x[batch], r["crop_padding"], generator)
            logits = model(images)
            loss = F.cross_entropy(logits, train_y[batch], label_smoothing=r["label_smoothing"])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), r["max_grad_norm"], foreach=True)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        if epoch % r["eval_every_epochs"] == 0 or epoch == args.epochs:
            accuracy = evaluate(model, val_x, val_y, r["eval_batch_size"])
            print(f"epoch {epoch} loss {loss.item():.4f} val accuracy {accuracy:.4f}", flush=True)
    print(f"last_step_unix {time.time():.3f}", flush=True)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), args.out_dir / "model.pt")
    print(f"accuracy {accuracy:.4f}", flush=True)


if __name__ == "__main__":
    main()
