"""The benchmark scripts, imported as modules by the tests (they are not a package)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def import_script(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module, with its folder on the path only while importing
    (the scripts import their sibling ``_results``)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))
