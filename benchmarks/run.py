"""`make bench`: every benchmark side by side in one run, one table each, then the verdicts.

Each module's `run()` returns (table text, {ratio name: value}); targets are checked here.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
warnings.filterwarnings("ignore", message=".*set_vital.*")

from common import machine_line  # noqa: E402

# (module, ratio key, target, "<=" or ">=" or "info"): an "info" row has no target of its
# own and is printed as measured (e.g. 2-process scaling on a 2-core machine).
BENCHMARKS = [
    ("checkpoint_stall", "checkpoint_sync_ratio", 1.5, "<="),
    ("checkpoint_stall", "checkpoint_stall_ratio", 0.05, "<="),
    ("web_load", "web_poll_p99_ms", 200.0, "<="),
    ("web_load", "web_poll_slowdown", 0.05, "<="),
    ("observability", "observability_throughput_ratio", 0.98, ">="),
    ("scaling", "scaling_2_procs", None, "info"),
    ("scaling", "scaling_2_gpus", None, "info"),
    ("engine_overhead", "engine_mlp_vs_plain", 0.98, ">="),
    ("engine_overhead", "engine_mlp_vs_lightning", 1.0, ">="),
    ("engine_overhead", "engine_mlp_vs_hf", 1.0, ">="),
    ("engine_overhead", "engine_vit_vs_plain", 0.98, ">="),
    ("engine_overhead", "engine_vit_vs_lightning", 1.0, ">="),
    ("engine_overhead", "engine_vit_vs_hf", 1.0, ">="),
    ("input_pipeline", "input_pipeline_speedup", 8.0, ">="),
    ("input_pipeline", "data_wait_share", 0.02, "<="),
    ("gpu", "gpu_mfu", 0.35, ">="),
    ("gpu", "gpu_vs_lightning", 1.0, ">="),
    ("gpu", "gpu_vs_hf", 1.0, ">="),
    ("inference", "infer_onnx_b1_p50_ms", 5.0, "<="),
    ("inference", "infer_onnx_vs_torch_b1", None, "info"),
]


def main() -> int:
    import importlib

    print(f"machine: {machine_line()}\n")
    verdicts = []
    results: dict[str, dict[str, float]] = {}  # a module with several ratios runs once
    for module_name, key, target, direction in BENCHMARKS:
        if module_name not in results:
            started = time.perf_counter()
            text, results[module_name] = importlib.import_module(module_name).run()
            print(f"{text}\n({module_name}: {time.perf_counter() - started:.0f} s)\n", flush=True)
        value = results[module_name].get(key)
        if value is None:  # e.g. the GPU benchmark on a machine without CUDA
            verdicts.append(f"SKIP  {key} (not measured here, see {module_name} above)")
            continue
        if direction == "info":
            verdicts.append(f"INFO  {key} = {value:.3f} (no target; see {module_name} above)")
            continue
        ok = value <= target if direction == "<=" else value >= target
        verdicts.append(f"{'PASS' if ok else 'MISS'}  {key} = {value:.3f} (target {direction} "
                        f"{target})")  # fmt: skip
    print("\n".join(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
