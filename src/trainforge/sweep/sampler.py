"""The sweep's sampler: each trial's point is a function of (seed, trial number), and a point
the study already holds is never drawn again.

Optuna's samplers hold one random stream per sampler object: `TPESampler(seed=s)` built in
every process (each Slurm array task, each restart of the sweep) draws the same start-up
points again. `KeyedSampler` keeps no stream. It draws a trial's whole point at once
(`sample_relative` over the full space) with a sampler built for that trial alone:

- trials 0 to `n_startup - 1` (and any trial before that many have completed): Optuna's
  `RandomSampler`, seeded by a hash of (seed, trial number, attempt);
- after that: Optuna's `TPESampler`, multivariate, with the constant liar (so it steers away
  from the points that other workers are training), seeded the same way; in a study with
  several objectives it is TPE's multi-objective mode.

The point is then checked against every point in the journal (finished, running, failed or
waiting); one already there is drawn again with the next attempt's key. The caller draws
under the sweep's claim lock, so two workers never draw at the same time. A space of
choices and whole numbers with every point taken falls back to the first free point in
order; with none left `SpaceExhausted` is raised. Optuna's own retry of a dead trial has its
params fixed by the retry (`fixed_params`) and is the one repeat.

Random start-up points depend on (seed, trial number) alone, so a study draws the same ones
whatever the number of processes and restarts; TPE's points depend on the trials finished
when they are drawn as well.
"""

from __future__ import annotations

import hashlib
import itertools
import warnings
from collections.abc import Iterator
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler, RandomSampler, TPESampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

# Optuna's TPE default: ten random trials before the model steers.
N_STARTUP = 10
# Draws of one trial's point before a finite space is searched in order for a free point.
MAX_DRAWS = 64


class SpaceExhausted(Exception):
    """Every point of a finite space is in the study already."""


def trial_key(seed: int, number: int, attempt: int | str = 0) -> int:
    """A 32-bit seed for (sweep seed, trial number, attempt); the same in every process."""
    digest = hashlib.sha256(f"trainforge-sweep:{seed}:{number}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def point_key(params: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((name, repr(value)) for name, value in params.items()))


def taken_points(study: Study, number: int) -> set[tuple[tuple[str, str], ...]]:
    """Every point the study holds but trial `number`'s: drawn, running, failed or queued."""
    taken = set()
    for t in study.get_trials(deepcopy=False):
        if t.number == number:
            continue
        params = t.params or t.system_attrs.get("fixed_params") or {}
        if params:
            taken.add(point_key(params))
    return taken


class KeyedSampler(BaseSampler):
    def __init__(
        self, space: dict[str, BaseDistribution], seed: int, n_startup: int = N_STARTUP
    ) -> None:
        self.space = {k: d for k, d in space.items() if not d.single()}
        self.seed = seed
        self.n_startup = n_startup

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        if trial.system_attrs.get("fixed_params"):
            return {}  # a retry: its params are the dead trial's
        return dict(self.space)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space:
            return {}
        taken = taken_points(study, trial.number)
        for attempt in range(MAX_DRAWS):
            point = self._draw(study, trial, search_space, attempt)
            if point_key(point) not in taken:
                return point
        free = next((p for p in _every_point(search_space) if point_key(p) not in taken), None)
        if free is None:
            raise SpaceExhausted(f"all {len(taken)} points of the space are in the study")
        return free

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        # Only a name outside the sweep's space lands here; keyed by its name as well.
        key = trial_key(self.seed, trial.number, f"independent:{param_name}")
        return RandomSampler(seed=key).sample_independent(
            study, trial, param_name, param_distribution
        )

    def _draw(
        self, study: Study, trial: FrozenTrial, space: dict[str, BaseDistribution], attempt: int
    ) -> dict[str, Any]:
        key = trial_key(self.seed, trial.number, attempt)
        point: dict[str, Any] = {}
        if trial.number >= self.n_startup and self._completed(study) >= self.n_startup:
            with warnings.catch_warnings():  # multivariate TPE is marked experimental
                warnings.simplefilter("ignore")
                tpe = TPESampler(
                    seed=key, multivariate=True, constant_liar=True,
                    n_startup_trials=self.n_startup, warn_independent_sampling=False,
                )  # fmt: skip
                point = tpe.sample_relative(study, trial, space)
        rng = RandomSampler(seed=key)
        for name, dist in sorted(space.items()):
            if name not in point:
                point[name] = rng.sample_independent(study, trial, name, dist)
        return point

    @staticmethod
    def _completed(study: Study) -> int:
        return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def _every_point(space: dict[str, BaseDistribution]) -> Iterator[dict[str, Any]]:
    """The points of a finite space in order (nothing for a space with a continuous range)."""
    axes = []
    for dist in space.values():
        if isinstance(dist, CategoricalDistribution):
            axes.append(list(dist.choices))
        elif isinstance(dist, IntDistribution):
            axes.append(list(range(dist.low, dist.high + 1, dist.step)))
        else:
            return
    for values in itertools.product(*axes):
        yield dict(zip(space, values, strict=True))
