"""tegrastats parsing (JP4/JP5/JP6 lines under fixtures/telemetry) and the live reader."""

from __future__ import annotations

import os
import random
import stat
import time
from pathlib import Path

import pytest

from trainforge.hardware.tegrastats import TegrastatsReader, TegrastatsSource, parse_line

TELEMETRY = Path(__file__).resolve().parent / "fixtures" / "telemetry"


def fixture_lines(name: str) -> list[str]:
    return [line for line in (TELEMETRY / name).read_text().splitlines() if line.strip()]


ALL_LINES = [
    pytest.param(line, id=f"{name}:{number}")
    for name in ("tegrastats_jp4.txt", "tegrastats_jp5.txt", "tegrastats_jp6.txt")
    for number, line in enumerate(fixture_lines(name), start=1)
]


def test_fixture_files_have_several_lines_per_format() -> None:
    for name in ("tegrastats_jp5.txt", "tegrastats_jp6.txt", "tegrastats_jp4.txt"):
        assert len(fixture_lines(name)) >= 3, name


@pytest.mark.parametrize("line", ALL_LINES)
def test_every_fixture_line_parses(line: str) -> None:
    out = parse_line(line)
    for key in ("ram_used_mib", "ram_total_mib", "swap_used_mib", "cpu_util_pct"):
        assert key in out
    assert "gpu_util_pct" in out and "power_total_mw" in out
    assert any(key.startswith("temp_") for key in out)
    assert all(isinstance(value, float) for value in out.values())
    assert 0 < out["ram_used_mib"] < out["ram_total_mib"]
    assert 0 <= out["cpu_util_pct"] <= 100 and 0 <= out["gpu_util_pct"] <= 100
    # -256C marks a thermal zone without a sensor; it must never show up as a reading.
    assert all(value > -256 for key, value in out.items() if key.startswith("temp_"))
    assert all(key == key.lower() for key in out)


def test_jp5_agx_orin_exact() -> None:
    line = fixture_lines("tegrastats_jp5.txt")[0]
    assert parse_line(line) == {
        "ram_used_mib": 6021.0,
        "ram_total_mib": 30536.0,
        "swap_used_mib": 0.0,
        "cpu_util_pct": 0.375,  # (2 + 1 + 6 * 0) / 8 online cores; the 4 `off` cores skipped
        "gpu_util_pct": 0.0,
        "gpu_freq_mhz": 0.0,
        "emc_util_pct": 0.0,
        "temp_cpu_c": 46.312,
        "temp_tboard_c": 35.0,
        "temp_soc2_c": 42.843,
        "temp_tdiode_c": 36.75,
        "temp_soc0_c": 43.375,
        "temp_tj_c": 46.312,
        "temp_soc1_c": 42.906,
        "power_vdd_gpu_soc_mw": 2388.0,
        "power_vdd_cpu_cv_mw": 398.0,
        "power_vin_sys_5v0_mw": 3526.0,
        "power_vddq_vdd2_1v8ao_mw": 403.0,
        "power_total_mw": 2388.0 + 398.0 + 3526.0 + 403.0,  # no VDD_IN: sum of rails
    }


def test_jp5_busy_line_per_gpc_clock() -> None:
    out = parse_line(fixture_lines("tegrastats_jp5.txt")[1])
    assert out["gpu_util_pct"] == 87.0
    assert out["gpu_freq_mhz"] == 1300.0
    assert out["emc_util_pct"] == 12.0
    assert out["temp_gpu_c"] == 53.718
    assert out["power_vdd_gpu_soc_mw"] == 14811.0  # instantaneous, not the 9600 average


def test_jp6_orin_nano_exact() -> None:
    line = fixture_lines("tegrastats_jp6.txt")[0]
    assert parse_line(line) == {
        "ram_used_mib": 2512.0,
        "ram_total_mib": 7620.0,
        "swap_used_mib": 0.0,
        "cpu_util_pct": 3.5,
        "gpu_util_pct": 45.0,
        "temp_cpu_c": 47.5,
        "temp_soc2_c": 46.1,
        "temp_soc0_c": 46.3,
        "temp_gpu_c": 47.2,
        "temp_tj_c": 47.5,
        "temp_soc1_c": 46.0,
        "power_vdd_in_mw": 5612.0,
        "power_vdd_cpu_gpu_cv_mw": 1203.0,
        "power_vdd_soc_mw": 1602.0,
        "power_total_mw": 5612.0,  # VDD_IN is the module input; the others are parts of it
    }


def test_older_gr3d_and_emc_style() -> None:
    out = parse_line(fixture_lines("tegrastats_jp4.txt")[1])
    assert out["gpu_util_pct"] == 99.0
    assert out["gpu_freq_mhz"] == 1300.0
    assert out["emc_util_pct"] == 5.0
    assert out["cpu_util_pct"] == pytest.approx((35 + 32 + 30 + 33) / 4)
    assert out["power_vdd_in_mw"] == 9472.0 and out["power_total_mw"] == 9472.0
    assert out["power_vdd_4v0_wifi_mw"] == 0.0


def test_jetson_nano_pom_rails_and_iram() -> None:
    out = parse_line(fixture_lines("tegrastats_jp4.txt")[0])
    assert out["power_pom_5v_in_mw"] == 4521.0
    assert out["power_total_mw"] == 4521.0
    assert out["gpu_freq_mhz"] == 921.0
    assert not any("iram" in key for key in out)


