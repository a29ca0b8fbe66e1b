"""Every CSV the commands write opens in a spreadsheet as data, never as a formula."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest

from autotune.csv_files import escape_cell
from autotune.csv_files import write_csv


@pytest.mark.parametrize(
    ("cell", "written"),
    [
        ("=1+2", "'=1+2"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("dp8 tp1", "dp8 tp1"),
        ("a=b", "a=b"),
        ("", ""),
    ],
)
def test_text_that_starts_a_formula_is_quoted(cell: str, written: str) -> None:
    assert escape_cell(cell) == written


def test_numbers_and_other_values_are_untouched() -> None:
    for value in (-1.5, -3, 0, True, None, float("nan")):
        assert escape_cell(value) is value


def test_write_csv_escapes_text_cells_and_header_and_keeps_numbers(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "name": ["=cmd|' /C calc'!A0", "ok", None],
            "mixed": ["-2", 3.5, "@x"],  # an object column: text escaped, numbers not
            "time_s": [-1.5, 2.0, float("nan")],
            "count": pd.array([-1, 2, None], dtype="Int64"),
            "fits": [True, False, True],
            "=header": [1, 2, 3],
        }
    )
    path = write_csv(frame, tmp_path / "out.csv")
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["name", "mixed", "time_s", "count", "fits", "'=header"]
    assert rows[1] == ["'=cmd|' /C calc'!A0", "'-2", "-1.5", "-1", "True", "1"]
    assert rows[2] == ["ok", "3.5", "2.0", "2", "False", "2"]
    assert rows[3] == ["", "'@x", "", "", "True", "3"]
    assert frame.loc[0, "name"] == "=cmd|' /C calc'!A0"  # the caller's frame is not changed
