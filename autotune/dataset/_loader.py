"""Read a schema-v1 measurement file and either return it whole or refuse it whole."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pandas as pd

from autotune.dataset._clusters import cluster_names
from autotune.dataset._places import RowPlaces
from autotune.dataset._places import set_places
from autotune.dataset._schema import COLUMNS
from autotune.dataset._schema import Column
from autotune.dataset._specs import records
from autotune.dataset._specs import row_to_specs
from autotune.simulators.errors import DataFileError
from autotune.simulators.errors import SpecError
from autotune.simulators.files import not_a_file
from autotune.simulators.limits import MEMORY_SLACK
from autotune.simulators.limits import REPEAT_TOLERANCE
from autotune.simulators.limits import THROUGHPUT_TOLERANCE
from autotune.simulators.told import Problems

__all__ = ["load_measurements"]

_FIRST_LINE = 2  # data rows start on line 2 of a CSV file (line 1 is the header)
_PARQUET_START = b"PAR1"  # the magic bytes a Parquet file starts (and ends) with
# What pandas and pyarrow raise on a file that is not a readable table.
_READ_ERRORS = (ValueError, OSError, NotImplementedError, pd.errors.ParserError)


def _read_csv(path: Path) -> pd.DataFrame:
    """The data rows as text, indexed by their line, without blank lines or rows of empty cells.

    A row with another number of cells than the header is padded or cut to the header and
    named in ``attrs["ragged"]`` (line -> its cells), which :func:`_header_problems` refuses;
    so is a quoted cell that spans lines (it counts as one line).
    """
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle, strict=True)
        try:
            rows = list(reader)
        except csv.Error as exc:  # an unclosed quote at the end, a quote inside a bare cell
            where = f"line {reader.line_num}"
            raise DataFileError(f"{path}: not a CSV table: {exc} ({where})") from None
    if not rows:
        return pd.DataFrame()
    header = [name.strip() for name in rows[0]]
    width = len(header)
    ragged = {
        line: len(row) for line, row in enumerate(rows[1:], start=2) if row and len(row) != width
    }
    cells = [(row + [""] * width)[:width] for row in rows[1:]]
    frame = pd.DataFrame(cells, columns=header, index=range(2, len(rows) + 1), dtype=str)
    filled = frame.apply(lambda column: column.str.strip() != "")
    frame = frame[filled.any(axis="columns")] if len(frame) else frame
    frame.attrs["ragged"] = ragged
    return frame


def _read_parquet(path: Path) -> pd.DataFrame:
    """The rows as text, empty where missing, numbered as the lines of the same CSV."""
    frame = pd.read_parquet(path).astype(object)
    frame = frame.where(frame.notna(), "").map(str)
    frame.columns = [str(name) for name in frame.columns]
    frame.index = pd.RangeIndex(_FIRST_LINE, _FIRST_LINE + len(frame))
    return frame


def _read_text_cells(path: Path) -> pd.DataFrame:
    """Every cell as a string, empty where missing, so that parsing is ours alone."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _read_csv(path)
    if suffix in (".parquet", ".pq"):
        return _read_parquet(path)
    raise DataFileError(f"{path}: expected a .csv or .parquet file, got {suffix or 'no suffix'!r}")


def _header_problems(raw: pd.DataFrame, problems: Problems) -> None:
    """Columns named twice, columns with cells but no name, and cells that span lines."""
    names = list(raw.columns)
    for name in dict.fromkeys(names):
        if name and names.count(name) > 1:
            problems.add(1, None, f"column {name!r} appears {names.count(name)} times")
    for line, count in raw.attrs.get("ragged", {}).items():
        problems.add(line, None, f"{count} cells, the header has {len(names)} columns")
    for position, name in enumerate(names, start=1):
        cells = raw.iloc[:, position - 1]
        if not name and (cells.str.strip() != "").any():
            problems.add(1, None, f"column {position} has cells but no name")
        for line in cells.index[cells.str.contains("[\r\n]", regex=True)]:
            problems.add(
                int(line),
                name or str(position),
                "a cell spans lines (an unclosed quote joins the rows after it into one cell); "
                "keep each row on one line",
            )


