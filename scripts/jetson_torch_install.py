#!/usr/bin/env python3
"""Print the pip commands that install PyTorch for this Jetson's JetPack release.

The first thing run on a fresh Jetson, before trainforge or a virtual environment is
installed: it puts this checkout's `src/` on sys.path so only the standard library is needed.
The logic lives in `trainforge.hardware.jetson_wheels` (also behind `trainforge jetson-wheel`).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Prefer this checkout's sources: trainforge may not be installed yet (or be another version).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from trainforge.hardware.jetson_wheels import main

if __name__ == "__main__":
    sys.exit(main())
