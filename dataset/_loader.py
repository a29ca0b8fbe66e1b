"""Read a schema-v1 measurement file and either return it whole or refuse it whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from dataset._clusters import cluster_names
from dataset._schema import COLUMNS
from dataset._specs import row_to_specs
from simulators.errors import DataFileError
from simulators.errors import SpecError

__all__ = ["load_measurements"]

_FIRST_LINE = 2  # data rows start on line 2 of a CSV file (line 1 is the header)


def _read_text_cells(path: Path) -> pd.DataFrame:
    """Every cell as a string, empty where missing, so that parsing is ours alone."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return pd.read_csv(path, dtype=str, keep_default_na=False)
    if suffix in (".parquet", ".pq"):
        frame = pd.read_parquet(path).astype(object)
        return frame.where(frame.notna(), "").map(str)
    raise DataFileError(f"{path}: expected a .csv or .parquet file, got {suffix or 'no suffix'!r}")


def load_measurements(path: str | Path) -> pd.DataFrame:
    """Load and validate a measurement table in schema v1 (CSV or Parquet).

    Returns the table with every schema column present, parsed (ints, floats, bools) and with
    defaults filled; extra columns are kept as text. Rows are numbered as lines of the CSV
    file (the header is line 1).

    Raises:
        DataFileError: listing every problem at once (file, line, column, what was expected).
    """
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"{path}: no such file")
    try:
        raw = _read_text_cells(path)
    except (ValueError, OSError, pd.errors.ParserError) as exc:
        raise DataFileError(f"{path}: cannot be read: {exc}") from None
    if raw.empty:
        raise DataFileError(f"{path}: no data rows")
    problems: list[str] = []
    missing = [c.name for c in COLUMNS if c.required and c.name not in raw.columns]
    if missing:
        problems.append(f"{path}: missing required column(s): {', '.join(missing)}")
    bad_rows: set[Any] = set()
    parsed = {
        c.name: pd.Series(
            _parse_column(path, raw, c, problems, bad_rows), index=raw.index, dtype=c.dtype
        )
        for c in COLUMNS
    }
    table = pd.DataFrame(parsed)
    extra = [c for c in raw.columns if c not in parsed]
    table = pd.concat([table, raw[extra]], axis=1)
    table["sequence_parallel"] = table["sequence_parallel"].fillna(table["tp"] > 1)
    if not missing:  # the rules across columns, on every row whose cells all parsed
        problems.extend(_row_problems(path, table.drop(index=list(bad_rows))))
    if problems:
        raise DataFileError(_message(path, problems))
    return table.reset_index(drop=True)


def _parse_column(
    path: Path, raw: pd.DataFrame, column: Any, problems: list[str], bad_rows: set[Any]
) -> list[Any]:
    """Parse one column; each cell that fails adds a problem and marks its row bad."""
    if column.name not in raw.columns:
        return [column.default] * len(raw)
    values: list[Any] = []
    for index, cell in raw[column.name].items():
        cell = cell.strip()
        if cell == "":
            if column.required:
                problems.append(f"{_where(path, index, column.name)}: required, found empty")
                bad_rows.add(index)
            values.append(column.default)
            continue
        try:
            values.append(column.parse(cell))
        except ValueError as exc:
            problems.append(f"{_where(path, index, column.name)}: expected {exc}, got {cell!r}")
            bad_rows.add(index)
            values.append(column.default)
    return values


def _row_problems(path: Path, table: pd.DataFrame) -> list[str]:
    """Rules across columns: known cluster, degrees times world size, a time for ok rows."""
    problems: list[str] = []
    known = set(cluster_names())
    for index, row in zip(table.index, table.to_dict("records"), strict=True):
        if row["status"] == "ok" and pd.isna(row["step_time_s"]):
            problems.append(
                f"{_where(path, index, 'step_time_s')}: required when status is ok, found empty"
            )
        if row["cluster"] not in known:
            problems.append(
                f"{_where(path, index, 'cluster')}: expected one of {', '.join(sorted(known))} "
                f"(conf/cluster/*.yaml), got {row['cluster']!r}"
            )
            continue
        try:
            *_, layout = row_to_specs(row)
        except SpecError as exc:
            problems.append(f"{_where(path, index, 'model/layout')}: {exc}")
            continue
        for problem in layout.world_size_problems(row["num_devices"], " (num_devices)"):
            problems.append(f"{_where(path, index, 'dp,tp,pp,cp')}: {problem}")
    return problems


def _where(path: Path, index: Any, column: str) -> str:
    return f"{path.name}, line {int(index) + _FIRST_LINE}, column {column}"


def _message(path: Path, problems: list[str]) -> str:
    head = f"{path}: {len(problems)} problem(s); the file was not loaded:"
    return "\n  - ".join([head, *problems])
