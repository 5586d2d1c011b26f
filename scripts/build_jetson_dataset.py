"""Build example_datasets/jetson_training.json: question/answer records about training on a
Jetson with trainforge, written from the project's own facts.

Sources, all in this repository: the run-config schema (every field's description and
default, as in docs/configuration.md), the built-in hardware profiles (each setting with the
comment that names its source), and the Jetson guide, the DGX Spark plan and the README
(hand-written facts below). Most records are prompt/response pairs; the guide's launch flow
is also written as multi-turn chat `messages`.

    python scripts/build_jetson_dataset.py [--out example_datasets/jetson_training.json]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from trainforge.config.schema import RunConfig, leaf_paths
from trainforge.profiles import list_profiles, load_profile

REPO = Path(__file__).resolve().parents[1]

GUIDE_FACTS = [
    (
        "Why can't I pip install PyTorch from PyPI on a Jetson?",
        "JetPack ships custom PyTorch builds for the Jetson's GPU that PyPI does not serve. "
        "Install "
        "NVIDIA's wheel matching your JetPack version before training.",
    ),
    (
        "How do I find the right PyTorch wheel for my JetPack version?",
        "Run `python scripts/jetson_torch_install.py` (or `trainforge jetson-wheel`). It detects "
        "the "
        "JetPack version and prints the pip install commands for NVIDIA's torch, torchvision and "
        "torchaudio builds.",
    ),
    (
        "Where does NVIDIA publish the Jetson PyTorch wheels?",
        "On NVIDIA's Jetson redist index, "
        "https://developer.download.nvidia.com/compute/redist/jp/, "
        "one folder per JetPack version.",
    ),
    (
        "I upgraded JetPack. What do I need to do for training?",
        "Rerun `scripts/jetson_torch_install.py` (or `trainforge jetson-wheel`) and install the "
        "wheel "
        "that matches the new CUDA/JetPack combination.",
    ),
    (
        "Can I ask for the wheel of another JetPack version than the one installed?",
        "Yes: `trainforge jetson-wheel --jetpack 6.0` prints the commands for JetPack 6.0.",
    ),
    (
        "Where does the Jetson training profile live?",
        "In `config/jetson_training.json`. It names the dataset `example_datasets/jetson_training."
        "json`, 1 epoch, batch size 1, learning rate 2.5e-4 and training_arguments for gradient "
        "accumulation, checkpointing and single-worker loading.",
    ),
    (
        "What learning rate does the Jetson training profile use?",
        "2.5e-4, with batch size 1 and 1 epoch.",
    ),
    (
        "How many gradient accumulation steps does config/jetson_training.json use?",
        "4: with batch size 1 each optimizer step sees 4 examples.",
    ),
    (
        "Why does the Jetson profile use gradient checkpointing?",
        "It recomputes activations during the backward pass instead of storing them, which keeps "
        "GPU memory under control on a board that shares its memory with the CPU.",
    ),
    (
        "How many data loader workers does the Jetson profile use?",
        "One (`dataloader_num_workers: 1`), so loading does not compete with training for the "
        "board's few CPU cores and its memory.",
    ),
    (
        "What is the swap_directory in the Jetson profile for?",
        "It names a folder (`outputs/jetson_training_swap`) for temporary state; trainforge "
        "creates "
        "it on demand when the run starts.",
    ),
    (
        "What are the notes in config/jetson_training.json?",
        "A short text that reminds you what the Jetson defaults prioritise: low GPU memory through "
        "batch size 1, gradient accumulation, checkpointing and one worker.",
    ),
    (
        "What does device_preference do in the Jetson profile?",
        "It picks the training device: auto (CUDA when available, else CPU), cuda, mps or cpu. It "
        "maps to training.device.",
    ),
    (
        "How do I fine-tune a model with the Jetson profile?",
        "Put a Hugging Face model folder under models/, then run `trainforge train "
        "config/jetson_training.json --base-model models/NAME --output-name NEW`.",
    ),
    (
        "Where does the fine-tuned model go?",
        "To `models/<output-name>/`, a Hugging Face folder written with save_pretrained "
        "(safetensors) plus the tokenizer and a trainforge.json summary; the run folder under "
        "runs/ "
        "keeps checkpoints and metrics.",
    ),
    (
        "Can I replace an existing output model?",
        "Only with `--overwrite`; without it trainforge refuses to write over "
        "models/<output-name>.",
    ),
    (
        "Which output names are allowed?",
        "Plain folder names: no '/', no '\\\\', no '..' and no leading dot, e.g. jetson-tuned.",
    ),
    (
        "Does the base model have to be downloaded first?",
        "Yes. Base models are read offline from folders under models/; nothing is downloaded "
        "during training.",
    ),
    (
        "How can I get a model to try the pipeline without downloading one?",
        "`trainforge models init tiny --arch gpt2 --size tiny --corpus "
        "example_datasets/jetson_training.json` writes a small randomly initialised model with a "
        "tokenizer trained on that file.",
    ),
    (
        "How do I see which models are available?",
        "`trainforge models list` shows every folder under models/ with its architecture, "
        "parameter count and size on disk.",
    ),
    (
        "What data formats can I fine-tune on?",
        "JSON or JSONL records with prompt and response, chat records with messages (rendered with "
        "the tokenizer's chat template), and TSV files with source<TAB>target per line.",
    ),
    (
        "Is the loss computed on the prompt tokens?",
        "No. Prompt tokens get label -100 and only the response tokens are learned.",
    ),
    (
        "What happens to examples longer than max_seq_length?",
        "They keep their first max_seq_length tokens and are counted as truncated; one with no "
        "response token left is dropped and counted. The counts are printed and saved in "
        "trainforge.json.",
    ),
    (
        "What does packing do?",
        "`data.packing: true` concatenates examples into rows of up to max_seq_length tokens so "
        "fewer padding tokens are computed.",
    ),
    (
        "Can I train only a LoRA adapter?",
        "Yes: set lora.enabled: true with r, lora_alpha, lora_dropout and target_modules. Only the "
        "adapter weights train; lora.merge_adapter: true merges them into the base at the end.",
    ),
    (
        "How do I resume an interrupted Jetson run?",
        "Run the same command with `--resume auto`: trainforge restarts from the newest verified "
        "checkpoint, at the exact next batch.",
    ),
    (
        "What happens when I press Ctrl+C during training?",
        "The current step finishes, a checkpoint named checkpoint_interrupted is saved and the "
        "command exits with code 130; `--resume auto` continues from it.",
    ),
    (
        "How do I check a config without training?",
        "`trainforge validate config/jetson_training.json` prints OK or every problem with the "
        "field, the bad value and the fix.",
    ),
    (
        "How do I see where each config value comes from?",
        "`trainforge config show config/jetson_training.json` prints every resolved field and its "
        "source: default, profile, file or flag.",
    ),
    (
        "What happens if I misspell a training argument?",
        "trainforge stops with an error naming the unknown argument and the nearest valid name, "
        "e.g. did you mean gradient_accumulation_steps?",
    ),
    (
        "Which platform does trainforge detect on my board?",
        "`trainforge detect` prints the Jetson model with its L4T and JetPack version and the "
        "profile that profile: auto picks.",
    ),
    (
        "Why is fp16 the default precision on a Jetson?",
        "Orin boards have 8 to 64 GB of memory shared by CPU and GPU; half precision halves "
        "activation memory and Orin's tensor cores run FP16 fast.",
    ),
    (
        "Can I train with fp16 on the CPU?",
        "No; fp16 autocast needs CUDA. On a CPU trainforge uses fp32 and validation rejects fp16.",
    ),
    (
        "What is the DGX Spark?",
        "An NVIDIA desktop system with an ARM CPU and a Blackwell GPU sharing 128 GB of unified "
        "memory.",
    ),
    (
        "Why did Unsloth fail on the DGX Spark?",
        "Standard pip builds lack ARM64 plus Blackwell support, so Unsloth could not find a torch "
        "accelerator. The fix is a container with CUDA 13, Triton and xformers built for "
        "Blackwell.",
    ),
    (
        "Why not use uv inside the DGX Spark container?",
        "`uv run` creates its own .venv from PyPI builds and ignores the Blackwell-compatible "
        "packages in the container's system Python, bringing back the GPU detection error.",
    ),
    (
        "How often does the DGX Spark profile save checkpoints?",
        "Every 500 steps, keeping at most 5 periodic checkpoints (save_total_limit 5).",
    ),
    (
        "How do I keep training data safe when the DGX container stops?",
        "Mount the project, the Hugging Face cache and the outputs from the host as volumes; "
        "checkpoints written there survive the container.",
    ),
    (
        "What is G2P?",
        "Grapheme-to-phoneme conversion: turning a written word into its pronunciation, e.g. "
        "HELLO into HH AH L OW.",
    ),
    (
        "How is the G2P data set split?",
        "By word, with a fixed hash of each word: 90% train, 5% validation, 5% test, so no word's "
        "pronunciation is seen in training and then tested.",
    ),
    (
        "How is G2P quality measured?",
        "By phoneme error rate (edit distance over phonemes divided by reference phonemes) and "
        "word error rate (share of words with any error), from greedy decoding.",
    ),
    (
        "What PER does the literature report on CMUdict?",
        "About 5.2% PER and 22% WER for a Transformer (Yolchuyeva et al., 2019).",
    ),
    (
        "How do I run the G2P flow?",
        "`trainforge train config/g2p_cmudict.yaml`: it creates a small model under models/ if "
        "missing, trains on the CMUdict TSV split and reports per and wer on validation.",
    ),
    (
        "What does trainforge write in a run folder?",
        "checkpoints/, TensorBoard events, metrics.jsonl, config.resolved.yaml, summary.json and "
        "the final model.",
    ),
    (
        "Are checkpoints safe to load?",
        "Yes: weights are safetensors and the rest is read with torch.load(weights_only=True), so "
        "loading never runs code from the file.",
    ),
    (
        "What does a checkpoint's manifest do?",
        "It holds the SHA-256 of every file and is written last; a folder without a valid manifest "
        "is not used for resuming.",
    ),
    (
        "How do I watch training curves?",
        "`tensorboard --logdir runs/<run-name>/tensorboard`, or read metrics.jsonl.",
    ),
    (
        "Which profiles ship with trainforge?",
        "cpu, jetson-orin, workstation-24gb, dgx-spark and hpc-a100; `trainforge profiles` lists "
        "them.",
    ),
    (
        "What does profile: auto do?",
        "It detects the hardware and picks the matching built-in profile, e.g. jetson-orin on a "
        "Jetson Orin.",
    ),
    (
        "In what order are settings layered?",
        "Built-in hardware profile, then the run config file, then command-line flags; later "
        "layers win.",
    ),
]

CHATS = [
    [
        ("user", "I want to fine-tune a model on my Jetson. Where do I start?"),
        (
            "assistant",
            "Install NVIDIA's PyTorch wheel for your JetPack first: run "
            "`python scripts/jetson_torch_install.py` and copy the pip command it prints.",
        ),
        ("user", "Done. Now what?"),
        (
            "assistant",
            "Put the base model under models/ and run `trainforge train "
            "config/jetson_training.json --base-model models/NAME --output-name my-model`.",
        ),
    ],
    [
        ("user", "My Jetson run ran out of memory."),
        (
            "assistant",
            "Keep batch size 1 and raise gradient_accumulation_steps instead, keep "
            "gradient checkpointing on, and lower data.max_seq_length.",
        ),
        ("user", "Will accumulation change the result?"),
        (
            "assistant",
            "No: trainforge weights every micro-batch by its target tokens, so 4 "
            "accumulated batches of 1 give the same update as one batch of 4.",
        ),
    ],
    [
        ("system", "You answer questions about trainforge briefly."),
        ("user", "How do I continue a run after a power cut?"),
        (
            "assistant",
            "Run the same command with `--resume auto`; it picks the newest checkpoint "
            "whose manifest verifies.",
        ),
    ],
    [
        ("user", "Which file does the Jetson dialog autofill as the dataset?"),
        ("assistant", "example_datasets/jetson_training.json."),
        ("user", "And the other defaults?"),
        (
            "assistant",
            "1 epoch, learning rate 2.5e-4 and batch size 1 from "
            "config/jetson_training.json, plus its notes.",
        ),
    ],
    [
        ("user", "Can I train on the CPU to test my setup?"),
        (
            "assistant",
            "Yes: `trainforge models init tiny --arch gpt2 --size tiny --corpus "
            "example_datasets/jetson_training.json`, then train config/jetson_training.json with "
            "--base-model models/tiny --profile cpu.",
        ),
    ],
    [
        ("user", "How do I share the result with a Hugging Face script?"),
        (
            "assistant",
            "Load models/<output-name> with AutoModelForCausalLM.from_pretrained and "
            "AutoTokenizer.from_pretrained; it is a standard save_pretrained folder.",
        ),
        ("user", "And a LoRA run?"),
        (
            "assistant",
            "Without merging, the output is a peft adapter folder: load it with "
            "peft.AutoPeftModelForCausalLM.from_pretrained.",
        ),
    ],
]

COMMENT = re.compile(r"^\s*([a-z_]+):\s*([^#]+?)\s*#\s*(.+)$")


def schema_records() -> list[dict]:
    out = []
    for path in leaf_paths(RunConfig):
        if "." not in path:
            continue
        section, field = path.split(".", 1)
        info = RunConfig.model_fields[section].annotation.model_fields[field]
        value = info.get_default(call_default_factory=True)
        default = "null" if value is None else json.dumps(value)
        text = (info.description or "").strip()
        out.append(
            {
                "prompt": f"What does the trainforge config field {path} set?",
                "response": f"{text} Default: {default}.",
            }
        )
        out.append(
            {
                "prompt": f"Which trainforge config field controls this: {text.rstrip('.')}?",
                "response": f"{path} (default {default}).",
            }
        )
    return out


def profile_records() -> list[dict]:
    out = []
    for name in list_profiles():
        profile = load_profile(name)
        out.append(
            {
                "prompt": f"What is the {name} hardware profile for?",
                "response": f"{profile.description} {profile.notes}".strip(),
            }
        )
        section = None
        for line in profile.source_text().splitlines():
            header = re.match(r"^  ([a-z_]+):\s*$", line)
            if header:
                section = header.group(1)
            match = COMMENT.match(line)
            if section and match and line.startswith("    "):
                key, value, why = match.groups()
                out.append(
                    {
                        "prompt": f"What {section}.{key} does the {name} profile set, and why?",
                        "response": f"{value.strip()}. Source: {why.strip()}",
                    }
                )
    return out


def chat_records() -> list[dict]:
    return [{"messages": [{"role": r, "content": c} for r, c in chat]} for chat in CHATS]


def build() -> list[dict]:
    records = [{"prompt": p, "response": r} for p, r in GUIDE_FACTS]
    records += profile_records() + schema_records() + chat_records()
    seen, unique = set(), []
    for record in records:
        key = record.get("prompt") or json.dumps(record["messages"])
        if key not in seen:
            seen.add(key)
            unique.append(record)
    return unique


def render(records: list[dict]) -> str:
    """The file's exact text (the test compares the shipped file with it)."""
    return json.dumps(records, indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "example_datasets/jetson_training.json")
    args = parser.parse_args()
    records = build()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(records), encoding="utf-8")
    print(f"wrote {len(records)} records to {args.out}")


if __name__ == "__main__":
    main()
