"""Tiny Hugging Face models for the causal-lm tests (made once per session, see fakes.tiny_lm)."""

from fakes.hf_cache import hf_cache  # noqa: F401
from fakes.tiny_lm import lm_corpus, single_thread, tiny_gpt2, tiny_llama_chat  # noqa: F401
