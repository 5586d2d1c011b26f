"""Tiny Hugging Face models for the text-task observability tests (see fakes.tiny_lm)."""

from fakes.tiny_lm import lm_corpus, single_thread, tiny_gpt2  # noqa: F401
