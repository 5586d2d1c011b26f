"""One workload, four ways to train it: trainforge, a plain PyTorch loop, PyTorch Lightning and
the Hugging Face Trainer. Each runner trains the same model from the same weights on the same
batches in the same order with the same AdamW, clipping and step count, and reports the time
between two optimizer steps (warm-up excluded) measured by one shared optimizer hook.
"""
