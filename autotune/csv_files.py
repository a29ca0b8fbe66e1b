"""CSV files that a spreadsheet opens as data, never as formulas.

A text cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is read as a
formula by Excel, LibreOffice and Google Sheets; such a cell is written with a leading single
quote, which makes it text (OWASP, "CSV Injection"). Numbers are written unchanged. Every CSV
file the commands write goes through :func:`write_csv`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from autotune.simulators.files import atomic_writer

__all__ = ["escape_cell", "write_csv"]

_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def escape_cell(value: Any) -> Any:
    """``value`` with a leading ``'`` if it is text that a spreadsheet would run as a formula.

    Example:
        >>> escape_cell("=HYPERLINK(1)"), escape_cell("-2"), escape_cell(-2.0), escape_cell("a")
        ("'=HYPERLINK(1)", "'-2", -2.0, 'a')
    """
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def write_csv(frame: pd.DataFrame, path: Path, *, follow_symlinks: bool = True) -> Path:
    """Write ``frame`` to ``path`` as CSV without its index, formula-like text escaped,
    whole or not at all (``autotune.simulators.files.atomic_writer``)."""
    safe = frame.rename(columns=escape_cell)
    for position in range(safe.shape[1]):
        values = safe.iloc[:, position]
        if not pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
            safe.isetitem(position, values.map(escape_cell))
    with atomic_writer(path, follow_symlinks=follow_symlinks, newline="") as handle:
        safe.to_csv(handle, index=False)
    return path
