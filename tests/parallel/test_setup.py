"""The process group from the environment, without starting processes: torchrun's and
Slurm's variables, the rendezvous address, the backend, and the single-process path."""

from __future__ import annotations

import os

import pytest
import torch.distributed as dist

from trainforge import parallel
from trainforge.errors import UserError

# What `srun --ntasks 4` (no torchrun) gives task 3, the second on the second node of a
# 2-node job (Slurm's env_array_for_step: SLURM_STEP_NUM_TASKS, and SLURM_NTASKS the same).
SLURM_TASK = {
    "SLURM_JOB_ID": "4242",
    "SLURM_PROCID": "3",
    "SLURM_NTASKS": "4",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_LOCALID": "1",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_STEP_NODELIST": "gpu[07-08]",
}
# The batch script of a job with --ntasks=4: the job's count, task 0, but no step.
SLURM_BATCH_SCRIPT = {
    "SLURM_JOB_ID": "4242",
    "SLURM_PROCID": "0",
    "SLURM_NTASKS": "4",
    "SLURM_LOCALID": "0",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
}
TORCHRUN_WORKER = {
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "MASTER_ADDR": "node1",
    "MASTER_PORT": "29500",
}
DIST_VARS = {*SLURM_TASK, *TORCHRUN_WORKER, "SLURM_STEP_NUM_TASKS", "SLURM_NODELIST"}


def test_torchrun_variables_give_rank_world_and_local_rank():
    assert parallel.env_ranks(TORCHRUN_WORKER) == (5, 8, 1)
    # torchrun under srun: torchrun's numbers win over the one Slurm task that started it.
    assert parallel.env_ranks({**SLURM_TASK, **TORCHRUN_WORKER}) == (5, 8, 1)


def test_slurm_only_variables_give_rank_world_and_local_rank():
    assert parallel.env_ranks(SLURM_TASK) == (3, 4, 1)
    # `srun -E` keeps the job's SLURM_NTASKS: the step's own count is the world.
    step = {**SLURM_TASK, "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"}
    assert parallel.env_ranks(step) == (1, 2, 1)


def test_one_process_environments_take_no_distributed_path():
    assert parallel.env_ranks({}) is None
    # `trainforge train` straight in the batch script (no srun) trains alone, never waits.
    assert parallel.env_ranks(SLURM_BATCH_SCRIPT) is None
    assert parallel.env_ranks({**SLURM_TASK, "SLURM_STEP_NUM_TASKS": "1"}) is None
    assert (
        parallel.env_ranks({"SLURM_JOB_ID": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) is None
    )
    assert parallel.env_ranks({"SLURM_PROCID": "0"}) is None


def test_slurm_rendezvous_is_the_first_node_on_the_job_scripts_port():
    env = parallel.rendezvous_env(SLURM_TASK)
    # The same port as the rendered job script: 20000 + job id % 12000.
    assert env == {"MASTER_ADDR": "gpu07", "MASTER_PORT": str(20000 + 4242 % 12000)}
    own = parallel.rendezvous_env({**SLURM_TASK, "MASTER_ADDR": "head", "MASTER_PORT": "1234"})
    assert own == {"MASTER_ADDR": "head", "MASTER_PORT": "1234"}
    job_only = {k: v for k, v in SLURM_TASK.items() if k != "SLURM_STEP_NODELIST"}
    assert (
        parallel.rendezvous_env({**job_only, "SLURM_JOB_NODELIST": "cpu5,gpu1"})["MASTER_ADDR"]
        == "cpu5"
    )


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [
        ("node1", "node1"),
        ("node[001-004]", "node001"),
        ("gpu[03-04,07],cpu1", "gpu03"),
        ("gpu[7,3-4]", "gpu7"),
        ("rack[2-3]-n[10-11]", "rack2-n10"),
        ("a-b,c", "a-b"),
    ],
)
def test_first_host_of_a_slurm_host_list(nodelist, first):
    assert parallel.first_host(nodelist) == first


def test_missing_rendezvous_is_one_clear_line():
    with pytest.raises(UserError, match=r"MASTER_ADDR is not set.*export MASTER_ADDR"):
        parallel.rendezvous_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"})
    with pytest.raises(UserError, match="SLURM_JOB_ID is missing"):
        parallel.rendezvous_env({"SLURM_NODELIST": "n1"})


def test_backend_is_nccl_on_cuda_and_gloo_on_cpu():
    assert parallel.choose_backend("auto", "cuda") == "nccl"
    assert parallel.choose_backend("auto", "cpu") == "gloo"
    assert parallel.choose_backend("gloo", "cuda") == "gloo"
    assert parallel.choose_backend("nccl", "cuda") == "nccl"
    with pytest.raises(UserError, match="distributed_backend=gloo"):
        parallel.choose_backend("nccl", "cpu")


@pytest.fixture
def clean_env(monkeypatch):
    """No distributed variables; setup() writes os.environ itself, so it is restored after."""
    saved = dict(os.environ)
    for key in DIST_VARS:
        os.environ.pop(key, None)
    yield monkeypatch
    parallel.teardown()
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def fake_group(clean_env):
    """init_process_group and new_group recorded instead of run (no peers to meet)."""
    calls = []
    clean_env.setattr(dist, "init_process_group", lambda **kw: calls.append(kw))
    clean_env.setattr(dist, "new_group", lambda **kw: "control-group")
    clean_env.setattr(dist, "is_initialized", lambda: False)
    return calls


def test_single_process_initialises_nothing(fake_group):
    context = parallel.setup("auto", "cpu")
    assert not context.enabled and context.is_main and context.backend is None
    assert fake_group == []
    # The collectives are pass-throughs: nothing is reduced, gathered or awaited.
    assert parallel.agree_max(3) == 3 and parallel.gather_objects("x") == ["x"]
    parallel.barrier()


