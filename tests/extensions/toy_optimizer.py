"""A toy optimizer added through the optimizer registry alone: SGD that counts its steps.

Its own arguments (`optimizer.args`): momentum and nesterov, passed on to torch's SGD.
Importing this file registers `toy-counting-sgd`.
"""

from __future__ import annotations

import torch
from pydantic import Field

from trainforge.engine.optimizers import with_args
from trainforge.options import Options
from trainforge.registry import OPTIMIZERS

NAME = "toy-counting-sgd"


class CountingArgs(Options):
    momentum: float = Field(0.9, ge=0.0, lt=1.0, description="SGD momentum.")
    nesterov: bool = Field(False, description="Nesterov momentum.")


BUILT_WITH: list[CountingArgs] = []  # the arguments of every optimizer built


class CountingSGD(torch.optim.SGD):
    steps = 0

    def step(self, closure=None):
        CountingSGD.steps += 1
        return super().step(closure)


@OPTIMIZERS.register(NAME)
@with_args(CountingArgs)
def build(groups, config, device, sharded):
    """SGD that counts its steps (a test's toy)."""
    args: CountingArgs = config.args
    BUILT_WITH.append(args)
    return CountingSGD(
        groups, lr=config.learning_rate, momentum=args.momentum, nesterov=args.nesterov
    )
