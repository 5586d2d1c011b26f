"""`python3 -m trainforge.launch.torchrun ARGS`: torchrun (the same arguments, torch's own
elastic agent through `torch.distributed.run.run`) with trainforge's handling of how it ends.

The Slurm scripts start the training processes through this instead of `torchrun` itself,
because torchrun turns a planned stop into noise in the job log: after a SIGUSR1 (save
`checkpoint_interrupted`, requeue the job) every training process exits with 128 + 10, and
torchrun reports that as a crash, a `ChildFailedError` traceback with a failure table and an
"exitcode: 138" error line, on every requeue; it also prints an OMP_NUM_THREADS banner at
each start. Here:

- OMP_NUM_THREADS is set to 1 when unset and several processes start, as torchrun does, but
  without its banner (`trainforge train` states its threads in its header).
- An elastic job (`--nnodes MIN:MAX`) gets a fresh bootstrap store every rendezvous round
  (`TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`, unless set): with torch's shared store, an agent
  that was rank 0 keeps the previous round's store address, so a node that joins later waits
  for an address that is never published and the scale-up ends in a store timeout.
- torchrun's log lines are held while it runs. When every process that failed stopped on a
  signal the training loop handles (SIGINT, SIGUSR1, SIGTERM: each one saved its checkpoint
  and said so), the held lines are dropped and one line says how the processes ended; the
  exit status is theirs (138 after SIGUSR1). Any other failure shows the held lines and
  torchrun's failure table, as torchrun would, without the traceback, and exits 1.

Considered: torchrun's `--redirects`/`--tee` (they route the workers' output, not the
agent's own log and traceback) and `LOGLEVEL=ERROR` (it still prints the error line and the
traceback, and hides the lines a real failure needs).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

# Exit statuses of a training process stopped by a signal it handles (engine/stop.py): it
# saved checkpoint_interrupted and printed its own lines before exiting.
PLANNED_EXITS = {128 + s: s.name for s in (signal.SIGINT, signal.SIGUSR1, signal.SIGTERM)}
HELD_LOGGER = "torch.distributed"  # torchrun's agent and launcher log under this name


class _Held(logging.Handler):
    """Keeps the records it is given, to show them later or not at all."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def held_log() -> Iterator[_Held]:
    """Hold torchrun's log records: torch's own stderr handler on `HELD_LOGGER` steps aside
    for one that keeps them, and is put back on exit."""
    logger = logging.getLogger(HELD_LOGGER)
    held = _Held()
    handlers, propagate = list(logger.handlers), logger.propagate
    for handler in handlers:
        logger.removeHandler(handler)
    logger.addHandler(held)
    logger.propagate = False
    try:
        yield held
    finally:
        logger.removeHandler(held)
        for handler in handlers:
            logger.addHandler(handler)
        logger.propagate = propagate


def show(records: Sequence[logging.LogRecord]) -> None:
    """Print held records as torch would have printed them (they passed their level)."""
    logger = logging.getLogger(HELD_LOGGER)
    for record in records:
        logger.handle(record)


def planned_stop(exit_codes: Sequence[int]) -> str | None:
    """The signal name when every failed process stopped on a handled signal, else None."""
    names = {PLANNED_EXITS.get(code) for code in exit_codes}
    if not exit_codes or None in names:
        return None
    return "/".join(sorted(n for n in names if n))


def elastic(nnodes: str) -> bool:
    """Whether `--nnodes` is a range of node counts (`1:2`), not one count."""
    low, _, high = str(nnodes).partition(":")
    return bool(high) and low != high


def main(argv: Sequence[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import determine_local_world_size, parse_args, run

    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    if "OMP_NUM_THREADS" not in os.environ and determine_local_world_size(args.nproc_per_node) > 1:
        os.environ["OMP_NUM_THREADS"] = "1"  # torchrun's default, said by trainforge's header
    if elastic(args.nnodes):
        os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # see the docstring
    failure = None
    with held_log() as held:
        try:
            run(args)
        except ChildFailedError as err:
            failure = err
    if failure is None:
        show(held.records)
        return 0
    codes = [f.exitcode for f in failure.failures.values()]
    stopped = planned_stop(codes)
    if stopped is None:  # a real failure: what torchrun says, without its traceback
        show(held.records)
        print(failure.format_msg(), file=sys.stderr, flush=True)
        return 1
    print(stopped_line(len(codes), stopped, codes[0]), flush=True)
    return codes[0]


def stopped_line(count: int, signal_name: str, code: int) -> str:
    """The one line for processes that stopped on a handled signal, worded for one or many."""
    if count == 1:
        return (
            f"trainforge: 1 training process stopped on {signal_name} (exit {code}) after "
            "saving its checkpoint, as its lines above say"
        )
    return (
        f"trainforge: {count} training processes stopped on {signal_name} (exit {code}) after "
        "saving their checkpoints, as their lines above say"
    )


if __name__ == "__main__":
    sys.exit(main())
