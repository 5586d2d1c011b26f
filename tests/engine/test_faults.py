"""Numerical faults (skipped steps, divergence, NaN weights) and resumes that are refused.

Broken, unwritable and crash-damaged checkpoint folders are tested with the checkpoint
files, in test_checkpoint.py."""

from __future__ import annotations

import math

import pytest
import torch
from tests.fakes.poison import Poison

from trainforge.engine import checkpoint as ckpt
from trainforge.engine.callbacks import Callback
from trainforge.engine.trainer import Trainer
from trainforge.errors import UserError

CPU = torch.device("cpu")


def snapshot(trainer):
    """Everything a skipped step must leave as it was: parameters, optimizer moments and
    step counters, the schedule (scheduler state and the rates in use), the step counter."""
    params = [p.detach().clone() for p in trainer.model.parameters()]
    moments = {
        k: {n: torch.as_tensor(v).clone() for n, v in s.items()}
        for k, s in trainer.optimizer.state_dict()["state"].items()
    }
    schedule = {
        **{k: v for k, v in trainer.scheduler.state_dict().items() if k != "lr_lambdas"},
        "group_lrs": [g["lr"] for g in trainer.optimizer.param_groups],
        "global_step": trainer.state.global_step,
    }
    return params, moments, schedule


def assert_same(a, b) -> None:
    params_a, moments_a, schedule_a = a
    params_b, moments_b, schedule_b = b
    assert len(params_a) == len(params_b)
    assert all(torch.equal(x, y) for x, y in zip(params_a, params_b, strict=True))
    assert moments_a.keys() == moments_b.keys() and moments_a
    for index, state in moments_a.items():
        assert set(state) == {"step", "exp_avg", "exp_avg_sq"} == set(moments_b[index])
        assert all(torch.equal(state[k], moments_b[index][k]) for k in state), index
    assert schedule_a == schedule_b


class Probe(Callback):
    def __init__(self) -> None:
        self.snaps = {}  # by global step, at the end of each optimizer step
        self.by_batch = {}  # by micro-batch in the epoch, after every micro-batch

    def on_step_end(self, trainer):
        self.snaps[trainer.state.global_step] = snapshot(trainer)

    def on_batch_end(self, trainer):
        self.by_batch[trainer.state.batch_in_epoch] = snapshot(trainer)


class SettleEveryStep(Callback):
    """A logging point after every step (device mode settles its skips there)."""

    def on_step_end(self, trainer):
        trainer.pop_train_metrics()


DECAYING = {"schedule.lr_scheduler_type": "linear", "schedule.warmup_steps": 2}


def replay_without_batch(points_task, cfg, run_dir, batch_index, batch_size=8, n=64):
    """The same run on the same data with one batch left out: what a skipped step must equal."""
    from torch.utils.data import Subset
    from torchdata.stateful_dataloader import StatefulDataLoader

    task = points_task(n=n, batch_size=batch_size)
    bad = range(batch_index * batch_size, (batch_index + 1) * batch_size)
    keep = [i for i in range(n) if i not in bad]
    task.train_loader = StatefulDataLoader(
        Subset(task.train_loader.dataset, keep), batch_size=batch_size
    )
    reference = Trainer(task, cfg, run_dir=run_dir, device=CPU, callbacks=[])
    reference.fit()
    return reference


