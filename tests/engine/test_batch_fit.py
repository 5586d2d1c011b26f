"""Automatic batch fit (`per_device_train_batch_size: auto`).

The search and the plan are tested with fake memory probes (bytes = a + b x micro-batch, and
one that runs out of memory above a threshold). The unified-memory path (Jetson, DGX Spark)
runs the real routing code on a recorded Jetson fixture with the GPU allocator's numbers
faked, since this machine has no such device. The end-to-end runs are real CPU training:
one through the CLI with the real CPU meter, one in-process with a fake meter that forces
gradient accumulation while the probe still runs real training steps.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from fakes.weights import relative_difference
from trainforge.config import validate
from trainforge.config.plan import AUTO_GLOBAL_BATCH
from trainforge.engine import batch_probe
from trainforge.engine import checkpoint as ckpt
from trainforge.engine.batch_fit import (
    FitSearch,
    OutOfMemory,
    plan_accumulation,
    search_micro_batch,
)
from trainforge.errors import UserError
from trainforge.hardware import detect, load_fixture
from trainforge.train import fit_batch


def resolve_auto_batch(resolved, platform, device, start_from=None):
    """The train entry's batch step: checkpoint numbers or the probe's, applied by the plan."""
    return fit_batch(resolved, platform, device, None, start_from)


REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "hardware" / "fixtures"
TINY = [  # a one-block ViT on digits: real training in well under a second
    "model.embedding_dim=32",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.mlp_size=64",
    "schedule.warmup_epochs=0",
    "logging.tensorboard=false",
    "logging.progress_bar=false",
    "logging.report=false",  # no test here reads it
    "logging.histogram_steps=null",
    "hardware.telemetry=false",
    "checkpoint.save_every_epochs=null",
    "training.num_threads=1",
]


class LinearProbe:
    """Peak bytes = a + b x micro-batch; records every size it is asked for."""

    def __init__(self, a: int, b: int, oom_above: int | None = None) -> None:
        self.a, self.b, self.oom_above = a, b, oom_above
        self.calls: list[int] = []

    def bytes(self, size: int) -> int:
        return self.a + self.b * size

    def __call__(self, size: int) -> int:
        self.calls.append(size)
        if self.oom_above is not None and size > self.oom_above:
            raise OutOfMemory
        return self.bytes(size)


def largest_fitting(probe: LinearProbe, usable: int, cap: int) -> int:
    return max((m for m in range(1, cap + 1) if probe.bytes(m) <= usable), default=0)


# ------------------------------------------------------------------------ search
@pytest.mark.parametrize("predict", [False, True])
@pytest.mark.parametrize(
    ("a", "b", "budget", "margin", "cap"),
    [
        (1_000, 100, 3_000, 0.1, 128),  # usable 2700 -> 17
        (5_000, 7, 20_000, 0.1, 4096),  # usable 18000 -> 1857
        (5_000, 7, 20_000, 0.25, 4096),  # usable 15000 -> 1428
        (10, 1, 10**9, 0.1, 48),  # everything fits: the cap wins
        (900, 50, 1_000, 0.0, 64),  # only 2 fit
    ],
)
def test_search_finds_the_largest_size_under_the_budget_less_the_margin(
    predict, a, b, budget, margin, cap
):
    probe = LinearProbe(a, b)
    lines: list[str] = []
    found = search_micro_batch(
        probe, budget_bytes=budget, cap=cap, margin=margin, predict=predict,
        baseline_bytes=a, log=lines.append,
    )  # fmt: skip
    usable = int(budget * (1 - margin))
    expected = largest_fitting(probe, usable, cap)
    assert found.micro_batch == expected
    assert found.peak_bytes == probe.bytes(expected) <= usable
    assert expected == cap or probe.bytes(expected + 1) > usable
    assert len(lines) == len(found.tried) >= len(probe.calls)  # a progress line per size
    assert all(line.startswith("batch fit: micro-batch ") for line in lines)
    assert len(probe.calls) <= 2 * cap.bit_length() + 1


def test_out_of_memory_above_a_threshold_is_caught_and_bisected():
    probe = LinearProbe(0, 1, oom_above=37)  # a GPU that throws at 38 whatever the numbers say
    found = search_micro_batch(probe, budget_bytes=10**9, cap=1000, log=lambda _: None)
    assert found.micro_batch == 37
    assert 38 in probe.calls and 64 in probe.calls  # it tried and survived both
    assert any(note == "out of memory" for _, _, note in found.tried)


def test_nothing_fits_gives_zero_and_a_one_line_user_error():
    from trainforge.engine.batch_fit import no_fit_error

    gib = 1024**3
    found = search_micro_batch(
        LinearProbe(5 * gib, gib // 10), budget_bytes=4 * gib, cap=64, log=lambda _: None
    )
    assert found.micro_batch == 0
    err = no_fit_error(found, "CUDA")
    assert isinstance(err, UserError) and "\n" not in err.line()
    assert (
        "auto: even micro-batch 1 needs 5.10 GiB, over the 3.60 GiB usable (budget 4.00 GiB "
        "CUDA less a 10% margin)" in err.line()
    )
    assert "hardware.memory_budget_gib" in err.line()


# ------------------------------------------------------------- unified memory
def test_predict_mode_never_runs_a_size_over_the_budget():
    # The first measurement can only bound the per-sample cost from above; the search must
    # still never run a size whose true peak is over the usable memory.
    for a, b in [(1_000, 100), (100, 1_000), (50_000, 3), (0, 10)]:
        probe = LinearProbe(a, b)
        budget = 60_000
        usable = int(budget * 0.9)
        found = search_micro_batch(
            probe, budget_bytes=budget, cap=10_000, predict=True, baseline_bytes=a,
            log=lambda _: None,
        )  # fmt: skip
        assert found.micro_batch == largest_fitting(probe, usable, 10_000)
        assert max(probe.bytes(m) for m in probe.calls) <= usable, (a, b, probe.calls)


def test_predict_mode_with_the_baseline_over_budget_runs_nothing():
    probe = LinearProbe(10_000, 1)
    found = search_micro_batch(
        probe, budget_bytes=9_000, cap=64, predict=True, baseline_bytes=10_000, log=print
    )
    assert found.micro_batch == 0 and probe.calls == []
    assert found.tried == [(1, 10_000, "held")]


class FakeRunner:
    """Stands in for StepRunner: remembers the size of the step it was asked to run."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.param_bytes = 0

    def __call__(self, size: int) -> None:
        self.sizes.append(size)


