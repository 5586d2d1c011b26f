"""The keyed sampler on a real journal, without training: a trial's point is a function of
(seed, trial number), a point the journal holds is never drawn again, a finite space runs
out instead of repeating."""

from __future__ import annotations

import os

from trainforge.sweep import study as studies
from trainforge.sweep.space import parse_space
from trainforge.sweep.study import SweepFolder

CONTINUOUS = {
    "params": {
        "optimizer.learning_rate": {"log_uniform": [1.0e-4, 1.0e-2]},
        "model.mlp_dropout": {"uniform": [0.0, 0.2]},
    }
}
FINITE = {
    "params": {
        "model.embedding_dim": {"choice": [16, 32, 64]},
        "model.num_layers": {"int": [1, 2]},
    }
}


def _request(space: dict, trials: int, seed: int = 0) -> dict:
    return {"space": space, "trials": trials, "metric": "accuracy", "direction": "maximize",
            "pruner": "none", "seed": seed}  # fmt: skip


def _claim_all(folder: SweepFolder, request: dict, workers: int) -> dict[int, dict]:
    """Claim trials round-robin from `workers` study objects (as K processes would), telling
    each trial complete; trial number -> params."""
    space, problems = parse_space(request["space"], "space")
    assert not problems
    opened = [studies.open_study(folder, request) for _ in range(workers)]
    drawn: dict[int, dict] = {}
    turn = 0
    while True:
        study = opened[turn % workers]
        claimed = studies.claim(folder, study, request["trials"], space)
        if claimed is None:
            return drawn
        trial, values, lease = claimed
        os.close(lease)
        drawn[trial.number] = values
        study.tell(trial, 0.5)
        turn += 1


def test_points_depend_on_seed_and_trial_number_only(tmp_path):
    alone = _claim_all(SweepFolder(tmp_path / "one"), _request(CONTINUOUS, 9), 1)
    three = _claim_all(SweepFolder(tmp_path / "three"), _request(CONTINUOUS, 9), 3)
    assert len(alone) == 9 and alone == three
    assert len({tuple(sorted(p.items())) for p in alone.values()}) == 9
    other = _claim_all(SweepFolder(tmp_path / "seed1"), _request(CONTINUOUS, 9, seed=1), 1)
    assert other[0] != alone[0]


def test_a_finite_space_is_drawn_once_each_and_then_runs_out(tmp_path):
    folder = SweepFolder(tmp_path / "finite")
    drawn = _claim_all(folder, _request(FINITE, 8), 2)
    points = {tuple(sorted(p.items())) for p in drawn.values()}
    assert len(drawn) == 6 and len(points) == 6  # 3 x 2 points, then no 7th claim


def test_optunas_retry_of_a_dead_trial_is_the_one_repeat(tmp_path):
    folder = SweepFolder(tmp_path / "retry")
    request = _request(CONTINUOUS, 3)
    space, _ = parse_space(request["space"], "space")
    study = studies.open_study(folder, request)
    trial, values, lease = studies.claim(folder, study, 3, space)
    os.close(lease)  # the worker died: its lease is free, the trial still RUNNING
    retry, again, lease = studies.claim(folder, study, 3, space)
    os.close(lease)
    assert again == values and retry.number == trial.number + 1
    assert studies.root_number(study._storage.get_trial(retry._trial_id)) == trial.number


def test_after_the_start_up_trials_tpe_draws_and_still_never_repeats(tmp_path):
    folder = SweepFolder(tmp_path / "tpe")
    drawn = _claim_all(folder, _request(CONTINUOUS, 14), 2)
    assert len(drawn) == 14
    assert len({tuple(sorted(p.items())) for p in drawn.values()}) == 14
    study = studies.open_study(folder, _request(CONTINUOUS, 14))
    tpe = [t for t in study.trials if t.number >= 10]
    # TPE with the constant liar records its relative draw on the trial.
    assert all(any(k.startswith("tpe:relative_params") for k in t.system_attrs) for t in tpe)
