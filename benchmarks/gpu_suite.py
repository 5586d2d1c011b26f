"""`make bench-gpu`: the GPU rows of `make bench` in one call, one Markdown summary and the raw
logs written to a folder, so a lent GPU machine's single command brings everything back.

    python benchmarks/gpu_suite.py OUT [--rows vit,input,checkpoint,g2p] [--g2p-budget-s 240]
                                       [--device cuda] [--tiny]

Rows (each in its own subprocess with its own time limit: one crash or hang never takes the
others down; its log says why):
- vit: ViT-S/4 on CIFAR-shaped data (`gpu.vit_workload`), trainforge's Trainer eager and
  compiled, images/s and MFU against the data sheet's peak and against the measured one
  (`trainforge.hardware.peak_probe`), side by side in one process.
- input: the CIFAR-shaped input pipeline into the device, the data set held on the GPU
  (gathered there) vs held in pinned host memory and copied without blocking, both through
  trainforge's loader and batched augmentation on the GPU; images/s and the ratio.
- checkpoint: the checkpoint stall (`checkpoint_stall.run`) with the training state on the GPU.
- g2p: G2P PER/WER on the CMUdict test split after a fixed training budget on the GPU
  (`g2p.run`), against the untrained model and the published reference.

OUT gets `summary.md`, `logs/ROW.log` (each row's stdout and stderr) and `rows/ROW.json`
(text, figures, seconds, exit status). `--tiny` shrinks every row so that the suite's own test
runs it end to end on a CPU (`--device cpu`) in seconds; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROWS = ("vit", "input", "checkpoint", "g2p")
# Seconds per row before it is stopped (the G2P row gets its training budget on top): at
# most 9 minutes in all, so `make bench-gpu` fits a 10-minute command on one H100.
LIMITS_S = {"vit": 140, "input": 50, "checkpoint": 50, "g2p": 120}
G2P_BUDGET_S = 180.0
TITLES = {
    "vit": "ViT-S/4 images/s and MFU, eager and compiled",
    "input": "CIFAR-shaped input pipeline on the device",
    "checkpoint": "Checkpoint stall",
    "g2p": "G2P PER/WER after a fixed budget",
}


def _sync(device: Any) -> Callable[[], None]:
    import torch

    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def vit_row(device: Any, tiny: bool) -> tuple[str, dict[str, float]]:
    """trainforge eager and compiled on the same ViT work; MFU against both peaks."""
    from dataclasses import replace

    import torch
    from common import table
    from peers.trainforge_side import run_trainforge

    from gpu import flops_per_step, vit_workload
    from trainforge.hardware.peak_probe import measured_peak
    from trainforge.hardware.peaks import peak_tflops

    torch.set_float32_matmul_precision("high")
    precision = "fp32" if tiny else "bf16"
    size = {"batch_size": 8, "warmup": 2, "timed": 2, "dim": 16, "layers": 1, "heads": 2}
    w = vit_workload(device, precision=precision, **(size if tiny else {}))
    flops = flops_per_step(w)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    sheet = peak_tflops(name, precision) if device.type == "cuda" else None
    measured = measured_peak(device, precision).tflops
    rows, figures = [], {"measured_peak_tflops": measured}
    for label, compiled in (("eager", False), ("compiled", True)):
        result = run_trainforge(replace(w, compile=compiled))
        rate = w.timed_samples / result.seconds
        achieved = flops * w.timed_steps / result.seconds / 1e12
        mfu_sheet = achieved / sheet if sheet else None
        figures |= {
            f"vit_{label}_images_per_s": rate,
            f"vit_{label}_mfu_measured": achieved / measured,
        }
        if mfu_sheet is not None:
            figures[f"vit_{label}_mfu"] = mfu_sheet
        rows.append([label, f"{rate:,.0f}", f"{achieved:.4g}",
                     "n/a" if mfu_sheet is None else f"{mfu_sheet:.1%}",
                     f"{achieved / measured:.1%}"])  # fmt: skip
    title = (
        f"{w.name} on {name}, {precision}, {w.warmup_steps} warm-up + {w.timed_steps} timed "
        f"steps; peak: data sheet {sheet or 'n/a'} TFLOP/s, measured {measured:.4g} TFLOP/s"
    )
    header = ["mode", "images/s", "model TFLOP/s", "MFU (data sheet)", "MFU (measured)"]
    return table(title, header, rows), figures


def input_row(device: Any, tiny: bool) -> tuple[str, dict[str, float]]:
    """Images/s into the training step: the data set on the device vs pinned host memory."""
    import torch
    from common import median, table
    from input_pipeline import MEAN, STD, cpu_config, synthetic_uint8

    from trainforge.data.augment import BatchAugment
    from trainforge.data.loaders import make_loader
    from trainforge.data.memory import TensorImageDataset

    batch, batches = (64, 4) if tiny else (512, 100)
    hwc, labels = synthetic_uint8(batch * batches)
    nchw = torch.from_numpy(hwc).permute(0, 3, 1, 2).contiguous()
    config = cpu_config(**{"data.pin_memory": "true"})
    augment = BatchAugment(MEAN, STD, crop_padding_px=4, horizontal_flip=True).to(device)
    sync = _sync(device)

    def pipeline(on_device: bool) -> Callable[[], float]:
        dataset = TensorImageDataset(nchw.clone(), torch.from_numpy(labels))
        if on_device:
            dataset.to(device)
        loader = make_loader(dataset, config.data, batch_size=batch, train=True, seed=0,
                             batched_fetch=True, on_device=on_device)  # fmt: skip

        def epoch() -> float:
            sync()
            start = time.perf_counter()
            for images, targets in loader:
                images = images.to(device, non_blocking=True)
                targets = targets.to(device, non_blocking=True)
                augment(images, train=True)
            sync()
            return time.perf_counter() - start

        epoch()  # warm-up: kernels, pinned buffers
        return epoch

    cases = {
        "held on the device": pipeline(True),
        "pinned host, non-blocking copy": pipeline(False),
    }
    seconds = {name: median([fn() for _ in range(3)]) for name, fn in cases.items()}
    rates = {name: batch * batches / s for name, s in seconds.items()}
    base = rates["pinned host, non-blocking copy"]
    rows = [[name, f"{rate:,.0f}", f"{rate / base:.2f}x"] for name, rate in rates.items()]
    title = (
        f"CIFAR-shaped uint8 3x32x32, batch {batch}, {batches} batches, crop + flip + "
        f"normalise on {device}, median of 3 epochs"
    )
    figures = {"input_device_images_per_s": rates["held on the device"],
               "input_device_vs_pinned_host": rates["held on the device"] / base}  # fmt: skip
    return table(title, ["data set", "images/s", "vs host"], rows), figures


def checkpoint_row(device: Any, tiny: bool) -> tuple[str, dict[str, float]]:
    import checkpoint_stall

    if tiny:
        return checkpoint_stall.run(width=64, repeats=1, device=device.type)
    return checkpoint_stall.run(device=device.type)


def g2p_row(device: Any, tiny: bool, budget_s: float = G2P_BUDGET_S):
    import g2p

    if tiny:
        return g2p.run(budget_s=2.0, test_words=4, threads=1, train_words=200, size="tiny",
                       device=device.type)  # fmt: skip
    return g2p.run(budget_s=budget_s, test_words=0, device=device.type)


def run_row(name: str, device_name: str, tiny: bool, g2p_budget_s: float, out: Path) -> int:
    """One row in this process: its text and figures to OUT/rows/NAME.json."""
    import torch

    device = torch.device(device_name)
    started = time.perf_counter()
    if name == "g2p":
        text, figures = g2p_row(device, tiny, g2p_budget_s)
    else:
        text, figures = {"vit": vit_row, "input": input_row, "checkpoint": checkpoint_row}[name](
            device, tiny
        )
    print(text)
    record = {"text": text, "figures": figures, "seconds": time.perf_counter() - started}
    (out / "rows" / f"{name}.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    return 0


def spawn_row(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one row in a subprocess under its time limit; what came back, or why nothing did."""
    out: Path = args.out
    log = out / "logs" / f"{name}.log"
    cmd = [sys.executable, __file__, str(out), "--row", name, "--device", args.device,
           "--g2p-budget-s", str(args.g2p_budget_s)]  # fmt: skip
    cmd += ["--tiny"] if args.tiny else []
    # The G2P row trains for its budget, then scores the test split; --tiny rows run on a CPU.
    limit = LIMITS_S[name] * (3 if args.tiny else 1) + (args.g2p_budget_s if name == "g2p" else 0)
    row = out / "rows" / f"{name}.json"
    row.unlink(missing_ok=True)  # only what this run writes counts
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as fh:
        try:
            code = subprocess.run(
                cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=limit
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
    seconds = time.perf_counter() - started
    if code == 0 and row.is_file():
        return {**json.loads(row.read_text(encoding="utf-8")), "status": "ok"}
    why = f"stopped after its {limit:.0f} s limit" if code is None else f"exit status {code}"
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:]
    return {
        "status": "failed",
        "why": why,
        "last_line": tail[0] if tail else "",
        "seconds": seconds,
    }