def test_bytes_and_trailing_newline() -> None:
    line = fixture_lines("tegrastats_jp6.txt")[0]
    assert parse_line(line.encode() + b"\n") == parse_line(line)


def test_all_cores_off_leaves_cpu_out() -> None:
    out = parse_line("RAM 100/200MB CPU [off,off] GR3D_FREQ 0%")
    assert out == {"ram_used_mib": 100.0, "ram_total_mib": 200.0, "gpu_util_pct": 0.0}


@pytest.mark.parametrize(
    "line",
    [
        "",
        "   \n",
        "tegrastats: command not found",
        "RAM abc/defMB SWAP x/yMB CPU [a,b] GR3D_FREQ x%",
        "\x00\xff\xfe garbage \x1b[31m",
        "CPU [2%@729,1%@729] GR3D_FREQ 5% VDD_IN 1mW/1mW",  # no RAM field: not a report
        "Error: unable to open /sys/kernel/debug/bpmp/debug/clk",
        b"\xff\xfe\x00",
        None,
        12345,
    ],
)
def test_garbled_lines_give_empty_dict(line: object) -> None:
    assert parse_line(line) == {}  # type: ignore[arg-type]


def test_truncated_and_random_lines_never_raise() -> None:
    rng = random.Random(7)
    lines = [param.values[0] for param in ALL_LINES]
    alphabet = "RAMSWPCUGR3D_FEQVIN0123456789%@[],/ mWCxoff.-"
    candidates = [line[:cut] for line in lines for cut in range(0, len(line), 7)]
    candidates += ["".join(rng.choice(alphabet) for _ in range(80)) for _ in range(300)]
    for text in candidates:
        out = parse_line(text)
        assert isinstance(out, dict)
        assert all(isinstance(value, float) for value in out.values())


def fake_tegrastats(tmp_path: Path, lines: list[str]) -> Path:
    """An executable that behaves like tegrastats: records its args, prints lines forever."""
    data = tmp_path / "lines.txt"
    data.write_text("\n".join(lines) + "\n")
    script = tmp_path / "tegrastats"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > "{tmp_path / "args.txt"}"\n'
        "while true; do\n"
        '  while IFS= read -r line; do echo "$line"; sleep 0.05; done < '
        f'"{data}"\n'
        "done\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_reader_runs_fake_tegrastats(tmp_path: Path) -> None:
    lines = fixture_lines("tegrastats_jp6.txt")
    script = fake_tegrastats(tmp_path, ["not a report", *lines])
    reader = TegrastatsReader(interval_ms=50, path=str(script))
    try:
        assert wait_for(lambda: bool(reader.latest()))
        expected = [parse_line(line) for line in lines]
        assert reader.latest() in expected
        # It keeps reading: a later report replaces the first one.
        assert wait_for(lambda: reader.latest() != expected[0])
        assert (tmp_path / "args.txt").read_text().split() == ["--interval", "50"]
    finally:
        reader.close()
    assert reader._proc.poll() is not None
    assert not reader._thread.is_alive()
    reader.close()  # second close is harmless


def test_source_wraps_reader(tmp_path: Path) -> None:
    script = fake_tegrastats(tmp_path, fixture_lines("tegrastats_jp5.txt"))
    source = TegrastatsSource(TegrastatsReader(interval_ms=50, path=str(script)))
    try:
        assert source.name == "tegrastats"
        assert wait_for(lambda: "gpu_util_pct" in source.sample())
    finally:
        source.close()


def test_available(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not TegrastatsReader.available(str(tmp_path / "missing"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert not TegrastatsReader.available()
    fake_tegrastats(tmp_path, ["x"])
    assert TegrastatsReader.available()
    assert TegrastatsReader.available(str(tmp_path / "tegrastats"))


def test_missing_binary_raises_file_not_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError):
        TegrastatsReader()
    with pytest.raises(FileNotFoundError):
        TegrastatsReader(path=os.fspath(tmp_path / "missing"))


def test_xavier_lines() -> None:
    """AGX Xavier (JetPack 4: bare rail names, mW current/average) and Xavier NX (JetPack 5:
    VDD_* rails with mW units), in the formats those boards print."""
    agx, agx_busy, nx, nx_busy = fixture_lines("tegrastats_xavier.txt")
    out = parse_line(agx_busy)
    assert out["ram_used_mib"] == 9731.0 and out["ram_total_mib"] == 15825.0
    assert out["gpu_util_pct"] == 97.0 and out["temp_gpu_c"] == 51.5
    assert out["power_gpu_mw"] == 15218.0 and out["power_cpu_mw"] == 3207.0
    assert out["power_total_mw"] == 15218 + 3207 + 3819 + 0 + 1452 + 4011  # no VDD_IN: sum
    assert parse_line(agx)["cpu_util_pct"] == 0.75  # four cores on, four off
    out = parse_line(nx_busy)
    assert out["gpu_util_pct"] == 99.0 and out["swap_used_mib"] == 256.0
    assert out["power_vdd_in_mw"] == 11262.0 and out["power_total_mw"] == 11262.0
    assert parse_line(nx)["power_vdd_soc_mw"] == 1312.0