def test_slurm_task_joins_a_gloo_group_at_the_derived_rendezvous(fake_group):
    os.environ.update(SLURM_TASK)
    context = parallel.setup("auto", "cpu")
    assert (context.rank, context.world_size, context.local_rank) == (3, 4, 1)
    assert context.backend == "gloo" and context.enabled and not context.is_main
    assert fake_group[0]["backend"] == "gloo"
    assert (fake_group[0]["rank"], fake_group[0]["world_size"]) == (3, 4)
    # The env:// rendezvous init_process_group reads, as torchrun would have set it.
    assert os.environ["MASTER_ADDR"] == "gpu07"
    assert os.environ["MASTER_PORT"] == str(20000 + 4242 % 12000)
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]) == (
        "3",
        "4",
        "1",
    )


def test_more_local_ranks_than_gpus_is_one_clear_line(fake_group, monkeypatch):
    import torch

    os.environ.update(TORCHRUN_WORKER)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UserError, match=r"cuda:1.*training\.device=cpu"):
        parallel.setup("auto", "cuda")
    assert fake_group == []


def test_a_cuda_group_carries_gloo_beside_nccl_for_cpu_tensors(fake_group, monkeypatch):
    """A meter's float64 sums and DCP's plans are CPU tensors reduced over the default group;
    an NCCL-only group fails them ("No backend type associated with device type cpu", seen on
    an H200 with FSDP2), so the group is "cpu:gloo,cuda:nccl"."""
    import torch

    os.environ.update(TORCHRUN_WORKER)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    context = parallel.setup("auto", "cuda")
    assert context.backend == "nccl"
    assert fake_group[0]["backend"] == "cpu:gloo,cuda:nccl"
    assert parallel.group_backend("gloo") == "gloo"


class _Model:
    """Stands for a DDP-wrapped model in a reference cycle (as the Trainer's is)."""

    def __init__(self) -> None:
        self.cycle = self


def test_teardown_frees_the_model_before_the_group_is_destroyed(fake_group, clean_env):
    import weakref

    os.environ.update(SLURM_TASK)
    parallel.setup("auto", "cpu")
    model = _Model()
    alive = weakref.ref(model)
    del model  # unreachable, but only the cyclic collector frees it
    seen_at_destroy = []
    clean_env.setattr(dist, "is_initialized", lambda: True)
    clean_env.setattr(dist, "destroy_process_group", lambda: seen_at_destroy.append(alive()))
    parallel.teardown()
    assert seen_at_destroy == [None]  # collected first, then the group destroyed
    assert not parallel.context().enabled


def test_teardown_during_an_error_releases_what_the_traceback_held(fake_group, clean_env):
    import weakref

    os.environ.update(SLURM_TASK)
    parallel.setup("auto", "cpu")
    refs = []

    def train() -> None:
        model = _Model()
        refs.append(weakref.ref(model))
        raise RuntimeError("Connection closed by peer")

    seen_at_destroy = []
    clean_env.setattr(dist, "is_initialized", lambda: True)
    clean_env.setattr(dist, "destroy_process_group", lambda: seen_at_destroy.append(refs[0]()))
    with pytest.raises(UserError, match="rank 3"):
        try:
            try:
                train()
            except RuntimeError:
                raise UserError("rank 3: the distributed job failed") from None
        finally:
            parallel.teardown()
    assert seen_at_destroy == [None]


@pytest.fixture
def two_ranks(monkeypatch):
    """Rank `n` of 2 over an in-process store standing in for torchrun's rendezvous store."""
    store = dist.HashStore()
    monkeypatch.setattr(parallel, "_store", lambda: store)

    def be(rank: int) -> None:
        monkeypatch.setattr(parallel, "_CONTEXT", parallel.DistContext(rank, 2, rank, "gloo"))

    return be


PEER_GONE = RuntimeError("[gloo/transport/tcp/pair.cc:544] Connection closed by peer [::1]:4")


def test_a_failing_rank_names_itself_and_its_peer_stays_silent(two_ranks):
    two_ranks(1)
    line = parallel.failure_line(UserError("data file x.jsonl not found", "check data"))
    assert line == "rank 1: data file x.jsonl not found. check data"
    two_ranks(0)
    assert parallel.failure_line(PEER_GONE, wait_s=0) is None  # rank 1 said why


def test_a_peer_that_vanished_without_a_word_is_reported_once(two_ranks):
    two_ranks(1)  # rank 0 was killed: the survivor speaks, whichever rank it is
    line = parallel.failure_line(PEER_GONE, wait_s=0)
    assert line.startswith("rank 1: the distributed job failed: another rank stopped without")
    assert "Connection closed by peer" in line and "--resume auto" in line and "\n" not in line
    two_ranks(0)  # a second survivor (of a larger job) leaves the line to the first
    assert parallel.failure_line(PEER_GONE, wait_s=0) is None


def test_a_known_run_folder_names_its_own_resume_command(two_ranks):
    two_ranks(1)
    resume = "trainforge train --resume runs/vit"
    line = parallel.failure_line(PEER_GONE, wait_s=0, resume=resume)
    assert line.endswith("rerun with `trainforge train --resume runs/vit`")
    assert "--resume auto" not in line


def test_peer_loss_is_told_apart_from_a_rank_own_error():
    assert parallel.is_peer_loss(PEER_GONE)
    assert parallel.is_peer_loss(dist.DistNetworkError("store"))
    assert not parallel.is_peer_loss(RuntimeError("CUDA out of memory"))
    assert not parallel.is_peer_loss(UserError("gloo backend needs CPU tensors"))
