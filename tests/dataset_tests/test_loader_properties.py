"""Whatever a CSV file holds, the loader returns rows that build specs or says what is wrong.

Rows start from a valid one (``_tables.BASE``); Hypothesis replaces some of its cells with
random text, huge, negative or non-finite numbers and empty cells, drops columns and adds extra
ones. ``load_measurements`` must then either return a table whose every row passes
``row_to_specs``, or raise ``DataFileError``: never another exception.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
from hypothesis import event
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

import dataset
from simulators import DataFileError
from tests.dataset_tests._tables import BASE

_SCHEMA = [column.name for column in dataset.COLUMNS]
_NUMBERS = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.inf, -math.inf, math.nan, 1e30, 8e9, 0, -1, 0.5, 2**63]),
)
_TEXTS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " ", "Infinity", "-inf", "NaN", "1e400", "8.0", "true", "none"]),
)
_PLAUSIBLE = st.one_of(  # values that some column accepts, so that many files load
    st.integers(min_value=0, max_value=8),
    st.floats(min_value=0.1, max_value=100.0),
    st.sampled_from(["ok", "oom", "error", "a100", "h100", "gelu", "full", "none", "false"]),
)
_CELLS = st.one_of(_PLAUSIBLE, _NUMBERS, _TEXTS)
_CHANGES = st.dictionaries(st.sampled_from(_SCHEMA), _CELLS, max_size=3)
_EXTRAS = st.dictionaries(st.text(min_size=1, max_size=8), _CELLS, max_size=2)


def _rows(changes: list[dict[str, Any]], extras: dict[str, Any]) -> list[dict[str, Any]]:
    """BASE changed by each of ``changes``, each in its own scenario unless changed."""
    return [{**BASE, "scenario": f"s{i}", **c, **extras} for i, c in enumerate(changes)]


@settings(max_examples=120, deadline=None)
@given(
    changes=st.lists(_CHANGES, min_size=1, max_size=4),
    extras=_EXTRAS,
    dropped=st.lists(st.sampled_from(list(BASE)), max_size=1),
)
def test_loader_returns_rows_that_build_specs_or_refuses_the_file(
    changes: list[dict[str, Any]], extras: dict[str, Any], dropped: list[str]
) -> None:
    frame = pd.DataFrame(_rows(changes, extras)).drop(columns=dropped, errors="ignore")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "random.csv"
        frame.to_csv(path, index=False)
        try:
            table = dataset.load_measurements(path)
        except DataFileError as exc:
            assert str(exc).startswith(f"{path}: ")
            event("refused")
            return
    event("loaded")
    assert 1 <= len(table) <= len(frame)
    for row in table.to_dict("records"):
        dataset.row_to_specs(row)


@settings(max_examples=40, deadline=None)
@given(text=st.text(alphabet=st.sampled_from('ab,"\n\r\t=1'), max_size=40))
def test_any_text_loads_or_is_refused_cleanly(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "text.csv"
        path.write_text(text, encoding="utf-8")
        try:
            dataset.load_measurements(path)
        except DataFileError as exc:
            assert str(exc).startswith(f"{path}: ")
