"""The scripts of ``bench/``, imported as they import one another.

They are scripts, not a package: each imports its neighbours by their bare
names (``import servers``), so ``bench/`` goes on the path first.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py``."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)