@pytest.mark.parametrize("fault", ["nan_loss", "inf_grad"])
def test_a_non_finite_step_is_skipped_and_changes_nothing(
    tmp_path, points_task, points_config, capsys, fault
):
    cfg = points_config(
        **{"training.max_steps": 4, "training.per_device_train_batch_size": 8, **DECAYING}
    )
    task = points_task(n=64, batch_size=8)
    Poison(task, **{f"{fault}_steps": (3,)})
    probe = Probe()
    trainer = Trainer(task, cfg, run_dir=tmp_path, device=CPU, callbacks=[probe])
    trainer.fit()
    # Micro-batch 3 was poisoned: steps 1, 2 ran, batch 3 was skipped, batches 4, 5 -> steps 3, 4.
    assert trainer.state.global_step == 4 and trainer.state.nonfinite_steps == 1
    assert trainer.state.batch_in_epoch == 5
    assert "non-finite loss or gradient, optimizer step skipped" in capsys.readouterr().out
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    # The state after the poisoned batch is the state before it, in every part ...
    assert_same(probe.by_batch[3], probe.by_batch[2])
    with pytest.raises(AssertionError):  # ... while a real step changes it
        assert_same(probe.by_batch[4], probe.by_batch[3])
    # ... and the run ends where a run that never saw the bad batch ends.
    reference = replay_without_batch(points_task, cfg, tmp_path / "r", batch_index=2)
    assert_same(snapshot(trainer), snapshot(reference))


@pytest.mark.parametrize("fault", ["nan_loss", "inf_grad"])
def test_device_skip_gives_the_step_back_to_the_counter_and_the_schedule(
    tmp_path, points_task, points_config, fault
):
    """Device mode (fused AdamW's found_inf, forced on the CPU): a skipped step counts as a
    step until the next settle (a logging point here, after every step), which takes it back
    out of global_step and the schedule; the run then equals one that never saw the batch."""
    cfg = points_config(
        **{"training.max_steps": 6, "training.per_device_train_batch_size": 8, **DECAYING}
    )
    task = points_task(n=64, batch_size=8)
    Poison(task, **{f"{fault}_steps": (3,)})
    probe = Probe()
    trainer = Trainer(task, cfg, run_dir=tmp_path, device=CPU, callbacks=[SettleEveryStep(), probe])
    trainer.guard.device_skip = True
    trainer.fit()
    assert trainer.state.global_step == 6 and trainer.state.nonfinite_steps == 1
    assert trainer.state.batch_in_epoch == 7  # the skipped step was made up at the end
    assert_same(probe.by_batch[3], probe.by_batch[2])  # settled at the step's logging point
    reference = replay_without_batch(points_task, cfg, tmp_path / "r", batch_index=2)
    assert_same(snapshot(trainer), snapshot(reference))


def test_device_skip_settled_late_still_ends_on_the_clean_runs_step_and_rate(
    tmp_path, points_task, points_config
):
    """No logging point until the end: the schedule runs one step ahead until then (the
    price of not reading the device every step), the end settles, trains the missing step,
    and the counter, schedule and (constant-rate) parameters equal the clean run's."""
    cfg = points_config(**{"training.max_steps": 6, "training.per_device_train_batch_size": 8})
    task = points_task(n=64, batch_size=8)
    Poison(task, nan_loss_steps=(3,))
    trainer = Trainer(task, cfg, run_dir=tmp_path, device=CPU, callbacks=[])
    trainer.guard.device_skip = True
    trainer.fit()
    assert trainer.state.global_step == 6 and trainer.state.batch_in_epoch == 7
    reference = replay_without_batch(points_task, cfg, tmp_path / "r", batch_index=2)
    assert_same(snapshot(trainer), snapshot(reference))


def test_device_skip_checkpoint_resumes_exactly_and_keeps_the_window_finite(
    tmp_path, points_task, points_config
):
    """A checkpoint settles first: it holds the real step and schedule, its name is the real
    step, and a run resumed from it ends where the uninterrupted run ends; the logging
    window leaves the skipped step's NaN loss out."""
    from trainforge.engine.callbacks import CheckpointCadence

    cfg = points_config(
        **{"training.max_steps": 8, "training.per_device_train_batch_size": 8, **DECAYING}
    )

    def run(run_dir, poison, **kwargs):
        task = points_task(n=96, batch_size=8)
        Poison(task, nan_loss_steps=poison)
        trainer = Trainer(task, cfg, run_dir=run_dir, device=CPU, **kwargs)
        trainer.guard.device_skip = True
        return trainer

    logged = []

    class Log(Callback):
        def on_step_end(self, trainer):
            if trainer.step_due(4):
                logged.append(trainer.pop_train_metrics())

    whole = run(tmp_path / "a", (3,), callbacks=[CheckpointCadence(4, None, False), Log()])
    whole.fit()
    assert whole.state.global_step == 8 and whole.state.nonfinite_steps == 1
    names = sorted(p.name for p in (tmp_path / "a/checkpoints").iterdir() if p.is_dir())
    assert names == ["checkpoint-4", "checkpoint-8"]
    meta = ckpt.read_meta(tmp_path / "a/checkpoints/checkpoint-4")
    assert meta["global_step"] == 4 and meta["batch_in_epoch"] == 5
    assert logged[0]["nonfinite_steps"] == 1 and math.isfinite(logged[0]["loss"])

    resumed = run(tmp_path / "b", (), callbacks=[])  # the bad batch lies before the cut
    resumed.load_checkpoint(tmp_path / "a/checkpoints/checkpoint-4")
    resumed.fit()
    assert_same(snapshot(resumed), snapshot(whole))


