"""Measured rows for a calibration: checked against what was asked, named in messages."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

import dataset
from autotune.calibrate._fit import Run
from autotune.calibrate._fit import Specs
from simulators import UserError

__all__ = ["row_names", "row_runs", "runs_of", "single_value", "span_text"]

log = logging.getLogger("autotune.calibrate")
_SHOWN = 8  # rows named in a message before "and N more"


def row_names(table: pd.DataFrame) -> list[str]:
    """How each row is named in messages: ``<source> line <n>`` (its line in the CSV file)."""
    lines = table.attrs.get("lines")
    if not lines or len(lines) != len(table):
        lines = [f"row {i + 1}" for i in range(len(table))]
    else:
        lines = [f"line {n}" for n in lines]
    sources = table["source"].fillna("").astype(str).tolist()
    return [f"{s} {line}".strip() for s, line in zip(sources, lines, strict=True)]


def span_text(names: Sequence[str]) -> str:
    """A short list of row names: the first few, then how many more."""
    shown = ", ".join(names[:_SHOWN])
    more = len(names) - _SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def single_value(
    table: pd.DataFrame, column: str, wanted: str | None, what: str, data: str
) -> str | None:
    """The one value of ``column`` the rows share (``wanted`` when given).

    Raises:
        UserError: rows with another value than ``wanted`` (naming them), or, when nothing was
            asked, rows with several values (naming each value's rows).
    """
    names = row_names(table)
    values = table[column].fillna("").astype(str).to_numpy()
    if wanted is not None:
        other = np.flatnonzero(values != wanted)
        if len(other):
            found = ", ".join(sorted(set(values[other])))
            raise UserError(
                f"{data}: {len(other)} row(s) of another {what} than {wanted} ({found}): "
                f"{span_text([names[i] for i in other])}; keep only rows of {what} {wanted}"
            )
        return wanted
    distinct = sorted(set(values) - {""})
    if len(distinct) > 1:
        parts = [
            f"{value} ({span_text([names[i] for i in np.flatnonzero(values == value)])})"
            for value in distinct
        ]
        raise UserError(
            f"{data}: rows of {len(distinct)} {what}s: {'; '.join(parts)}; a calibration is for "
            f"one {what}: keep only its rows (rows.source=NAME keeps one source)"
        )
    return distinct[0] if distinct else None


def row_runs(
    table: pd.DataFrame, specs: Sequence[Specs], labels: Sequence[str] = ()
) -> list[Run | str]:
    """Each row as a :class:`Run`, or why it is not one: ``"error"`` when it was not measured
    (status error), ``"broken"`` when its layout breaks a rule (no simulator prices it).
    ``labels`` name the runs (none: unnamed)."""
    status = table["status"].astype(str).tolist()
    times = table["step_time_s"].to_numpy(dtype=float, na_value=np.nan)
    memory = table["peak_memory_gib"].to_numpy(dtype=float, na_value=np.nan)
    measures = table["peak_memory_measure"].astype(str).tolist()
    groups = (
        table["source"].fillna("").astype(str) + "/" + table["scenario"].astype(str)
    ).tolist()
    runs: list[Run | str] = []
    for i, spec in enumerate(specs):
        if status[i] not in ("ok", "oom"):
            runs.append("error")
        elif spec[3].violations(*spec[:3]):
            runs.append("broken")
        else:
            runs.append(
                Run(
                    specs=spec,
                    status=status[i],
                    step_time_s=float(times[i]) if status[i] == "ok" else math.nan,
                    peak_memory_gib=float(memory[i]),
                    peak_memory_measure=measures[i],
                    group=groups[i],
                    label=labels[i] if labels else "",
                )
            )
    return runs


def runs_of(table: pd.DataFrame, data: str) -> tuple[list[Run], list[str]]:
    """The rows as :class:`Run` (ok and oom rows whose layout keeps the rules), and notes on
    the rows left out."""
    names = row_names(table)
    rows = row_runs(table, dataset.table_specs(table), names)
    runs = [run for run in rows if isinstance(run, Run)]
    errors = [name for name, run in zip(names, rows, strict=True) if run == "error"]
    broken = [name for name, run in zip(names, rows, strict=True) if run == "broken"]
    notes = []
    if errors:
        notes.append(f"{len(errors)} row(s) with status error left out: {span_text(errors)}")
    if broken:
        notes.append(
            f"{len(broken)} row(s) whose layout breaks a rule left out: {span_text(broken)}"
        )
    if not runs:
        raise UserError(
            f"{data}: no row to calibrate on: none has status ok or oom with a valid layout"
            + (f" ({'; '.join(notes)})" if notes else "")
        )
    return runs, notes
