"""A toy optimizer added through the optimizer registry alone: SGD that counts its steps.

Importing this file registers `toy-counting-sgd`.
"""

from __future__ import annotations

import torch

from trainforge.registry import OPTIMIZERS

NAME = "toy-counting-sgd"


class CountingSGD(torch.optim.SGD):
    steps = 0

    def step(self, closure=None):
        CountingSGD.steps += 1
        return super().step(closure)


@OPTIMIZERS.register(NAME)
def build(groups, config, device, sharded):
    """SGD that counts its steps (a test's toy)."""
    return CountingSGD(groups, lr=config.learning_rate, momentum=config.momentum)