def _read_cells(path: Path) -> pd.DataFrame:
    """The file's cells as text, or a refusal saying why it is no table.

    Raises:
        DataFileError: not a regular file, not UTF-8 (a Parquet file named .csv said so), or
            not a table.
    """
    why = not_a_file(path)
    if why is not None:
        said = "a folder, not a file" if why == "a folder" else why
        raise DataFileError(f"{path}: {said}; give a .csv or .parquet file")
    try:
        return _read_text_cells(path)
    except UnicodeDecodeError as exc:
        with path.open("rb") as handle:
            if handle.read(len(_PARQUET_START)) == _PARQUET_START:
                raise DataFileError(
                    f"{path}: a Parquet file named {path.suffix}; give it the suffix .parquet"
                ) from None
        raise DataFileError(
            f"{path}: cannot be read: not UTF-8 text ({exc.reason} at byte {exc.start}); "
            "save it as UTF-8"
        ) from None
    except _READ_ERRORS as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise DataFileError(f"{path}: cannot be read: {reason}") from None


def load_measurements(path: str | Path) -> pd.DataFrame:
    """Load and validate a measurement table in schema v1 (CSV or Parquet).

    Returns the table with every schema column present, parsed (ints, floats, bools) and with
    defaults filled; extra columns are kept as text. Rows are numbered as lines of the CSV
    file (the header is line 1; :func:`autotune.dataset.row_places`); blank lines and
    rows of empty cells are skipped. A well-formed row whose layout breaks a rule loads:
    :func:`dataset.priceable_rows` sets it apart.

    Raises:
        DataFileError: listing every problem at once (file, line, column, what was expected).
    """
    path = Path(path)
    raw = _read_cells(path)
    if raw.empty:
        raise DataFileError(f"{path}: no data rows")
    problems = Problems(path.name)
    _header_problems(raw, problems)
    if problems:
        raise DataFileError(problems.message(str(path), "file"))
    raw = raw.drop(columns=[""], errors="ignore")  # unnamed and empty, as after a trailing comma
    missing = [c.name for c in COLUMNS if c.required and c.name not in raw.columns]
    if missing:
        problems.note(f"{path}: missing required column(s): {', '.join(missing)}")
    bad_rows: set[Any] = set()
    parsed = {
        c.name: pd.Series(
            _parse_column(raw, c, problems, bad_rows), index=raw.index, dtype=c.dtype
        )
        for c in COLUMNS
    }
    table = pd.DataFrame(parsed)
    extra = [c for c in raw.columns if c not in parsed]
    table = pd.concat([table, raw[extra]], axis=1)
    table["sequence_parallel"] = table["sequence_parallel"].fillna(table["tp"] > 1)
    if not missing:  # the rules across rows and columns, on every row whose cells all parsed
        checked = table.drop(index=list(bad_rows))
        _row_problems(checked, problems)
        _duplicate_problems(checked, problems)
        _conflict_problems(checked, problems)
    if problems:
        raise DataFileError(problems.message(str(path), "file"))
    lines = tuple(int(line) for line in table.index)
    table = table.reset_index(drop=True)
    set_places(table, RowPlaces((path.name,) * len(lines), lines))
    return table


def _parse_column(
    raw: pd.DataFrame, column: Column, problems: Problems, bad_rows: set[Any]
) -> list[Any]:
    """Parse one column; each cell that fails adds a problem and marks its row bad.

    Each distinct cell is parsed once, so a column costs one parse per distinct value.
    """
    if column.name not in raw.columns:
        return [column.default] * len(raw)
    cells = raw[column.name].str.strip().tolist()
    outcomes = {cell: _parse_cell(column, cell) for cell in set(cells)}
    failed = {cell for cell, (_, expected) in outcomes.items() if expected}
    if failed:
        for line, cell in zip(raw.index, cells, strict=True):
            if cell in failed:
                problems.add(line, column.name, outcomes[cell][1], cell or None)
                bad_rows.add(line)
    return [outcomes[cell][0] for cell in cells]


def _parse_cell(column: Column, cell: str) -> tuple[Any, str]:
    """The parsed value of one stripped cell, and what was expected if it failed ("" if not)."""
    if cell == "":
        return column.default, "required, found empty" if column.required else ""
    try:
        return column.parse(cell), ""
    except ValueError as exc:
        return column.default, f"expected {exc}"


