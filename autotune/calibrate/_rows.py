"""Measured rows for a calibration: checked against what was asked, named in messages."""

from __future__ import annotations

import functools
import logging
import math
from collections import Counter
from collections.abc import Collection
from collections.abc import Sequence

import numpy as np
import pandas as pd

from autotune import dataset
from autotune.calibrate._fit import Run
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import UserError

__all__ = [
    "row_names",
    "row_runs",
    "runs_of",
    "shipped_rows",
    "shipped_runs_beyond",
    "single_value",
    "skipped_notes",
    "span_text",
]

log = logging.getLogger("autotune.calibrate")
_SHOWN = 8  # rows named in a message before "and N more"


def row_names(table: pd.DataFrame) -> list[str]:
    """How each row is named in messages: ``<source> line <n>`` (its line in the CSV file)."""
    places = dataset.row_places(table)
    if places is None:
        lines = [f"row {i + 1}" for i in range(len(table))]
    else:
        lines = [f"line {n}" for n in places.lines]
    sources = table["source"].fillna("").astype(str).tolist()
    return [f"{s} {line}".strip() for s, line in zip(sources, lines, strict=True)]


def span_text(names: Sequence[str], separator: str = ", ") -> str:
    """A short list of row names (or notes): the first few, then how many more."""
    shown = separator.join(names[:_SHOWN])
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
    table: pd.DataFrame, specs: Sequence[tuple[Job, Layout]], labels: Sequence[str] = ()
) -> list[Run | None]:
    """Each row as a :class:`Run`, None when it was not measured (status error). Every row's
    layout keeps the rules (:func:`dataset.priceable_rows`). ``labels`` name the runs (none:
    unnamed)."""
    status = table["status"].astype(str).tolist()
    times = table["step_time_s"].to_numpy(dtype=float, na_value=np.nan)
    memory = table["peak_memory_gib"].to_numpy(dtype=float, na_value=np.nan)
    measures = table["peak_memory_measure"].astype(str).tolist()
    ranks = table["peak_memory_rank"].astype(str).tolist()
    groups = (
        table["source"].fillna("").astype(str) + "/" + table["scenario"].astype(str)
    ).tolist()
    runs: list[Run | None] = []
    for i, spec in enumerate(specs):
        if status[i] not in ("ok", "oom"):
            runs.append(None)
            continue
        runs.append(
            Run(
                specs=spec,
                status=status[i],
                step_time_s=float(times[i]) if status[i] == "ok" else math.nan,
                peak_memory_gib=float(memory[i]),
                peak_memory_measure=measures[i],
                peak_memory_rank=ranks[i],
                group=groups[i],
                label=labels[i] if labels else "",
            )
        )
    return runs


@functools.cache
def shipped_rows() -> tuple[pd.DataFrame, tuple[Run | None, ...]]:
    """Every shipped row whose layout keeps the rules, and each as a run (None: not measured),
    loaded once; neither is to be changed."""
    priceable = dataset.priceable_rows(dataset.load_public())
    return priceable.table, tuple(row_runs(priceable.table, priceable.specs))


def shipped_runs_beyond(held: Collection[str]) -> list[tuple[Run, str]]:
    """Every measured shipped row of the sources not in ``held``, as a run with its source:
    the shipped runs a table of those sources does not hold."""
    if set(dataset.public_sources()) <= set(held):
        return []
    table, runs = shipped_rows()
    sources = table["source"].astype(str).tolist()
    return [
        (run, source)
        for run, source in zip(runs, sources, strict=True)
        if run is not None and source not in held
    ]


def skipped_notes(skipped: Sequence[dataset.SkippedRow]) -> list[str]:
    """Notes on the rows left out because their layout breaks a rule: how many and which
    rules, then each row with its file, line, layout and the rules' sentences."""
    if not skipped:
        return []
    rules = Counter(rule for row in skipped for rule in row.rules)
    counts = ", ".join(f"{rule} {n}" for rule, n in rules.most_common())
    return [
        f"{len(skipped)} row(s) left out: their layout breaks a rule (rows per rule: {counts})",
        *(f"left out: {row.describe()}" for row in skipped),
    ]


def runs_of(priceable: dataset.PriceableRows, data: str) -> tuple[list[Run], list[str]]:
    """The rows as :class:`Run` (ok and oom rows whose layout keeps the rules), and notes on
    the rows left out, each named."""
    names = row_names(priceable.table)
    rows = row_runs(priceable.table, priceable.specs, names)
    runs = [run for run in rows if run is not None]
    errors = [name for name, run in zip(names, rows, strict=True) if run is None]
    notes = skipped_notes(priceable.skipped)
    if errors:
        notes.append(f"{len(errors)} row(s) with status error left out: {span_text(errors)}")
    if not runs:
        raise UserError(
            f"{data}: no row to calibrate on: none has status ok or oom with a valid layout"
            + (f" ({span_text(notes, '; ')})" if notes else "")
        )
    return runs, notes
