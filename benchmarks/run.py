"""`make bench`: every benchmark side by side in one run, one table each, then the verdicts.

Each module's `run()` returns (table text, {ratio name: value}); targets are checked here.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
warnings.filterwarnings("ignore", message=".*set_vital.*")

from common import machine_line  # noqa: E402

# (module, ratio key, target, "<=" or ">=")
BENCHMARKS = [
    ("checkpoint_stall", "checkpoint_stall_ratio", 0.25, "<="),
]


def main() -> int:
    import importlib

    print(f"machine: {machine_line()}\n")
    verdicts = []
    for module_name, key, target, direction in BENCHMARKS:
        module = importlib.import_module(module_name)
        text, ratios = module.run()
        print(text + "\n")
        value = ratios[key]
        ok = value <= target if direction == "<=" else value >= target
        verdicts.append(f"{'PASS' if ok else 'MISS'}  {key} = {value:.3f} (target {direction} "
                        f"{target})")  # fmt: skip
    print("\n".join(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
