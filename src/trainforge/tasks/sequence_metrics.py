"""Error rates of generated sequences against references (G2P's PER and WER).

A sequence is split into units on whitespace (phonemes in a CMUdict pronunciation).
PER = total Levenshtein distance over units / total reference units;
WER = share of sequences whose units differ from the reference in any way — in G2P each
sequence is one word, hence "word error rate". Written by hand: the edit distance over lists
is ten lines, and `jiwer`/`editdistance` would add a dependency for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def edit_distance(hyp: Sequence[str], ref: Sequence[str]) -> int:
    """Levenshtein distance (substitutions, insertions, deletions all cost 1)."""
    previous = list(range(len(ref) + 1))
    for i, h in enumerate(hyp, start=1):
        current = [i]
        for j, r in enumerate(ref, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (h != r)))
        previous = current
    return previous[-1]


@dataclass
class ErrorCounts:
    unit_errors: int = 0
    ref_units: int = 0
    seq_errors: int = 0
    sequences: int = 0

    def add(self, hyp: str, ref: str) -> None:
        h, r = hyp.split(), ref.split()
        distance = edit_distance(h, r)
        self.unit_errors += distance
        self.ref_units += len(r)
        self.seq_errors += int(h != r)
        self.sequences += 1

    @property
    def per(self) -> float:
        return self.unit_errors / max(1, self.ref_units)

    @property
    def wer(self) -> float:
        return self.seq_errors / max(1, self.sequences)


def error_counts(hyps: Sequence[str], refs: Sequence[str]) -> ErrorCounts:
    counts = ErrorCounts()
    for hyp, ref in zip(hyps, refs, strict=True):
        counts.add(hyp, ref)
    return counts