def write_summary(out: Path, results: dict[str, dict[str, Any]], machine: str) -> Path:
    """OUT/summary.md: the machine, each row's table (or why it failed), every figure."""
    lines = ["# trainforge GPU benchmarks", "", f"- machine: {machine}",
             f"- written: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
             "- raw logs: `logs/ROW.log`; figures per row: `rows/ROW.json`", ""]  # fmt: skip
    figures: list[tuple[str, float]] = []
    for name, result in results.items():
        lines.append(f"## {TITLES.get(name, name)} ({result.get('seconds', 0):.0f} s)")
        lines.append("")
        if result["status"] == "ok":
            lines += ["```text", result["text"].rstrip(), "```"]
            figures += sorted(result["figures"].items())
        else:
            lines.append(f"**failed** ({result['why']}): `{result['last_line']}`; see "
                         f"`logs/{name}.log`")  # fmt: skip
        lines.append("")
    if figures:
        lines += ["## Figures", "", "| figure | value |", "| --- | --- |"]
        lines += [f"| {key} | {value:.4g} |" for key, value in figures]
        lines.append("")
    path = out / "summary.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def machine_description(device_name: str) -> str:
    import torch
    from common import machine_line

    where = machine_line()
    if device_name == "cuda":
        where += f"; GPU {torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}"
    return where


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for summary.md, logs/ and rows/")
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows")
    parser.add_argument("--row", help=argparse.SUPPRESS)  # one row, in a subprocess
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--g2p-budget-s", type=float, default=G2P_BUDGET_S)
    parser.add_argument("--tiny", action="store_true", help="shrunk rows (checks the suite)")
    args = parser.parse_args(argv)
    if args.row:
        return run_row(args.row, args.device, args.tiny, args.g2p_budget_s, args.out)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        print(f"bench-gpu: unknown row {', '.join(unknown)}; rows: {', '.join(ROWS)}",
              file=sys.stderr)  # fmt: skip
        return 2
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench-gpu: no CUDA device on this machine (torch.cuda.is_available() is False); "
              "run it on a GPU machine, or add --device cpu --tiny to check the suite itself",
              file=sys.stderr)  # fmt: skip
        return 2
    for folder in ("logs", "rows"):
        (args.out / folder).mkdir(parents=True, exist_ok=True)
    results = {}
    for name in rows:
        print(f"bench-gpu: {name} ...", flush=True)
        results[name] = spawn_row(name, args)
        print(f"bench-gpu: {name} {results[name]['status']}", flush=True)
    path = write_summary(args.out, results, machine_description(args.device))
    print(path.read_text(encoding="utf-8"))
    return 0 if all(r["status"] == "ok" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
