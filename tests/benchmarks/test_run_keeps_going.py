"""`make bench` keeps going when one module fails: its rows are MISS with the reason."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import run as bench_run


def test_a_failing_module_is_a_miss_row_and_the_others_still_run(tmp_path, monkeypatch, capsys):
    (tmp_path / "bench_crashes.py").write_text(
        "def run():\n    raise RuntimeError('the subprocess died (exit -9)')\n"
    )
    (tmp_path / "bench_exits.py").write_text("import sys\ndef run():\n    sys.exit(3)\n")
    (tmp_path / "bench_fine.py").write_text("def run():\n    return 'fine table', {'fine': 2.0}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code = bench_run.main(
        [
            ("bench_crashes", "crash_ratio", 1.0, "<="),
            ("bench_crashes", "crash_other", 1.0, ">="),
            ("bench_exits", "exit_ratio", 1.0, "<="),
            ("bench_fine", "fine", 1.5, ">="),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "MISS  crash_ratio (bench_crashes failed: RuntimeError: the subprocess died" in out
    assert "MISS  crash_other (bench_crashes failed" in out
    assert "MISS  exit_ratio (bench_exits failed: SystemExit: 3)" in out
    assert "fine table" in out and "PASS  fine = 2.000 (target >= 1.5)" in out
