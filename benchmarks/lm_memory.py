"""Peak memory of the causal-LM loss: chunked head (trainforge) against the full logits.

Each side runs in its own fresh subprocess (peak RSS is per process, so the two never share
a high-water mark), one after the other in this run, on the same random Gemma-3-shaped model
built in-process (never downloaded) and the same batch: one training step (forward and
backward of the loss) and one evaluation pass under no_grad. The full side is the loss the
task had before: `F.cross_entropy(logits.float())` over the model's whole `[B, T, V]`
logits, with the accuracy's argmax over them.

Shapes:
- `head` (default): 2 layers, 64 wide, Gemma 3's 262,144-token vocabulary, so nearly all
  of the model is its head; batch 32 x 64 tokens, half of them prompt (label -100).
- `gemma-3-270m` (`TRAINFORGE_BENCH_LM_SHAPE=gemma-3-270m`): the published Gemma 3 270M
  text config (640 wide, 18 layers, 4 heads, 1 KV head, head_dim 256, intermediate 2048,
  sliding window 512, tied embeddings) at the G2P config's batch; minutes per step on a
  laptop CPU, so not the default.

Row: `lm_chunked_vs_full_peak_memory`, the chunked side's peak RSS over the full side's
(target <= 0.5).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

SHAPES = {
    "head": {"layers": 2, "width": 64, "heads": 1, "head_dim": 64, "ffn": 256, "batch": 32},
    "gemma-3-270m": {
        "layers": 18, "width": 640, "heads": 4, "head_dim": 256, "ffn": 2048, "batch": 128,
    },
}  # fmt: skip
VOCAB = 262_144
SEQ = 64


def _model(shape: dict):
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(
        vocab_size=VOCAB,
        hidden_size=shape["width"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=1,
        head_dim=shape["head_dim"],
        intermediate_size=shape["ffn"],
        sliding_window=512,
        max_position_embeddings=SEQ,
        tie_word_embeddings=True,
        use_cache=False,
    )
    torch.manual_seed(0)
    return Gemma3ForCausalLM(config)


def _full_loss(model, inputs, labels):
    import torch.nn.functional as F

    logits = model(**inputs).logits[:, :-1]
    targets = labels[:, 1:]
    loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        targets.reshape(-1),
        ignore_index=-100,
        reduction="sum",
    )
    correct = ((logits.argmax(-1) == targets) & (targets != -100)).sum()
    return loss, correct


def child(mode: str, shape_name: str) -> None:
    """One side: a training step and an evaluation pass; prints its peak RSS in bytes."""
    import torch

    from trainforge.tasks import lm_loss

    torch.set_num_threads(int(os.environ.get("TRAINFORGE_BENCH_THREADS", "2")))
    shape = SHAPES[shape_name]
    model = _model(shape).train()
    ids = torch.randint(0, VOCAB, (shape["batch"], SEQ))
    labels = ids.clone()
    labels[:, : SEQ // 2] = -100  # the prompt half: no loss there
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "use_cache": False}
    compute = lm_loss.next_token_loss if mode == "chunked" else _full_loss
    loss, _ = compute(model, inputs, labels)
    loss.backward()
    model.zero_grad(set_to_none=True)
    del loss
    model.eval()
    with torch.no_grad():
        eval_loss, _ = compute(model, inputs, labels)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    print(json.dumps({"peak_bytes": peak, "loss": float(eval_loss)}))


def _side(mode: str, shape_name: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, shape_name],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run() -> tuple[str, dict[str, float]]:
    shape_name = os.environ.get("TRAINFORGE_BENCH_LM_SHAPE", "head")
    shape = SHAPES[shape_name]
    full = _side("full", shape_name)
    chunked = _side("chunked", shape_name)
    ratio = chunked["peak_bytes"] / full["peak_bytes"]
    gib = 1024**3
    lines = [
        f"causal-LM loss memory: Gemma-3-shaped model ({shape_name}: {shape['layers']} layers, "
        f"{shape['width']} wide, vocabulary {VOCAB:,}), batch {shape['batch']} x {SEQ}, "
        "one training step + one evaluation pass, each side in a fresh process",
        f"{'side':<10}{'peak RSS GiB':>14}{'eval loss':>12}",
        f"{'full':<10}{full['peak_bytes'] / gib:>14.2f}{full['loss']:>12.2f}",
        f"{'chunked':<10}{chunked['peak_bytes'] / gib:>14.2f}{chunked['loss']:>12.2f}",
        f"chunked / full peak memory: {ratio:.2f}",
    ]
    return "\n".join(lines), {"lm_chunked_vs_full_peak_memory": ratio}


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        text, ratios = run()
        print(text)
