"""Pruning that sees every worker: a trial trained by one sweep process is pruned by the
reports another process's trials wrote to the shared journal (Optuna's successive halving,
ASHA, reads every trial's rung values from the storage)."""

from __future__ import annotations

import pytest

from fakes.sweeps import load_study, run_sweep, sweep_args

# Three points, drawn in this order by the keyed sampler with seed 0: 5e-3, 4e-3, then 1e-7,
# a rate at which the model barely moves (the test checks the order it relies on).
SPACE = "params:\n  optimizer.learning_rate: {choice: [1.0e-7, 5.0e-3, 4.0e-3]}\n"
FLAGS = ["--max_steps", "30", "--set", "evaluation.eval_steps=10", "--set",
         "schedule.warmup_epochs=0", "--set", "model.num_layers=1", "--set",
         "model.embedding_dim=32", "--metric", "loss", "--pruner", "asha"]  # fmt: skip


@pytest.mark.slow
def test_a_trial_of_one_worker_is_pruned_by_another_workers_reports(tmp_path, space_file):
    space = space_file(SPACE)
    first = run_sweep(tmp_path, sweep_args(space, 2, "asha", *FLAGS))  # worker A: 2 trials
    assert first.returncode == 0, first.stdout + first.stderr
    second = run_sweep(tmp_path, sweep_args(space, 3, "asha", *FLAGS))  # worker B: the third
    assert second.returncode == 0, second.stdout + second.stderr

    study = load_study(tmp_path / "runs" / "asha")
    a0, a1, b = study.trials
    assert [t.params["optimizer.learning_rate"] for t in study.trials] == [5e-3, 4e-3, 1e-7]
    assert a0.user_attrs["worker"] == a1.user_attrs["worker"] != b.user_attrs["worker"]
    assert (a0.state.name, a1.state.name, b.state.name) == ("COMPLETE", "COMPLETE", "PRUNED")
    # B stopped at its first validation: its rung-0 value competed with A's trial-1 value,
    # which worker A wrote to the journal, and lost.
    assert max(b.intermediate_values) == 10
    assert a1.system_attrs["completed_rung_0"] == a1.intermediate_values[10]
    assert b.system_attrs["completed_rung_0"] > a1.system_attrs["completed_rung_0"]
    assert "trial-002: pruned" in second.stdout
    assert "3 of 3 trials finished: 2 completed, 1 pruned, 0 failed" in second.stdout
