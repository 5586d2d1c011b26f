"""The language-model step beside TRL's `SFTTrainer` and the plain HF `Trainer`.

Every side trains the same model folder from the same weights on the same token ids (the
G2P train split encoded once by trainforge's encoder, loss on the completion tokens only),
with AdamW (the fused kernel on every side), the same learning rate, weight decay, cosine
schedule and warm-up, clipping at norm 1.0, fp32 on the CPU, the same effective batch and
the same `torch.set_num_threads`. Each run is a process of its own (`peers/lm_side.py`), so
its peak RSS is its own (`wait4`) and its start-up and exit count: the rounds alternate the
sides' order. trainforge runs as a user runs it: `trainforge train config/g2p_cmudict.yaml`
with `--set` overrides (no evaluation during training; its one closing validation pass
reads a 64-word file). The peers are `peers/trl_side.py`, run by the interpreter of a venv
made from the `bench` extra (`peers/venv.py`: same torch version, nothing of trainforge's);
their batches in trainforge's order come as a file of indices, so they import no trainforge.

Throughput is non-pad tokens per second between the end of the first optimizer step and the
end of the last (the first step warms up), counted by one hook on the model's input
embedding on every side. "equal" batching: every side pads each batch to its longest row, and
the batches are the same (trainforge's order, given to the peers as their sampler). "default":
each side's own batching; TRL's default is padded batches in random order, which is what its
equal run does, so that run serves both rows. The loss column is each side's final model
scored on 512 held-out words (completion tokens), the same after the same steps if the sides
train the same thing.

Workloads: the G2P recipe's model (0.85 M parameters, batch 128) and the Gemma-3-270m-shaped
model (268 M parameters, 262,144-token vocabulary, random weights built here); on a CPU the
latter runs a few steps at a small batch so that the module stays near ten minutes.

Library considered: TRL's own benchmark scripts time `trainer.train()` in-process, which
would hide start-up, exit and per-side peak memory; hence a process per side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_threads, median, table
from peers.lm_workload import CONFIG, LmData, gemma_model, prepare, probe_loss, probe_set

SIDE_SCRIPT = Path(__file__).resolve().parent / "peers" / "lm_side.py"
TRAINFORGE, TRAINFORGE_DEFAULT, TRL, HF = "trainforge", "trainforge default", "trl", "hf"
LABELS = {
    TRAINFORGE: "trainforge train (equal batching)",
    TRAINFORGE_DEFAULT: "trainforge train (its default batching)",
    TRL: "TRL SFTTrainer (its default = equal batching)",
    HF: "HF Trainer (equal batching)",
}


@dataclass
class Recipe:
    steps: int
    batch: int
    learning_rate: float = 2e-3  # the G2P recipe's
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = 0

    @property
    def warmup_steps(self) -> int:
        return max(1, self.steps // 10)


@dataclass
class SideRun:
    tokens_per_s: float
    before_first_s: float
    after_last_s: float
    wall_s: float
    peak_rss_mib: float
    steps: int
    tokens: int  # non-pad tokens of steps 2..N
    model_dir: Path


def equal_batching_sets() -> dict[str, Any]:
    """trainforge's text options that turn length grouping and packing off, where they exist
    in this build (the same padded batches the peers get)."""
    from trainforge.options import options_model
    from trainforge.registry import DATASETS

    names = set(options_model(DATASETS.find("text")).model_fields)
    sets: dict[str, Any] = {"data.options.packing": False}
    for name in ("group_by_length", "padding_free"):
        if name in names:
            sets[f"data.options.{name}"] = False
    return sets


def write_order(data: LmData, recipe: Recipe, run_dir: Path) -> Path:
    """trainforge's train order (`StepBatchSampler`, one process, epoch 0) flattened, for a
    peer's sampler: the Trainer cuts it into batches of `recipe.batch`, the same batches."""
    from trainforge.data.sampling import StepBatchSampler

    order = [i for batch in StepBatchSampler(data.num_examples, recipe.seed, recipe.batch)
             for i in batch]  # fmt: skip
    path = run_dir / "order.json"
    path.write_text(json.dumps(order))
    return path