def test_consecutive_bad_steps_stop_the_run_with_the_last_good_checkpoint(
    tmp_path, points_task, points_config
):
    cfg = points_config(
        **{
            "training.max_steps": 50,
            "training.per_device_train_batch_size": 8,
            "training.max_consecutive_nonfinite_steps": 3,
            "checkpoint.save_steps": 2,
        }
    )
    task = points_task(n=200, batch_size=8)
    Poison(task, nan_loss_steps=range(6, 100))
    from trainforge.engine.callbacks import CheckpointCadence

    trainer = Trainer(
        task,
        cfg,
        run_dir=tmp_path,
        device=torch.device("cpu"),
        callbacks=[CheckpointCadence(2, None, False)],
    )
    trainer.fit()
    assert trainer.outcome.diverged and "diverged" in trainer.outcome.reason
    assert trainer.state.global_step == 5 and trainer.state.consecutive_nonfinite == 3
    newest = ckpt.latest(tmp_path / "checkpoints")
    assert newest.path.name == "checkpoint-4"
    weights, _, _ = ckpt.load_checkpoint(newest.path)
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_nan_weights_are_never_checkpointed(tmp_path, points_task, points_config, capsys):
    cfg = points_config(**{"training.max_steps": 1})
    trainer = Trainer(
        points_task(), cfg, run_dir=tmp_path, device=torch.device("cpu"), callbacks=[]
    )
    with torch.no_grad():
        next(trainer.model.parameters())[0, 0] = math.nan
    trainer.save_checkpoint("checkpoint-1", wait=True)
    assert "not written: the model weights hold NaN or Inf" in capsys.readouterr().out
    assert not (tmp_path / "checkpoints" / "checkpoint-1").exists()


def test_resuming_a_different_model_is_refused_in_one_line(tmp_path, points_task, points_config):
    cfg = points_config(**{"training.max_steps": 1})
    trainer = Trainer(
        points_task(), cfg, run_dir=tmp_path, device=torch.device("cpu"), callbacks=[]
    )
    trainer.fit()
    path = trainer.save_checkpoint("checkpoint-1", wait=True)
    other = points_task()
    other.model[0] = torch.nn.Linear(8, 16)
    other.model[3] = torch.nn.Linear(16, 3)
    wrong = Trainer(other, cfg, run_dir=tmp_path, device=CPU, callbacks=[])
    with pytest.raises(UserError, match=r"different model .*0\.weight \(32, 8\) here \(16, 8\)"):
        wrong.load_checkpoint(path)


@pytest.mark.parametrize("saved_workers, resumed_workers", [(1, 0), (0, 2), (2, 1)])
def test_resuming_with_another_worker_count_is_refused_in_one_line(
    tmp_path, points_task, points_config, saved_workers, resumed_workers
):
    """The loader's position is kept per worker; another worker count is a user error that
    names both counts and the fix, not torchdata's internal assertion."""
    cfg = points_config(**{"training.max_steps": 1})
    first = Trainer(
        points_task(num_workers=saved_workers),
        cfg,
        run_dir=tmp_path,
        device=CPU,
        callbacks=[],
    )
    first.fit()
    path = first.save_checkpoint("checkpoint-1", wait=True)
    other = Trainer(
        points_task(num_workers=resumed_workers), cfg, run_dir=tmp_path, device=CPU, callbacks=[]
    )
    with pytest.raises(UserError) as caught:
        other.load_checkpoint(path)
    line = caught.value.line()
    assert f"dataloader_num_workers={saved_workers}, this run has {resumed_workers}" in line
    assert f"--set data.dataloader_num_workers={saved_workers}" in line
    assert "\n" not in line


