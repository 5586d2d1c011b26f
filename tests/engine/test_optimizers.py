"""The optimizer registry: every name builds, keeps the decay groups, steps and round-trips."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from trainforge.config.errors import ConfigError
from trainforge.engine.batch_probe import StepRunner
from trainforge.engine.optimizers import build_optimizer
from trainforge.engine.trainer import Trainer
from trainforge.errors import UserError
from trainforge.registry import OPTIMIZERS

CPU = torch.device("cpu")
NAMES = [*OPTIMIZERS.names(), "torch.optim.RMSprop"]


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Tanh(), nn.Linear(16, 3))


def layout(optimizer: torch.optim.Optimizer, model: nn.Module) -> list[tuple[float, list[str]]]:
    names = {id(p): n for n, p in model.named_parameters()}
    return [
        (g["weight_decay"], [names[id(p)] for p in g["params"]]) for g in optimizer.param_groups
    ]


@pytest.mark.parametrize("name", NAMES)
def test_every_name_keeps_biases_and_norms_free_of_decay(name, points_config):
    model = tiny_model()
    config = points_config(**{"optimizer.name": name, "optimizer.weight_decay": 0.05})
    optimizer = build_optimizer(model, config.optimizer, CPU)
    assert layout(optimizer, model) == [
        (0.05, ["0.weight", "3.weight"]),
        (0.0, ["0.bias", "1.weight", "1.bias", "3.bias"]),
    ]


@pytest.mark.parametrize("name", NAMES)
def test_every_name_steps_and_round_trips_its_state(name, points_config):
    model = tiny_model()
    config = points_config(**{"optimizer.name": name, "optimizer.learning_rate": 0.01})
    optimizer = build_optimizer(model, config.optimizer, CPU)
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.randn(4, 8)).square().mean().backward()
    optimizer.step()
    assert all(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))

    state = copy.deepcopy(optimizer.state_dict())
    twin = tiny_model()
    twin.load_state_dict(model.state_dict())
    restored = build_optimizer(twin, config.optimizer, CPU)
    restored.load_state_dict(state)
    assert str(restored.state_dict()) == str(state)
    # the restored optimizer takes the same next step as the original
    x = torch.randn(4, 8)
    for m, o in ((model, optimizer), (twin, restored)):
        o.zero_grad()
        m(x).square().mean().backward()
        o.step()
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)


def test_adamw_is_the_default_and_fused_on_cpu(points_config):
    config = points_config()
    assert config.optimizer.name == "adamw"
    optimizer = build_optimizer(tiny_model(), config.optimizer, CPU)
    assert type(optimizer) is torch.optim.AdamW
    assert optimizer.defaults["fused"] is True
    sharded = build_optimizer(tiny_model(), config.optimizer, CPU, sharded=True)
    assert not sharded.defaults["fused"]


def test_sgd_uses_the_configured_momentum(points_config):
    config = points_config(**{"optimizer.name": "sgd", "optimizer.momentum": 0.5})
    optimizer = build_optimizer(tiny_model(), config.optimizer, CPU)
    assert type(optimizer) is torch.optim.SGD
    assert optimizer.defaults["momentum"] == 0.5


def test_a_class_path_builds_that_class(points_config):
    config = points_config(**{"optimizer.name": "torch.optim.RMSprop"})
    optimizer = build_optimizer(tiny_model(), config.optimizer, CPU)
    assert type(optimizer) is torch.optim.RMSprop
    assert optimizer.defaults["lr"] == config.optimizer.learning_rate


def test_an_unknown_name_is_one_config_error_with_the_known_names(points_config):
    with pytest.raises(ConfigError) as caught:
        points_config(**{"optimizer.name": "adamm"})
    line = str(caught.value)
    assert "\n" not in line
    assert "optimizer.name" in line and "'adamm'" in line
    assert all(name in line for name in OPTIMIZERS.names())


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("torch.optim.NoSuchThing", "cannot import"),
        ("no_such_module.Optimizer", "cannot import"),
        ("torch.nn.Linear", "not a torch.optim.Optimizer"),
    ],
)
def test_a_bad_class_path_is_one_user_error_at_build(path, expected, points_config):
    config = points_config(**{"optimizer.name": path})  # shaped like a path: accepted
    with pytest.raises(UserError) as caught:
        build_optimizer(tiny_model(), config.optimizer, CPU)
    line = caught.value.line()
    assert "\n" not in line and expected in line and path in line
    assert all(name in line for name in OPTIMIZERS.names())


class CountingSGD(torch.optim.SGD):
    steps = 0

    def step(self, closure=None):
        CountingSGD.steps += 1
        return super().step(closure)


@pytest.fixture
def toy_registered():
    @OPTIMIZERS.register("toy-sgd")
    def _toy(groups, config, device, sharded):
        return CountingSGD(groups, lr=config.learning_rate)

    CountingSGD.steps = 0
    yield "toy-sgd"
    OPTIMIZERS.unregister("toy-sgd")


def test_an_optimizer_registered_elsewhere_runs_a_real_fit(
    tmp_path, points_task, points_config, toy_registered
):
    config = points_config(
        **{
            "optimizer.name": toy_registered,
            "optimizer.learning_rate": 0.1,
            "training.max_steps": 4,
            "training.per_device_train_batch_size": 16,
        }
    )
    task = points_task(n=64, batch_size=16)
    before = [p.detach().clone() for p in task.model.parameters()]
    trainer = Trainer(task, config, run_dir=tmp_path, device=CPU, callbacks=[])
    assert type(trainer.optimizer) is CountingSGD
    trainer.fit()
    assert CountingSGD.steps == 4
    assert trainer.state.global_step == 4
    assert all(
        not torch.equal(a, p) for a, p in zip(before, trainer.model.parameters(), strict=True)
    )


@pytest.mark.parametrize("name", NAMES)
def test_trainer_and_batch_probe_build_the_same_groups(name, tmp_path, points_task, points_config):
    config = points_config(**{"optimizer.name": name})
    trainer = Trainer(points_task(), config, run_dir=tmp_path, device=CPU, callbacks=[])
    runner = StepRunner(points_task(), config, CPU)
    assert layout(trainer.optimizer, trainer.model) == layout(runner.optimizer, runner.model)
    assert type(trainer.optimizer) is type(runner.optimizer)
    assert trainer.optimizer.defaults == runner.optimizer.defaults
    runner.close()
