"""The G2P benchmark runs and prints what it claims (a tiny model and budget here)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import g2p


@pytest.mark.slow  # imports, tokenizer, calibration and two decodes: ~15 s on 2 busy cores
def test_g2p_benchmark_prints_per_wer_against_the_reference():
    import torch

    threads = torch.get_num_threads()
    try:
        text, ratios = g2p.run(2.0, test_words=12, threads=1, train_words=300, size="tiny")
    finally:
        torch.set_num_threads(threads)
    lines = text.splitlines()
    assert lines[0].startswith(
        "G2P CMUdict test split (12 words, the first of the split), CPU budget 2 s of training"
    )
    reference = next(line for line in lines if line.startswith("Yolchuyeva et al. 2019"))
    assert re.search(r"\s5\.2%\s+22\.1%$", reference)
    measured = {}
    for label in ("untrained (random init)", "trainforge, tiny llama"):
        row = next(line for line in lines if line.startswith(label))
        per, wer = (float(x) for x in re.findall(r"([\d.]+)%", row)[-2:])
        assert per >= 0 and 0 <= wer <= 100
        measured[label] = per, wer
    per, wer = measured["trainforge, tiny llama"]
    assert ratios["g2p_per_ratio_to_reference"] * 5.2 == pytest.approx(per, abs=0.06)
    assert ratios["g2p_wer_ratio_to_reference"] * 22.1 == pytest.approx(wer, abs=0.06)
    untrained_per = measured["untrained (random init)"][0]
    assert ratios["g2p_per_ratio_to_untrained"] == pytest.approx(per / untrained_per, abs=0.01)
    assert "ratio to reference: PER x" in text
    decoding = next(line for line in lines if line.startswith("decoding the 12 test words: "))
    speedup = float(re.search(r": x([\d.]+); PER", decoding).group(1))
    assert ratios["g2p_decode_speedup"] == pytest.approx(speedup, abs=0.006)
    previous = next(line for line in lines if line.startswith("PER against the previous"))
    assert "(65.7% after 120 s)" in previous
    assert ratios["g2p_per_vs_previous"] == pytest.approx(per / 65.7, abs=0.01)