def run_side(
    side: str, data: LmData, model: Path, recipe: Recipe, name: str, peers: str = sys.executable
) -> SideRun:
    """One side in its own process (a peer by the `peers` interpreter, trainforge by this
    one); its timings from the step stamps it wrote at exit."""
    run_dir = data.work / "runs" / name
    spec = {
        "side": "trainforge" if side.startswith("trainforge") else side,
        "name": name,
        "batching": "default" if side == TRAINFORGE_DEFAULT else "equal",
        "model_dir": str(model),
        "models_dir": str(data.work / "models"),
        "runs_dir": str(run_dir),
        "config": str(CONFIG),
        "train_file": str(data.train_file),
        "validation_file": str(data.validation_file),
        "examples": str(data.examples),
        "max_seq_length": 64,
        "threads": bench_threads(),
        "pad_id": data.pad_id,
        "vocab_size": json.loads((model / "config.json").read_text())["vocab_size"],
        "steps": recipe.steps,
        "batch": recipe.batch,
        "learning_rate": recipe.learning_rate,
        "weight_decay": recipe.weight_decay,
        "max_grad_norm": recipe.max_grad_norm,
        "warmup_steps": recipe.warmup_steps,
        "seed": recipe.seed,
        "result": str(run_dir / "result.json"),
        "trainforge_sets": {"model.init_arch": None}
        | (equal_batching_sets() if side == TRAINFORGE else {}),
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    ours = side.startswith("trainforge")
    if not ours and spec["batching"] == "equal":
        spec["order"] = str(write_order(data, recipe, run_dir))
    (run_dir / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "OMP_NUM_THREADS": str(bench_threads()), "TOKENIZERS_PARALLELISM": "false"}
    log = (run_dir / "log.txt").open("w")
    started = time.time()
    proc = subprocess.Popen(
        [sys.executable if ours else peers, str(SIDE_SCRIPT), str(run_dir / "spec.json")],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(data.work),
    )  # fmt: skip
    _, status, usage = os.wait4(proc.pid, 0)
    ended = time.time()
    proc.returncode = os.waitstatus_to_exitcode(status)
    log.close()
    if proc.returncode != 0:
        tail = (run_dir / "log.txt").read_text().strip().splitlines()[-3:]
        raise RuntimeError(f"{side} side exited {proc.returncode}: {' | '.join(tail)}")
    result = json.loads((run_dir / "result.json").read_text())
    first, last = result["step_ends"]
    model_dir = (
        data.work / "models" / f"bench-{name}"
        if side.startswith("trainforge")
        else run_dir / name / "model"
    )
    return SideRun(
        (result["tokens"] - result["tokens_at_first_step"]) / max(last - first, 1e-9),
        first - started, ended - last, ended - started, usage.ru_maxrss / 1024,
        result["steps"], result["tokens"] - result["tokens_at_first_step"], model_dir,
    )  # fmt: skip


def rounds(
    data: LmData,
    model: Path,
    recipe: Recipe,
    sides: list[str],
    repeats: int,
    tag: str,
    peers: str = sys.executable,
) -> dict[str, list[SideRun]]:
    """Every side once per round, the order rotated each round."""
    runs: dict[str, list[SideRun]] = {side: [] for side in sides}
    for index in range(repeats):
        shift = index % len(sides)
        for side in sides[shift:] + sides[:shift]:
            name = f"{tag}-{side.replace(' ', '-')}-{index}"
            runs[side].append(run_side(side, data, model, recipe, name, peers))
    return runs


def ratio(ours: list[SideRun], base: list[SideRun]) -> float:
    """The median of the rounds' own tokens/s ratios (a slow spell falls on both of a pair)."""
    return median([a.tokens_per_s / b.tokens_per_s for a, b in zip(ours, base, strict=True)])


def side_table(title: str, runs: dict[str, list[SideRun]], losses: dict[str, float]) -> str:
    rows = []
    for side, results in runs.items():
        rows.append([
            LABELS[side],
            f"{median([r.tokens_per_s for r in results]):,.0f}",
            f"{ratio(results, runs[TRL]):.3f}",
            f"{losses[side]:.4f}" if side in losses else "-",
            f"{median([r.before_first_s for r in results]):.1f}",
            f"{median([r.after_last_s for r in results]):.1f}",
            f"{median([r.wall_s for r in results]):.1f}",
            f"{median([r.peak_rss_mib for r in results]):,.0f}",
        ])  # fmt: skip
    header = ["side", "tokens/s", "vs TRL", "held-out loss", "to 1st step s", "after last s",
              "process s", "peak RSS MiB"]  # fmt: skip
    return table(title, header, rows)


def g2p_part(
    data: LmData, recipe: Recipe, repeats: int, peers: str
) -> tuple[str, dict[str, float]]:
    sides = [TRAINFORGE, TRL, HF]
    differs = set(equal_batching_sets()) - {"data.options.packing"}
    if differs:  # trainforge's default batching is not the padded one: measure it too
        sides.insert(1, TRAINFORGE_DEFAULT)
    runs = rounds(data, data.g2p_model, recipe, sides, repeats, "g2p", peers)
    probe = probe_set(data)
    losses = {side: probe_loss(results[-1].model_dir, probe) for side, results in runs.items()}
    title = (
        f"G2P model (config/g2p_cmudict.yaml's, {data.num_examples:,} words, "
        f"{data.mean_tokens:.1f} tokens each): {recipe.steps} steps of {recipe.batch}, median of "
        f"{repeats} alternating rounds; tokens/s over steps 2..{recipe.steps}; trainforge's "
        f"default batching {'differs' if differs else 'is the padded one (no grouping option)'}"
    )
    default_side = TRAINFORGE_DEFAULT if differs else TRAINFORGE
    ratios = {
        "lm_vs_trl_sft": ratio(runs[TRAINFORGE], runs[TRL]),
        "lm_defaults_vs_trl_defaults": ratio(runs[default_side], runs[TRL]),
        "lm_vs_hf_trainer": ratio(runs[TRAINFORGE], runs[HF]),
        "lm_defaults_loss_delta": losses[default_side] - losses[TRL],
    }
    for side, key in ((TRAINFORGE, "trainforge"), (TRL, "trl"), (HF, "hf")):
        ratios[f"lm_{key}_before_first_step_s"] = median([r.before_first_s for r in runs[side]])
        ratios[f"lm_{key}_after_last_step_s"] = median([r.after_last_s for r in runs[side]])
        ratios[f"lm_{key}_process_s"] = median([r.wall_s for r in runs[side]])
    return side_table(title, runs, losses), ratios


def gemma_part(
    data: LmData, recipe: Recipe, repeats: int, shape: dict[str, Any], peers: str
) -> tuple[str, dict[str, float]]:
    model = gemma_model(data, **shape)
    runs = rounds(data, model, recipe, [TRAINFORGE, TRL], repeats, "gemma", peers)
    from peers.lm_workload import num_parameters

    title = (
        f"Gemma-3-270m-shaped model ({num_parameters(model) / 1e6:.0f} M parameters, random "
        f"weights, vocabulary {json.loads((model / 'config.json').read_text())['vocab_size']:,}"
        f"): {recipe.steps} steps of {recipe.batch} on the CPU (a few steps at a small batch so "
        f"that it finishes), median of {repeats} alternating rounds"
    )
    rss = {side: median([r.peak_rss_mib for r in results]) for side, results in runs.items()}
    ratios = {
        "lm_vs_trl_sft_gemma": ratio(runs[TRAINFORGE], runs[TRL]),
        "lm_peak_memory_vs_trl": rss[TRAINFORGE] / rss[TRL],
    }
    return side_table(title, runs, {}), ratios


SETTINGS = (
    "settings: every side a process of its own, {threads} torch thread(s) (torch.set_num_threads"
    " and OMP_NUM_THREADS), fp32 on the CPU, AdamW fused (trainforge's default; the HF "
    "Trainer's adamw_torch_fused), lr {lr} cosine with {warmup} warm-up step(s), weight decay "
    "0.01, clip norm 1.0, loss on completion tokens (TRL completion_only_loss=True; HF labels "
    "-100 on the prompt), no logging, evaluation or checkpoints during training, the final "
    "model saved at the end on every side. Unavoidable differences: trainforge's run also "
    "writes its run folder, report and a closing validation of 64 words, and tokenizes the "
    "split at start-up where the peers read it pre-tokenized; weight decay skips "
    "biases and norms by each side's own rule. 'to 1st step': process start to the end of "
    "step 1; 'after last': end of the last step to process exit. Peers from their own venv "
    "({peers})."
)


def run(
    g2p: Recipe | None = None,
    gemma: Recipe | None = None,
    repeats: int = 2,
    gemma_repeats: int = 1,
    train_lines: int | None = None,
    gemma_shape: dict[str, Any] | None = None,
    peers: str | None = None,
) -> tuple[str, dict[str, float]]:
    """Both workloads; the defaults are `make bench`'s, the arguments the test's tiny ones.
    `peers`: the peers' interpreter (default: the venv `peers/venv.py` makes from the
    `bench` extra)."""
    from peers.venv import peer_python, versions

    peers = peers or str(peer_python())
    g2p = g2p or Recipe(steps=40, batch=128)
    gemma = gemma or Recipe(steps=4, batch=4, learning_rate=2e-5)
    with tempfile.TemporaryDirectory(prefix="trainforge-bench-lm-") as scratch:
        data = prepare(Path(scratch), train_lines)
        texts = [SETTINGS.format(threads=bench_threads(), lr=g2p.learning_rate,
                                 warmup=g2p.warmup_steps, peers=versions(Path(peers)))]  # fmt: skip
        text, ratios = g2p_part(data, g2p, repeats, peers)
        texts.append(text)
        if gemma_repeats:
            text, found = gemma_part(data, gemma, gemma_repeats, gemma_shape or {}, peers)
            texts.append(text)
            ratios.update(found)
    return "\n\n".join(texts), ratios


if __name__ == "__main__":
    print(run()[0])
