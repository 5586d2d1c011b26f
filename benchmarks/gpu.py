"""GPU: ViT-S/4 on CIFAR-shaped data, images/s and MFU, trainforge vs a plain loop, PyTorch
Lightning and the Hugging Face Trainer, side by side in one run. Runs only where CUDA is
present; elsewhere it prints one line saying it was skipped.

Every side: bf16 autocast, `torch.compile`, attention through
`scaled_dot_product_attention` (the model's own; flash kernels where the GPU has them),
channels-last inputs and weights, fused AdamW (trainforge's groups), clipping at norm 1.0,
TF32 matmuls allowed (`torch.set_float32_matmul_precision("high")`), data held on the GPU,
dropout off (so the sides' losses can be compared), the same batches in the same order.
Diagnostic rows turn one trainforge fast path off at a time (the per-step finite check's host
read, compile, channels-last) to show what each is worth.

MFU = model FLOPs per second / the device's peak dense BF16 FLOPs. Model FLOPs of one
training step (forward + backward) are counted once with `torch.utils.flop_counter.
FlopCounterMode` on the uncompiled model. Peaks come from `trainforge.hardware.peaks`, which
cites the vendors' data sheets: A100 312, H100 SXM 989 (PCIe 756), H200 989, RTX 4090 165.2
(dense BF16 with FP32 accumulate, Ada whitepaper) TFLOPS; `TRAINFORGE_PEAK_TFLOPS` overrides.
Target: trainforge MFU >= 35% on an H100.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import alternate, median, memory_note, table
from peers.hf_side import run_hf
from peers.lightning_side import run_lightning
from peers.plain import run_plain
from peers.trainforge_side import run_trainforge
from peers.workload import SideResult, Workload, loss_fn, same_work_line

from trainforge.models.vit import VisionTransformer

TARGET_MFU = 0.35
# bf16 and compiled kernels round differently from side to side; a different update or batch
# order moves the loss by far more.
LOSS_RTOL = 2e-2
SKIPPED = (
    "gpu: skipped, no CUDA device on this machine (torch.cuda.is_available() is False); "
    "run `make bench` on a GPU machine for ViT-S/4 images/s and MFU"
)
TRAINFORGE = "trainforge Trainer"
LIGHTNING = "PyTorch Lightning"
HF = "Hugging Face Trainer"


def vit_workload(
    device: torch.device,
    batch_size: int = 512,
    warmup: int = 15,
    timed: int = 50,
    dim: int = 384,
    layers: int = 12,
    heads: int = 6,
    precision: str = "bf16",
    compile_model: bool = True,
) -> Workload:
    """ViT-S/4 by default (dim 384, 12 layers, 6 heads, MLP 1536, patch 4: 65 tokens)."""

    def make() -> nn.Module:
        torch.manual_seed(0)
        return VisionTransformer(
            image_size=32, channels=3, num_classes=10, patch_size=4, embedding_dim=dim,
            num_layers=layers, num_heads=heads, mlp_size=4 * dim, attention_dropout=0.0,
            mlp_dropout=0.0,
        )  # fmt: skip

    generator = torch.Generator().manual_seed(0)
    num_samples = batch_size * 8
    images = torch.randn(num_samples, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (num_samples,), generator=generator)
    name = f"ViT dim {dim}, {layers} layers, {heads} heads, patch 4, batch {batch_size}"
    return Workload(
        name, make, images.to(device), labels.to(device), batch_size, warmup, timed,
        device=device, precision=precision, compile=compile_model, channels_last=True,
    )  # fmt: skip


def sides(w: Workload) -> dict[str, Callable[[], SideResult]]:
    return {
        TRAINFORGE: lambda: run_trainforge(w),
        "plain PyTorch loop": lambda: run_plain(w),
        LIGHTNING: lambda: run_lightning(w),
        HF: lambda: run_hf(w),
        "(diag) trainforge, skip_nonfinite_steps=false": lambda: run_trainforge(
            w, **{"training.skip_nonfinite_steps": False}
        ),
        "(diag) trainforge, compile off": lambda: run_trainforge(replace(w, compile=False)),
        "(diag) trainforge, channels-last off": lambda: run_trainforge(
            replace(w, channels_last=False)
        ),
    }


def flops_per_step(w: Workload) -> float:
    """Model FLOPs of one forward + backward on one batch (uncompiled model)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = replace(w, compile=False).prepare_model()
    images = w.images[: w.batch_size].to(w.device)
    labels = w.labels[: w.batch_size].to(w.device)
    counter = FlopCounterMode(display=False)
    with counter, w.autocast():
        loss_fn(model(images), labels).backward()
    return float(counter.get_total_flops())