def _row_problems(table: pd.DataFrame, problems: Problems) -> None:
    """Rules across columns: a known cluster, specs that can be built, a time for ok rows,
    figures that agree. A layout that breaks a rule of ``Layout.violations`` is no problem of
    the file: the commands skip its row, naming the rule (:func:`dataset.priceable_rows`)."""
    known = set(cluster_names())
    for line, row in zip(table.index, records(table), strict=True):
        if row["status"] == "ok" and row["step_time_s"] is None:
            problems.add(line, "step_time_s", "required when status is ok, found empty")
        if row["cluster"] not in known:
            expected = f"expected one of {', '.join(sorted(known))} (conf/cluster/*.yaml)"
            problems.add(line, "cluster", expected, row["cluster"])
            continue
        try:
            job, _ = row_to_specs(row)
        except SpecError as exc:
            problems.add(line, "model/layout", str(exc))
            continue
        _figure_problems(line, row, job.cluster.device.memory_gib, problems)


def _figure_problems(
    line: int, row: dict[str, Any], capacity_gib: float, problems: Problems
) -> None:
    """A row's measured figures against each other and its device: a peak above the device
    memory in a run that fit, a throughput that is not the step time's
    (autotune/simulators/limits.py gives each tolerance)."""
    peak = row["peak_memory_gib"]
    if row["status"] == "ok" and peak is not None and peak > capacity_gib * (1 + MEMORY_SLACK):
        problems.add(
            line,
            "peak_memory_gib",
            f"{peak:g} GiB is more than the device's {capacity_gib:g} GiB, in a run that fit "
            "(its device memory, or a peak in other units?)",
        )
    step_s, tokens = row["step_time_s"], row["tokens_per_s_per_device"]
    if step_s is not None and tokens is not None:
        implied = row["global_batch_size"] * row["seq_len"] / (step_s * row["num_devices"])
        if not 1 / (1 + THROUGHPUT_TOLERANCE) <= tokens / implied <= 1 + THROUGHPUT_TOLERANCE:
            problems.add(
                line,
                "tokens_per_s_per_device",
                f"{tokens:g}, but global_batch_size x seq_len / (step_time_s x num_devices) = "
                f"{implied:.4g}; one of the two is in other units (a time in ms, tokens/s of all "
                "devices?)",
            )


def _duplicate_problems(table: pd.DataFrame, problems: Problems) -> None:
    """Rows equal to an earlier row in every column, each named with the line it repeats."""
    repeated = table[table.duplicated(keep=False)]
    if repeated.empty:
        return
    groups = repeated.groupby(list(repeated.columns), dropna=False, sort=False).ngroup()
    first: dict[int, Any] = {}
    for line, group in groups.items():
        if group in first:
            problems.add(
                int(line),
                None,
                f"the same value in every column as line {first[group]} (an exact duplicate)",
            )
        else:
            first[group] = line


# What a repeat of a measurement may differ in: the figures measured, the peer's prediction,
# where it comes from and the model's display name. Not the scenario: one scenario's rows
# share a setup that another's may not have (dlperf's scenarios are two code bases).
_NOT_THE_RUN = (
    "status",
    "step_time_s",
    "tokens_per_s_per_device",
    "peak_memory_gib",
    "predictor",
    "predicted_step_time_s",
    "source_ref",
    "license",
    "model",
)


def _conflict_problems(table: pd.DataFrame, problems: Problems) -> None:
    """Rows of the same scenario, job and layout (every column but :data:`_NOT_THE_RUN`
    equal) that disagree: one ran and one ran out of memory, or their step times are more than
    ``REPEAT_TOLERANCE`` apart. Each names both lines and what they measured."""
    key = [c.name for c in COLUMNS if c.name not in _NOT_THE_RUN]
    groups = table.groupby(key, dropna=False, sort=False).ngroup()
    repeated = table[groups.duplicated(keep=False)]
    for _, rows in repeated.groupby(groups[repeated.index], sort=False):
        lines = rows.index.tolist()
        statuses = dict(zip(rows["status"], lines, strict=True))
        if "ok" in statuses and "oom" in statuses:
            problems.note(
                f"{problems.name}, lines {statuses['ok']} and {statuses['oom']}: the same job and "
                "layout ran (status ok) and ran out of memory (status oom)"
            )
        times = rows["step_time_s"].dropna()
        if len(times) > 1 and times.max() > times.min() * (1 + REPEAT_TOLERANCE):
            fast, slow = times.idxmin(), times.idxmax()
            problems.note(
                f"{problems.name}, lines {fast} and {slow}: the same job and layout measured "
                f"{times[fast]:g} s and {times[slow]:g} s per step, more than "
                f"{REPEAT_TOLERANCE:.0%} apart (repeated runs differ by a few percent)"
            )
