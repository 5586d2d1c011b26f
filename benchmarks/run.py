"""`make bench`: every benchmark side by side in one run, one table each, then the verdicts.

Each module's `run()` returns (table text, {ratio name: value}); targets are checked here.
A module that raises (or whose subprocess dies, which its `run()` reports by raising) becomes
a MISS row per ratio with the reason, and the other modules still run: one crash never
hides the other figures.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import machine_line

# (module, ratio key, target, "<=" or ">=" or "info"): an "info" row has no target of its
# own and is printed as measured (e.g. 2-process scaling on a 2-core machine).
BENCHMARKS = [
    ("whole_job", "whole_job_ratio", 1.0, "<="),
    ("whole_job", "whole_job_startup_extra_s", 1.5, "<="),
    ("whole_job", "whole_job_accuracy_delta", 0.0, ">="),
    ("whole_job", "whole_job_training_ratio", None, "info"),
    ("checkpoint_stall", "checkpoint_sync_ratio", 1.5, "<="),
    ("checkpoint_stall", "checkpoint_stall_ratio", 0.05, "<="),
    ("web_load", "web_poll_p99_ms", 200.0, "<="),
    ("web_load", "web_poll_slowdown", 0.05, "<="),
    ("web_queue", "web_two_runs_queued_vs_sequential", 1.1, "<="),
    ("web_queue", "web_two_runs_parallel_vs_sequential", None, "info"),
    ("observability", "observability_cost_share", 0.02, "<="),
    ("observability", "observability_throughput_ratio", None, "info"),
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
    ("sample_stream", "sample_stream_digits", 0.98, ">="),
    ("sample_stream", "sample_stream_cifar", 0.98, ">="),
    ("gpu", "gpu_mfu", 0.35, ">="),
    ("gpu", "gpu_vs_lightning", 1.0, ">="),
    ("gpu", "gpu_vs_hf", 1.0, ">="),
    ("inference", "infer_onnx_b1_p50_ms", 5.0, "<="),
    ("inference", "infer_onnx_vs_torch_b1", None, "info"),
    ("g2p", "g2p_decode_speedup", 1.0, ">="),
    ("g2p", "g2p_per_vs_previous", 0.75, "<="),
    ("faults", "faults_survived_share", 1.0, ">="),
    ("faults", "faults_data_lost", 0.0, "<="),
    ("recovery", "recovery_s", 60.0, "<="),
    ("recovery", "recovery_save_s", 10.0, "<="),
    ("lm_peers", "lm_vs_trl_sft", 1.0, ">="),
    ("lm_peers", "lm_vs_trl_sft_gemma", 1.0, ">="),
    ("lm_peers", "lm_defaults_vs_trl_defaults", 1.3, ">="),
    ("lm_peers", "lm_defaults_loss_delta", None, "info"),
    ("lm_peers", "lm_vs_hf_trainer", 1.0, ">="),
    ("lm_peers", "lm_peak_memory_vs_trl", 0.8, "<="),
    ("lm_peers", "lm_trainforge_before_first_step_s", None, "info"),
    ("lm_peers", "lm_trl_before_first_step_s", None, "info"),
    ("lm_peers", "lm_hf_before_first_step_s", None, "info"),
    ("lm_peers", "lm_trainforge_after_last_step_s", None, "info"),
    ("lm_peers", "lm_trl_after_last_step_s", None, "info"),
    ("lm_peers", "lm_hf_after_last_step_s", None, "info"),
    ("lm_peers", "lm_trainforge_process_s", None, "info"),
    ("lm_peers", "lm_trl_process_s", None, "info"),
    ("lm_peers", "lm_hf_process_s", None, "info"),
    ("lm_memory", "lm_chunked_vs_full_peak_memory", 0.5, "<="),
    ("long_run", "long_run_rss_growth", 0.03, "<="),
    ("long_run", "long_run_throughput_ratio", 0.95, ">="),
    ("long_run", "long_run_resume_ratio", 1.5, "<="),
    ("long_run", "long_run_report_s", 5.0, "<="),
    ("long_run", "long_run_serve_rss_growth", 0.03, "<="),
    ("long_run", "long_run_page_mb", 1.0, "<="),
    ("long_run", "long_run_histogram_off_cadence", 0.0, "<="),
    ("logging_disk", "logging_jsonl_bytes_per_record", None, "info"),
    ("logging_disk", "logging_tensorboard_bytes_per_step", None, "info"),
    ("logging_disk", "logging_day_gb", None, "info"),
]


def run_module(module_name: str) -> tuple[str, dict[str, float], str | None]:
    """(table text, ratios, None), or ("", {}, one-line reason) when the module failed."""
    import importlib

    try:
        text, ratios = importlib.import_module(module_name).run()
    except (Exception, SystemExit) as err:  # any failure is a MISS row
        traceback.print_exc()
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return "", {}, f"{type(err).__name__}: {first}"[:200].rstrip(": ")
    return text, ratios, None


def verdict(key: str, value: float | None, target, direction: str, module_name: str) -> str:
    if value is None:  # e.g. the GPU benchmark on a machine without CUDA
        return f"SKIP  {key} (not measured here, see {module_name} above)"
    if direction == "info":
        return f"INFO  {key} = {value:.3f} (no target; see {module_name} above)"
    ok = value <= target if direction == "<=" else value >= target
    return f"{'PASS' if ok else 'MISS'}  {key} = {value:.3f} (target {direction} {target})"


def main(benchmarks=None) -> int:
    benchmarks = BENCHMARKS if benchmarks is None else benchmarks
    print(f"machine: {machine_line()}\n")
    verdicts = []
    results: dict[str, dict[str, float]] = {}  # a module with several ratios runs once
    failures: dict[str, str] = {}
    for module_name, key, target, direction in benchmarks:
        if module_name not in results:
            started = time.perf_counter()
            text, results[module_name], failure = run_module(module_name)
            took = time.perf_counter() - started
            if failure is not None:
                failures[module_name] = failure
                print(f"({module_name}: FAILED after {took:.0f} s: {failure})\n", flush=True)
            else:
                print(f"{text}\n({module_name}: {took:.0f} s)\n", flush=True)
        if module_name in failures:
            verdicts.append(f"MISS  {key} ({module_name} failed: {failures[module_name]})")
            continue
        verdicts.append(verdict(key, results[module_name].get(key), target, direction, module_name))
    print("\n".join(verdicts))
    return 1 if failures else 0


def selected(names: list[str]) -> list[tuple]:
    """The rows of the modules `names` (all rows without names): `make bench ONLY="a b"`."""
    known = {row[0] for row in BENCHMARKS}
    unknown = [name for name in names if name not in known]
    if unknown:
        print(f"error: no benchmark module {', '.join(unknown)}; pick from "
              f"{', '.join(sorted(known))}", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    return [row for row in BENCHMARKS if not names or row[0] in names]


if __name__ == "__main__":
    sys.exit(main(selected(sys.argv[1:])))
