"""CSV files the tool writes, with spreadsheet formulas escaped (OWASP CSV injection)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["write_csv"]

_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _escape(value: Any) -> Any:
    return f"'{value}" if isinstance(value, str) and value.startswith(_FORMULA) else value


def write_csv(frame: pd.DataFrame, path: Path) -> Path:
    """Write ``frame`` to ``path``; text cells that a spreadsheet would run start with ``'``."""
    frame.map(_escape).to_csv(path, index=False)
    return path
