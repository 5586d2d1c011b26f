"""`trainforge generate MODEL_OR_RUN`: ask a causal LM, as it was trained to be asked.

Owns which model a name means for generation (`sources`), how a prompt becomes the model's
input and the generation settings (`answer`), and the command: prompts, chat, side-by-side
answers, one block per prompt or JSON for the web app's Try it (`command`).

Which model: a Hugging Face model folder (`models/NAME`, any path), a Hub id (`org/name[@rev]`,
through huggingface_hub's cache: `models.hub`), a LoRA adapter folder
(with the base model it names), or a causal-lm run folder: its `model/` (the final model, or
the merged one), else its `adapter/` on its base (`models.hf.init_from_folders`, the answer
`model.init_from` uses for a causal-lm run); a run that never finished is read from the
weights `run.weights.run_weights` chooses (best, else newest checkpoint) on its base model.
`base` as a second model (`--compare base`) is the base model the first one records.

The prompt: the model's own chat template when it has one (and the run did not turn it off
with `data.options.use_chat_template: false`), else the `prompt_template` the run trained
with (its resolved config), else `{prompt}\\n`, each after the tokenizer's BOS, as
`data.text.encode` renders training examples, so the model sees its training layout.

Generation: the model's generation config, with every id of its `eos_token_id` (an int or a
list: Gemma 3 lists `<end_of_turn>` beside `<eos>`) and the tokenizer's EOS as stop tokens;
greedy unless `--temperature` is given. The sampling fields a greedy call does not use are
cleared on the loaded model's own generation config, so transformers has nothing to warn about.

Library considered: transformers' `TextGenerationPipeline` renders chat templates and
generates too, but it keeps neither the training prompt layout (BOS + `prompt_template`) nor
the run folder's choice of weights, and reports through its own warnings; `model.generate`
with the tokenizer is the part of it used here.
"""