def test_jetson_routes_to_the_budget_checked_path_and_never_exceeds_it(monkeypatch):
    platform = detect(load_fixture(FIXTURES / "jetson-orin-jp6"))
    assert platform.kind == "jetson"
    gib = 1024**3
    runner = FakeRunner()
    # The GPU allocator's peak on this fake board: 3 GiB of weights + 0.25 GiB per sample.
    monkeypatch.setattr(
        batch_probe,
        "cuda_step_peak",
        lambda run, device: (run(), 3 * gib + runner.sizes[-1] * gib // 4)[1],
    )
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 3 * gib)
    monkeypatch.setattr(batch_probe, "_host_rss", lambda: gib)  # the Python process
    monkeypatch.setattr(batch_probe, "_host_available", lambda: 60 * gib)
    probe, budget, baseline, predict, how = batch_probe.meter(
        runner, platform, torch.device("cuda"), 12.0
    )
    assert (predict, how, budget, baseline) == (True, "unified memory", 12 * gib, 4 * gib)
    found = search_micro_batch(
        probe, budget_bytes=budget, cap=512, predict=True, baseline_bytes=baseline,
        log=lambda _: None,
    )  # fmt: skip
    usable = int(budget * 0.9)  # 10.8 GiB: 4 GiB + 0.25 GiB x 27 = 10.75 GiB
    assert found.micro_batch == 27
    assert all(4 * gib + m * gib // 4 <= usable for m in runner.sizes), runner.sizes
    # A budget over what the board has left is cut to what it has.
    monkeypatch.setattr(batch_probe, "_host_available", lambda: 2 * gib)
    _, budget, *_ = batch_probe.meter(runner, platform, torch.device("cuda"), 12.0)
    assert budget == 6 * gib  # 2 GiB available + the 4 GiB this process already holds


def test_cuda_probe_turns_out_of_memory_into_a_miss_and_reports_the_peak(monkeypatch):
    # A discrete GPU (recorded RTX 4090 workstation): out-of-memory errors are caught.
    platform = detect(load_fixture(FIXTURES / "cuda-workstation"))
    gib = 1024**3
    calls: list[str] = []
    for name in ("synchronize", "empty_cache", "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name, **k: calls.append(_n))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (20 * gib, 24 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: gib)
    runner = FakeRunner()
    monkeypatch.setattr(
        torch.cuda, "max_memory_reserved", lambda device=None: gib + runner.sizes[-1] * gib // 8
    )

    def step(size: int) -> None:
        runner(size)
        if size > 40:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    probe, budget, baseline, predict, how = batch_probe.meter(
        step, platform, torch.device("cuda"), None
    )
    assert (predict, how, budget, baseline) == (False, "CUDA", 24 * gib, gib)
    with pytest.raises(OutOfMemory):
        probe(64)
    assert calls[-1] == "empty_cache"  # the cache is emptied after a failed size
    found = search_micro_batch(probe, budget_bytes=budget, cap=256, log=lambda _: None)
    assert found.micro_batch == 40 and found.peak_bytes == 6 * gib
    _, budget, *_ = batch_probe.meter(step, platform, torch.device("cuda"), 22.0)
    assert budget == 22 * gib  # the profile's budget, when set


# --------------------------------------------------------------------- the plan
@pytest.mark.parametrize(
    ("fitted", "target", "world", "micro", "accumulation"),
    [
        (17, 64, 1, 16, 4),
        (50, 128, 1, 43, 3),  # the fewest accumulation steps: 43, 43 and 42
        (10, 24, 1, 8, 3),  # the notes' batch of 24
        (1000, 64, 1, 64, 1),
        (1, 24, 1, 1, 24),
        (7, 24, 2, 6, 2),
        (50, 127, 1, 43, 3),  # a prime: 43, 42 and 42
        (22, 64, 3, 22, 1),  # 3 processes: 22, 21 and 21
    ],
)
def test_accumulation_keeps_the_global_batch(fitted, target, world, micro, accumulation):
    plan = plan_accumulation(fitted, target, world)
    assert (plan.micro_batch, plan.accumulation) == (micro, accumulation)
    assert plan.micro_batch <= fitted
    assert plan.global_batch == target


def test_every_plan_stays_under_the_fit_and_reaches_the_target():
    for target in range(1, 300, 7):
        for fitted in range(1, 80, 3):
            for world in (1, 2, 3):
                plan = plan_accumulation(fitted, target, world)
                assert 1 <= plan.micro_batch <= fitted
                assert plan.global_batch == target
                slots = plan.accumulation * world
                assert plan.micro_batch - target // slots <= 1  # within one sample
                assert plan.micro_batch * slots >= target  # the slots hold the step
                assert plan.accumulation == -(-target // (world * fitted))  # the fewest


# -------------------------------------------------- config and learning rate
def fake_fit(micro: int, calls: list | None = None):
    def fit(config, platform, device, *, target, world_size, log=print, **_):
        if calls is not None:
            calls.append(target)
        return FitSearch(micro, 123, 10**9, 9 * 10**8, 0.1, target, []), "fake"

    return fit


def resolve(tmp_path: Path, text: str, *overrides: str):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return validate(path, platform=detect(), profile="cpu", overrides=list(overrides))


def test_validate_accepts_auto_without_torch(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("training: {per_device_train_batch_size: auto}\n")
    code = (
        "import sys\nfrom pathlib import Path\nfrom trainforge.config import validate\n"
        f"r = validate(Path({str(path)!r}), profile='cpu')\n"
        "assert r.config.training.per_device_train_batch_size == 'auto'\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_fit_that_keeps_the_global_batch_keeps_the_learning_rate(tmp_path, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(batch_probe, "fit", fake_fit(17, calls))
    text = "training: {per_device_train_batch_size: auto}\noptimizer: {learning_rate: 3.0e-4}\n"
    resolved, line = resolve_auto_batch(resolve(tmp_path, text), None, None)
    t = resolved.config.training
    assert calls == [AUTO_GLOBAL_BATCH]  # nothing names a global batch: the default 128
    assert (t.per_device_train_batch_size, t.gradient_accumulation_steps) == (16, 8)
    assert line.startswith("batch fit: micro-batch 16 x accumulation 8 = global 128 (")
    assert resolved.sources["training.gradient_accumulation_steps"].startswith("batch fit")
    assert resolved.config.optimizer.learning_rate == 3e-4
    assert not any(n.startswith("learning rate") for n in resolved.notes)


def test_a_prime_global_batch_is_kept_with_uneven_micro_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(batch_probe, "fit", fake_fit(50))
    text = (
        "training: {per_device_train_batch_size: auto}\n"
        "optimizer: {learning_rate: 1.27e-3, reference_batch_size: 127}\n"
    )
    resolved, line = resolve_auto_batch(resolve(tmp_path, text), None, None)
    assert "batch fit: micro-batch 42-43 x accumulation 3 = global 127 (budget " in line
    assert resolved.config.training.global_batch_size == 127
    assert resolved.config.optimizer.learning_rate == 1.27e-3
    assert not any(n.startswith("learning rate") for n in resolved.notes)


def test_a_batch_nobody_tuned_the_rate_for_never_scales_it(tmp_path, monkeypatch):
    """No reference batch stated: the plan (127 asked, not the schema's 128) does not scale
    the rate, and the fit keeps 127."""
    monkeypatch.setattr(batch_probe, "fit", fake_fit(50))
    text = "training: {per_device_train_batch_size: auto}\noptimizer: {learning_rate: 1.0e-3}\n"
    resolved = resolve(tmp_path, text, "training.global_batch_size=127")
    assert resolved.config.optimizer.learning_rate == 1e-3
    resolved, line = resolve_auto_batch(resolved, None, None)
    assert "= global 127 (budget " in line
    assert resolved.config.optimizer.learning_rate == 1e-3
    assert not any(n.startswith("learning rate") for n in resolved.notes)


def test_auto_from_a_flag_keeps_the_files_global_batch(tmp_path, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(batch_probe, "fit", fake_fit(10, calls))
    text = "training: {per_device_train_batch_size: 24}\n"
    resolved = resolve(tmp_path, text, "training.per_device_train_batch_size=auto")
    resolved, _ = resolve_auto_batch(resolved, None, None)
    assert calls == [24]
    assert resolved.config.training.per_device_train_batch_size == 8
    assert resolved.config.training.gradient_accumulation_steps == 3


def test_a_resumed_run_keeps_its_checkpoints_numbers(tmp_path, monkeypatch):
    def no_probe(*args, **kwargs):
        raise AssertionError("a resumed run must not probe again")

    monkeypatch.setattr(batch_probe, "fit", no_probe)
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    saved = {
        "training": {"per_device_train_batch_size": 12, "gradient_accumulation_steps": 2},
        "optimizer": {"reference_batch_size": 24},
    }
    ckpt.config_file(checkpoint).write_text(yaml.safe_dump(saved))
    text = "training: {per_device_train_batch_size: auto}\n"
    resolved, line = resolve_auto_batch(resolve(tmp_path, text), None, None, start_from=checkpoint)
    t = resolved.config.training
    assert (t.per_device_train_batch_size, t.gradient_accumulation_steps) == (12, 2)
    assert "kept from the checkpoint" in line


def test_the_batch_fit_returns_numbers_and_leaves_the_config_to_the_plan(tmp_path, monkeypatch):
    from trainforge.config.plan import BatchPlan, apply_batch_plan

    monkeypatch.setattr(batch_probe, "fit", fake_fit(16))
    resolved = resolve(tmp_path, "training: {per_device_train_batch_size: auto}\n")
    plan, line = batch_probe.fit_auto_batch(resolved, None, None, build_task=None)
    assert plan == BatchPlan(16, 8, 1, AUTO_GLOBAL_BATCH) and line.startswith("batch fit: ")
    assert resolved.config.training.per_device_train_batch_size == "auto"  # not rewritten
    applied = apply_batch_plan(resolved, plan).config.training
    assert (applied.per_device_train_batch_size, applied.gradient_accumulation_steps) == (16, 8)


def test_integer_batch_sizes_pass_through_untouched(tmp_path, monkeypatch):
    monkeypatch.setattr(batch_probe, "fit", fake_fit(1))
    resolved = resolve(tmp_path, "training: {per_device_train_batch_size: 32}\n")
    assert resolve_auto_batch(resolved, None, None) == (resolved, "")


# ------------------------------------------------------------------- end to end
@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def train_digits(out: Path, name: str, *overrides: str):
    from trainforge.train import train

    platform = detect()
    sets = [*TINY, f"output.dir={out}", f"output.run_name={name}", *overrides]
    resolved = validate(REPO / "config" / "vit_digits.yaml", platform=platform, overrides=sets)
    return train(resolved, platform)


def test_auto_run_equals_a_run_configured_with_the_fitted_numbers(
    tmp_path, monkeypatch, torch_threads, capsys
):
    sizes: list[int] = []

    def fake_meter(runner, platform, device, budget_gib):
        def probe(size: int) -> int:
            runner(size)  # a real training step on the throwaway model
            sizes.append(size)
            return 1_000 + 100 * size

        return probe, 3_000, 1_000, True, "fake"  # 2700 usable: 17 fits

    monkeypatch.setattr(batch_probe, "meter", fake_meter)
    common = ["training.max_steps=3", "training.max_grad_norm=1.0"]
    auto = train_digits(tmp_path, "auto", *common, "training.per_device_train_batch_size=auto")
    out = capsys.readouterr().out
    assert sizes == [1, 2, 4, 8, 16, 17]  # 32 and the sizes down to 18 were predicted over
    assert "batch fit: micro-batch 16 x accumulation 4 = global 64 (" in out
    assert "learning rate:" not in out  # the file's global batch (64) is kept: same rate
    resolved_yaml = yaml.safe_load((auto.run_dir / "config.resolved.yaml").read_text())
    assert resolved_yaml["training"]["per_device_train_batch_size"] == 16
    direct = train_digits(
        tmp_path, "direct", *common,
        "training.per_device_train_batch_size=16", "training.gradient_accumulation_steps=4",
    )  # fmt: skip
    a = load_file(str(auto.run_dir / "model.safetensors"))
    b = load_file(str(direct.run_dir / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert auto.global_step == direct.global_step == 3
    assert auto.final_metrics == direct.final_metrics


def test_cli_auto_on_cpu_prints_the_fit_and_trains(cli, tmp_path):
    # A child: the fit measures the process's own memory, which pytest's would inflate.
    sets = [*TINY, f"output.dir={tmp_path}", "training.max_steps=2"]
    args = ["train", "config/vit_digits.yaml", "--batch_size", "auto"]
    for item in sets:
        args += ["--set", item]
    done = cli(*args, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    fit = [line for line in done.stdout.splitlines() if line.startswith("batch fit: micro")]
    assert fit and "= global 64 (budget " in fit[-1] and "GiB CPU RAM, peak " in fit[-1]
    assert "margin 10%" in fit[-1]
    assert "done: finished after 2 steps" in done.stdout


def test_cli_auto_that_cannot_fit_one_sample_is_one_line_exit_2(cli, tmp_path):
    # A child: what the run holds before its first step is the process's own memory.
    sets = [*TINY, f"output.dir={tmp_path}", "hardware.memory_budget_gib=0.01"]
    args = ["train", "config/vit_digits.yaml", "--set", "training.per_device_train_batch_size=auto"]
    for item in sets:
        args += ["--set", item]
    done = cli(*args, timeout=300)
    assert done.returncode == 2
    errors = [line for line in done.stderr.strip().splitlines() if "Warning" not in line]
    errors = [line for line in errors if not line.startswith("  ")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("training.per_device_train_batch_size = auto: the run holds ")
    assert "GiB before its first step, over the 0.01 GiB usable" in errors[0]
    assert "hardware.memory_budget_gib" in errors[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "vit_digits").exists()  # nothing half-written


@pytest.mark.gpu
@pytest.mark.slow  # with gpu: never in the CPU suites, run by `pytest -m gpu` on a CUDA machine
def test_auto_on_cuda_probes_real_steps_and_matches_the_fitted_numbers(tmp_path, capsys):
    # Real CUDA path: caching-allocator peaks, a fused AdamW step per size. Attention
    # kernels may reduce in a different order from run to run on a GPU, so the comparison
    # allows float noise; on CPU the same comparison is bitwise (test above).
    assert torch.cuda.is_available(), "run with a CUDA device (pytest -m gpu)"
    common = ["training.max_steps=3", "training.device=cuda", "training.precision=fp32"]
    common += ["logging.mlflow=false", "logging.wandb=false"]  # no tracking extra needed
    auto = train_digits(
        tmp_path, "auto", *common, "training.per_device_train_batch_size=auto",
        "optimizer.reference_batch_size=1024",
    )  # fmt: skip
    out = capsys.readouterr().out
    fit = [line for line in out.splitlines() if line.startswith("batch fit: micro-batch ")]
    assert "GiB CUDA, peak " in fit[-1]
    resolved = yaml.safe_load((auto.run_dir / "config.resolved.yaml").read_text())["training"]
    micro, accumulation = (
        resolved["per_device_train_batch_size"],
        resolved["gradient_accumulation_steps"],
    )
    assert micro * accumulation == 1024
    direct = train_digits(
        tmp_path, "direct", *common, f"training.per_device_train_batch_size={micro}",
        f"training.gradient_accumulation_steps={accumulation}",
        "optimizer.reference_batch_size=1024",
    )  # fmt: skip
    a = load_file(str(auto.run_dir / "model.safetensors"))
    b = load_file(str(direct.run_dir / "model.safetensors"))
    assert relative_difference(a, b) < 1e-4  # all but the attention key bias (fakes.weights)


def test_a_resumed_auto_run_on_another_process_count_keeps_its_batch(monkeypatch):
    """12 x 2 = 24 on one process, resumed on 3: the fitted micro-batch stays the cap, the
    effective batch stays 24 (3 processes x 8), the accumulation is planned again."""
    from trainforge import parallel
    from trainforge.engine.batch_fit import kept_batch

    monkeypatch.setattr(parallel, "_CONTEXT", parallel.DistContext(world_size=3))
    plan, line = kept_batch(12, 2, 24)
    assert (plan.micro_batch, plan.accumulation, plan.global_batch) == (8, 1, 24)
    assert "= global 24 (kept from the checkpoint" in line
    monkeypatch.setattr(parallel, "_CONTEXT", parallel.DistContext(world_size=5))
    plan, line = kept_batch(12, 2, 24)  # 5, 5, 5, 5 and 4
    assert (plan.micro_batch, plan.global_batch) == (5, 24)
    assert line.startswith("batch fit: micro-batch 4-5 x accumulation 1 x 5 processes = global 24")
