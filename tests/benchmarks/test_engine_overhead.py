"""The engine-overhead benchmark compares like with like (tiny sizes here, no timing asserts).

Every side must do the same number of optimizer steps and end at the same loss from the same
weights and batches; the check that says so must catch a side that does different work.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import engine_overhead as eo
from peers.plain import run_plain
from peers.workload import probe_loss, same_work_problems


def tiny_mlp():
    return eo.mlp_workload(batch_size=16, hidden=8, warmup=2, timed=6)


def test_every_side_does_the_same_steps_and_reaches_the_same_loss():
    w = tiny_mlp()
    runs = eo.measure(w, repeats=1)
    assert set(runs) == set(eo.SIDES) | set(eo.DIAGNOSTICS)
    losses = {}
    for name, (result,) in runs.items():
        assert result.optimizer_steps == w.total_steps, name
        assert result.seconds > 0 and result.cpu_seconds > 0, name
        assert result.memory.rss_mib > 50 and result.memory.cuda_mib is None, name
        losses[name] = result.probe_loss
    initial = probe_loss(w.prepare_model(), w)
    spread = max(losses.values()) - min(losses.values())
    moved = abs(losses[eo.PLAIN] - initial)
    # Training moved the loss, and every framework moved it to the same place.
    assert moved > 1e-3
    assert spread < moved / 100
    assert same_work_problems(w, runs, eo.PLAIN, eo.LOSS_RTOL) == []


def test_the_same_work_check_catches_other_steps_other_data_order_and_other_updates():
    w = replace(tiny_mlp(), learning_rate=1e-2)
    reference = run_plain(w)
    runs = {
        eo.PLAIN: [reference],
        "more steps": [run_plain(replace(w, timed_steps=w.timed_steps + 1))],
        "other batch order": [run_plain(replace(w, seed=1))],
        "other learning rate": [run_plain(replace(w, learning_rate=1e-3))],
        "other AdamW": [run_plain(w, fused=not w.fused)],
    }
    problems = " ".join(same_work_problems(w, runs, eo.PLAIN, eo.LOSS_RTOL))
    assert "more steps: 9 optimizer steps, not 8" in problems
    assert "other batch order: final loss" in problems
    assert "other learning rate: final loss" in problems
    assert "other AdamW: AdamW " in problems


def test_run_prints_one_table_per_workload_and_the_ratios_it_judges():
    tiny_vit = eo.vit_workload(batch_size=8, dim=16, layers=1, warmup=1, timed=2)
    text, ratios = eo.run(repeats=1, workloads={"mlp": tiny_mlp(), "vit": tiny_vit}, threads=1)
    assert text.count("same work on every side: yes") == 2
    for side in [*eo.SIDES, *eo.DIAGNOSTICS]:
        assert text.count(side) == 2
    assert "1 torch thread(s) on every side" in text
    assert "verdicts use the CPU-time columns" in text
    assert text.count("peak RSS MiB") == 2 and "memory: peak RSS = the process's VmHWM" in text
    assert set(ratios) == {
        f"engine_{key}_vs_{peer}" for key in ("mlp", "vit") for peer in ("plain", "lightning", "hf")
    }
    assert all(math.isfinite(value) and value > 0 for value in ratios.values())


def test_the_verdicts_pair_runs_back_to_back_first_in_turns():
    order = []
    sides = {name: (lambda w, name=name: order.append(name)) for name in
             [eo.LIGHTNING, eo.PLAIN, eo.HF, eo.TRAINFORGE]}  # fmt: skip
    runs = eo.measure(tiny_mlp(), repeats=4, sides=sides)
    rounds = [order[i : i + 4] for i in range(0, 16, 4)]
    assert [r[:2] for r in rounds] == [[eo.PLAIN, eo.TRAINFORGE], [eo.TRAINFORGE, eo.PLAIN]] * 2
    assert [r[2:] for r in rounds] == [[eo.LIGHTNING, eo.HF], [eo.HF, eo.LIGHTNING]] * 2
    assert all(len(results) == 4 for results in runs.values())