class HostReads:
    """Counts tensor -> Python reads (`item`, `float`, `bool`, `int`) inside optimizer steps."""

    def __init__(self, monkeypatch, trainer) -> None:
        self.count = 0
        self.inside = False
        for name in ("item", "__float__", "__bool__", "__int__"):
            original = getattr(torch.Tensor, name)

            def counted(tensor, *args, _original=original, **kwargs):
                self.count += self.inside
                return _original(tensor, *args, **kwargs)

            monkeypatch.setattr(torch.Tensor, name, counted)
        step = trainer._optimizer_step

        def watched():
            self.inside = True
            try:
                return step()
            finally:
                self.inside = False

        monkeypatch.setattr(trainer, "_optimizer_step", watched)


def test_device_side_check_skips_in_the_kernel_without_a_host_read(
    tmp_path, points_task, points_config, monkeypatch
):
    """The CUDA mode (fused AdamW's found_inf), run on the CPU, whose fused kernel honours
    found_inf the same way: no step reads a value back; the skipped step leaves parameters
    and moments untouched and is counted when the run settles (logging points, end)."""
    cfg = points_config(**{"training.max_steps": 6, "training.per_device_train_batch_size": 8})
    task = points_task(n=64, batch_size=8)
    Poison(task, nan_loss_steps=(3,))
    probe = Probe()
    trainer = Trainer(task, cfg, run_dir=tmp_path, device=CPU, callbacks=[probe])
    assert not trainer.guard.device_skip  # on by itself only on CUDA
    assert trainer.optimizer.defaults["fused"]
    trainer.guard.device_skip = True
    reads = HostReads(monkeypatch, trainer)
    trainer.fit()
    assert reads.count == 0
    assert trainer.state.global_step == 6 and trainer.state.nonfinite_steps == 1
    params2, moments2, _ = probe.by_batch[2]
    params3, moments3, schedule3 = probe.by_batch[3]  # the poisoned micro-batch's step
    assert schedule3["global_step"] == 3  # counted as a step until the run settles
    assert_same((params2, moments2, {}), (params3, moments3, {}))
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert not torch.equal(probe.snaps[6][0][0], params3[0])  # later steps did update


def test_device_side_check_stops_a_diverging_run_at_the_next_logging_point(
    tmp_path, points_task, points_config, capsys
):
    cfg = points_config(
        **{
            "training.max_steps": 50,
            "training.per_device_train_batch_size": 8,
            "training.max_consecutive_nonfinite_steps": 3,
        }
    )
    task = points_task(n=400, batch_size=8)
    Poison(task, nan_loss_steps=range(3, 1000))

    class LogEvery4(Callback):
        def on_step_end(self, trainer):
            if trainer.state.global_step % 4 == 0:
                trainer.pop_train_metrics()

    trainer = Trainer(task, cfg, run_dir=tmp_path, device=CPU, callbacks=[LogEvery4()])
    trainer.guard.device_skip = True
    trainer.fit()
    assert trainer.outcome.diverged and "diverged" in trainer.outcome.reason
    # Steps 1, 2 ran; the logging point at counter 4 gave 2 skipped steps back (2 in a row),
    # the next one at counter 4 again found 4 in a row and stopped the run.
    assert trainer.state.global_step == 2 and trainer.state.batch_in_epoch == 6
    assert trainer.state.nonfinite_steps == 4 and trainer.state.consecutive_nonfinite == 4
    assert "optimizer step(s) skipped since the last report" in capsys.readouterr().out
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
