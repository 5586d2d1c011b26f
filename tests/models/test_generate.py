"""`trainforge generate`: a tiny chat model and a tiny plain one (fakes.tiny_lm), asked through
the real command in this process; the prompt in the training layout, the generation
config's stop tokens, side-by-side answers, a run folder and its base, the chat loop and the
refusals."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import torch

from fakes.in_process import run_main
from fakes.tiny_lm import lm_overrides
from trainforge.generate import answer as ans
from trainforge.generate import command
from trainforge.generate.sources import Settings, locate


@pytest.fixture
def bars_off():
    """The Hub's progress bars off, as `trainforge`'s quiet console turns them off at start-up
    (`observe.quiet`); in this process an earlier import may have come before its hook."""
    from huggingface_hub.utils import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )
    from transformers.utils import logging as hf_logging

    before = are_progress_bars_disabled(), hf_logging.is_progress_bar_enabled()
    disable_progress_bars()
    hf_logging.disable_progress_bar()  # it took the Hub's switch when it was imported
    yield
    if not before[0]:
        enable_progress_bars()
    if before[1]:
        hf_logging.enable_progress_bar()


def greedy_ids(folder: Path, prompt: str, max_new_tokens: int = 6) -> list[int]:
    """What the model continues the prompt with, stop tokens off, straight from transformers."""
    loaded = ans.load(locate(str(folder)), Settings())
    ids = ans.prompt_ids(loaded, [{"role": "user", "content": prompt}])
    out = loaded.model.generate(
        input_ids=torch.tensor([ids]), max_new_tokens=max_new_tokens, do_sample=False,
        eos_token_id=None, pad_token_id=loaded.tokenizer.pad_token_id,
    )  # fmt: skip
    return out[0, len(ids) :].tolist()


def test_a_chat_model_is_asked_through_its_template(tiny_llama_chat, single_thread):
    loaded = ans.load(locate(str(tiny_llama_chat)), Settings())
    ids = ans.prompt_ids(loaded, [{"role": "user", "content": "Say hello."}])
    text = loaded.tokenizer.decode(ids)
    assert loaded.chat and text.endswith("<|im_start|>user\nSay hello.<|im_end|>\n"
                                         "<|im_start|>assistant\n")  # fmt: skip
    assert loaded.stop_ids == [loaded.tokenizer.convert_tokens_to_ids("<|im_end|>")]


def test_generation_stops_at_a_listed_stop_token_that_is_not_the_eos(
    tiny_llama_chat, tmp_path, single_thread, bars_off
):
    """Gemma 3 lists `<end_of_turn>` beside `<eos>` in generation_config.eos_token_id: any
    listed id ends the answer, and sampling defaults a greedy call does not use stay quiet."""
    folder = tmp_path / "chat"
    shutil.copytree(tiny_llama_chat, folder)
    first, *rest = greedy_ids(folder, "Say hello.")
    tokenizer = ans.load(locate(str(folder)), Settings()).tokenizer
    assert first != tokenizer.eos_token_id and rest  # the model goes on without the list
    unlisted = run_main("generate", str(folder), "--prompt", "Say hello.", "--max_new_tokens", "6")
    assert unlisted.returncode == 0, unlisted.stderr
    assert unlisted.stdout.splitlines()[-1].strip()  # an answer of several tokens
    config = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    config.update(eos_token_id=[tokenizer.eos_token_id, first], do_sample=True,
                  temperature=0.7, top_p=0.95, top_k=64)  # fmt: skip
    (folder / "generation_config.json").write_text(json.dumps(config), encoding="utf-8")
    ran = run_main("generate", str(folder), "--prompt", "Say hello.", "--json")
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr == ""  # no transformers warning about unused sampling flags
    (block,) = json.loads(ran.stdout)["answers"]
    assert block["answers"] == {str(folder): ""}  # stopped at once, the stop token dropped
    assert tokenizer.convert_ids_to_tokens(first) in json.loads(ran.stdout)["models"][0]


def test_a_plain_model_uses_the_prompt_template_and_answers_greedily(tiny_gpt2, single_thread):
    loaded = ans.load(locate(str(tiny_gpt2)), Settings(max_new_tokens=5))
    assert not loaded.chat and loaded.prompt_template == "{prompt}\n"
    ids = ans.prompt_ids(loaded, [{"role": "user", "content": "What is 2 plus 3?"}])
    assert loaded.tokenizer.decode(ids).endswith("What is 2 plus 3?\n")
    expected = loaded.tokenizer.decode(greedy_ids(tiny_gpt2, "What is 2 plus 3?", 5)).strip()
    said = ans.answer(loaded, [{"role": "user", "content": "What is 2 plus 3?"}], Settings())
    assert said == expected != ""


def test_two_models_answer_the_same_prompts_side_by_side(
    tiny_llama_chat, tiny_gpt2, tmp_path, single_thread, bars_off
):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Say hello.\n\nWhat is 1 plus 2?\n", encoding="utf-8")
    ran = run_main(
        "generate", str(tiny_llama_chat), str(tiny_gpt2), "--prompt-file", str(prompts),
        "--max_new_tokens", "4",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr == ""
    out = ran.stdout
    assert "[1] Say hello." in out and "[2] What is 1 plus 2?" in out and "[3]" not in out
    block = out.split("[2] What is 1 plus 2?")[1].splitlines()[1:3]
    assert [line.split()[0] for line in block] == [str(tiny_llama_chat), str(tiny_gpt2)]
    for model, line in zip((tiny_llama_chat, tiny_gpt2), block, strict=True):
        alone = command.run(command.Request([str(model)], ["What is 1 plus 2?"],
                                            settings=Settings(max_new_tokens=4)))  # fmt: skip
        assert line.split(None, 1)[1:] == [alone["answers"][0]["answers"][str(model)]]


@pytest.fixture(scope="module")
def tuned_run(tmp_path_factory, tiny_gpt2, lm_corpus) -> Path:
    """A finished two-step full fine-tune with its own prompt template, in a project."""
    project = tmp_path_factory.mktemp("project")
    sets = lm_overrides(
        tiny_gpt2, lm_corpus["json"], **{
            "training.max_steps": 2, "data.options.prompt_template": '"Q: {prompt}\\nA: "',
            "task.max_new_tokens": 3, "evaluation.eval_steps": 2,
        },
    )  # fmt: skip
    (project / "tuned.yaml").write_text("task:\n  kind: causal-lm\n", encoding="utf-8")
    argv = ["train", "tuned.yaml", "--profile", "cpu"]
    for item in sets:
        argv += ["--set", item]
    ran = run_main(*argv, cwd=project)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr
    return project / "runs" / "tuned"


def test_a_run_folder_answers_with_its_model_beside_its_base(tuned_run, tiny_gpt2, single_thread):
    result = command.run(command.Request([str(tuned_run)], ["What is 1 plus 1?"],
                                         compare=["base"]))  # fmt: skip
    tuned, base = result["models"]
    assert f"{tuned_run / 'model'}" in tuned and "prompt_template 'Q: {prompt}\\nA: '" in tuned
    assert str(tiny_gpt2) in base and "prompt_template '{prompt}\\n'" in base
    said = result["answers"][0]["answers"]
    assert list(said) == [str(tuned_run), f"base ({tiny_gpt2})"]
    # the run's max_new_tokens (3) bounds its answers
    loaded = ans.load(locate(str(tuned_run)), Settings())
    assert loaded.max_new_tokens == 3
    assert len(loaded.tokenizer(said[str(tuned_run)])["input_ids"]) <= 3 + 1


def test_the_chat_loop_keeps_the_conversation(tiny_llama_chat, capsys, single_thread):
    request = command.Request([str(tiny_llama_chat)], chat=True,
                              settings=Settings(max_new_tokens=3))  # fmt: skip
    result = command.run(request, stdin=io.StringIO("Say hello.\nAgain, louder.\n\n"))
    assert result["turns"] == 2
    roles = [m["role"] for m in result["conversation"]]
    assert roles == ["user", "assistant", "user", "assistant"]
    out = capsys.readouterr().out
    assert out.count("model> ") == 2


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["missing-model", "--prompt", "x"], "missing-model: no such model folder"),
        (["MODEL"], "nothing to ask"),
        (["MODEL", "--chat", "--prompt", "x"], "--chat reads its prompts from the terminal"),
        (["MODEL", "--prompt", "x", "--compare", "base"], "records no base model"),
        (["EMPTY", "--prompt", "x"], "not a model folder, adapter folder or run folder"),
    ],
)
def test_refusals_are_one_line_with_the_fix(argv, words, tiny_gpt2, tmp_path):
    (tmp_path / "empty").mkdir()
    swap = {"MODEL": str(tiny_gpt2), "EMPTY": str(tmp_path / "empty")}
    ran = run_main("generate", *[swap.get(a, a) for a in argv], cwd=tmp_path)
    assert ran.returncode == 2 and ran.stdout == ""
    (line,) = ran.stderr.splitlines()
    assert words in line and ". " in line  # the problem, then the fix


def train_lora(project: Path, model: Path, corpus: Path, name: str, **sets) -> Path:
    """A two-step LoRA run of the tiny model in `project` (its adapter kept unmerged)."""
    (project / f"{name}.yaml").write_text("task:\n  kind: causal-lm\n", encoding="utf-8")
    base = {"training.max_steps": 2, "evaluation.eval_steps": 2, "task.max_new_tokens": 3,
            "lora.enabled": "true", "lora.merge_adapter": "false", "lora.r": 4,
            "optimizer.learning_rate": 0.05, **sets}  # fmt: skip
    argv = ["train", f"{name}.yaml", "--profile", "cpu"]
    for item in lm_overrides(model, corpus, **base):
        argv += ["--set", item]
    ran = run_main(*argv, cwd=project)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr
    return project / "runs" / name


def test_a_lora_run_answers_from_its_adapter_or_its_checkpoint(
    tmp_path, tiny_gpt2, lm_corpus, single_thread
):
    """A finished LoRA run: its adapter on its base; one stopped before its final model: its
    newest checkpoint (LoRA layers included) on its base. Both differ from the base alone."""
    finished = train_lora(tmp_path, tiny_gpt2, lm_corpus["json"], "lora")
    assert not (finished / "model").exists() and (finished / "adapter").is_dir()
    unfinished = train_lora(tmp_path, tiny_gpt2, lm_corpus["json"], "stopped", **{
        "checkpoint.save_final_model": "false", "checkpoint.save_steps": 2,
    })  # fmt: skip
    assert not (unfinished / "adapter").exists()
    prompt = [{"role": "user", "content": "What is 1 plus 2?"}]
    logits = {}
    for label, where in (("base", tiny_gpt2), ("adapter", finished), ("checkpoint", unfinished)):
        loaded = ans.load(locate(str(where)), Settings())
        ids = torch.tensor([ans.prompt_ids(loaded, prompt)])
        with torch.no_grad():
            logits[label] = loaded.model(input_ids=ids).logits[0, -1]
        if label == "adapter":
            assert loaded.source.adapter_dir == finished / "adapter"
        if label == "checkpoint":
            assert loaded.source.checkpoint.parent.name == "checkpoint-2"
    assert not torch.allclose(logits["adapter"], logits["base"])
    assert not torch.allclose(logits["checkpoint"], logits["base"])


def test_a_gemma_3_id_in_the_cache_answers_and_stops_at_end_of_turn(
    hf_cache, monkeypatch, tmp_path, single_thread, bars_off
):
    """By id, offline, from huggingface_hub's cache: Gemma 3's own turns, and both of its
    generation config's stop tokens."""
    from huggingface_hub import constants

    for name, value in (("HF_HUB_CACHE", str(hf_cache.root)), ("HF_HUB_OFFLINE", "1")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_cache.root))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)  # no local folder of that name: the id is an id
    repo_id = hf_cache.repo_id("gemma3")
    loaded = ans.load(locate(repo_id), Settings(max_new_tokens=3))
    assert loaded.chat and loaded.source.model_dir.parent.name == "snapshots"
    ids = ans.prompt_ids(loaded, [{"role": "user", "content": "Say hello."}])
    assert loaded.tokenizer.decode(ids).endswith("<start_of_turn>model\n")
    stops = loaded.tokenizer.convert_ids_to_tokens(loaded.stop_ids)
    assert set(stops) == {"<eos>", "<end_of_turn>"}
    ran = run_main("generate", repo_id, "--prompt", "Say hello.", "--max_new_tokens", "3",
                   cwd=tmp_path, env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert f"model {repo_id}: " in ran.stdout and "stops at <eos>, <end_of_turn>" in ran.stdout
    missing = run_main("generate", "google/absent-model", "--prompt", "x", cwd=tmp_path,
                       env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert missing.returncode == 2 and len(missing.stderr.splitlines()) == 1