def device_peak_tflops(device: torch.device) -> tuple[float | None, str]:
    """(peak dense BF16 TFLOPS, where it came from)."""
    override = os.environ.get("TRAINFORGE_PEAK_TFLOPS")
    if override:
        return float(override), "TRAINFORGE_PEAK_TFLOPS"
    if device.type != "cuda":
        return None, "no peak for a CPU"
    from trainforge.hardware.peaks import peak_tflops

    name = torch.cuda.get_device_name(device)
    peak = peak_tflops(name, "bf16")
    return peak, f"{name}: data sheet table in trainforge.hardware.peaks"


def mfu(flops_step: float, steps: int, seconds: float, peak_tflops: float | None) -> float | None:
    if not peak_tflops:
        return None
    return flops_step * steps / seconds / (peak_tflops * 1e12)


def run(
    repeats: int = 3, device: torch.device | None = None, workload: Workload | None = None
) -> tuple[str, dict[str, float]]:
    if device is None:
        if not torch.cuda.is_available():
            return SKIPPED, {}
        device = torch.device("cuda")
    torch.set_float32_matmul_precision("high")
    w = workload or vit_workload(device)
    flops = flops_per_step(w)
    peak, source = device_peak_tflops(device)
    runs = alternate(sides(w), repeats)
    rows, rates, mfus = [], {}, {}
    for name, results in runs.items():
        seconds = median([r.seconds for r in results])
        rates[name] = w.timed_samples / seconds
        mfus[name] = mfu(flops, w.timed_steps, seconds, peak)
        rows.append(
            [
                name,
                f"{rates[name]:,.0f}",
                "n/a" if mfus[name] is None else f"{mfus[name]:.1%}",
                f"{rates[name] / rates[TRAINFORGE]:.3f}",
                str(results[0].optimizer_steps),
                f"{median([r.probe_loss for r in results]):.4f}",
                "n/a"
                if results[0].memory.cuda_mib is None
                else f"{median([r.memory.cuda_mib for r in results]):,.0f}",
                f"{median([r.memory.rss_mib for r in results]):,.0f}",
            ]
        )
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    text = table(
        f"gpu: {w.name} on {device} ({where}), "
        f"{w.warmup_steps} warm-up + {w.timed_steps} timed steps, median of {repeats} "
        f"alternating rounds; {flops / w.batch_size / 1e9:.2f} GFLOPs per image per step; "
        f"peak {peak if peak else 'unknown'} TFLOPS ({source}) (target MFU >= {TARGET_MFU:.0%})",
        ["side", "images/s", "MFU", "vs trainforge", "opt steps", "final loss",
         "peak CUDA MiB", "peak RSS MiB"],
        rows,
    )  # fmt: skip
    text += "\n" + same_work_line(w, runs, TRAINFORGE, LOSS_RTOL)
    text += (
        "\n" + memory_note(runs[TRAINFORGE][0].memory) + "; peak CUDA MiB = "
        "torch.cuda.max_memory_allocated after reset_peak_memory_stats at the start of the case"
    )
    text += (
        "\nsettings: bf16 autocast, torch.compile, SDPA attention, channels-last, fused AdamW "
        "(CUDA), clip norm 1.0, TF32 matmuls, data on the device, dropout off, no logging; "
        "Lightning Trainer(barebones=True, precision='bf16-mixed'), torch.compile(module); "
        "Hugging Face Trainer(bf16=True, torch_compile=True, logging/save/eval 'no')"
    )
    ratios = {
        "gpu_vs_lightning": rates[TRAINFORGE] / rates[LIGHTNING],
        "gpu_vs_hf": rates[TRAINFORGE] / rates[HF],
    }
    if mfus[TRAINFORGE] is not None:
        ratios["gpu_mfu"] = mfus[TRAINFORGE]
    return text, ratios


if __name__ == "__main__":
    print(run()[0])
