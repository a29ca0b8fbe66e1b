"""The rows of a loaded table that a simulator can price, and the rows it cannot, by rule.

A well-formed row may still describe a layout that breaks a rule of
:meth:`simulators.Layout.violations` (degrees that do not multiply to the devices, tp not
dividing the heads, an expert grid larger than the world, ...): no simulator prices it. The
commands that read measured rows (the benchmark, ``calibrate``, the probe loop's ``measured=``)
set such rows apart with :func:`priceable_rows` and report each one with its file, line,
layout and the rules it breaks, in the rules' own words.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from autotune.dataset._places import row_places
from autotune.dataset._places import set_places
from autotune.dataset._specs import table_specs
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators.prediction import reading

__all__ = ["PriceableRows", "SkippedRow", "priceable_rows", "take_rows"]

_FIRST_LINE = 2  # the first data row of a CSV file (line 1 is the header)


@dataclass(frozen=True, slots=True)
class SkippedRow:
    """A row left out because its layout breaks a rule: where it is, what it is, and why.

    ``rules`` are the names of the broken rules (:data:`autotune.simulators.layout.RULE_NAMES`),
    ``reasons`` their sentences.
    """

    file: str
    line: int
    source: str
    layout: str
    rules: tuple[str, ...]
    reasons: tuple[str, ...]

    @property
    def place(self) -> str:
        """``runs.csv, line 3`` (``line 3`` for a table that no file gave)."""
        return f"{self.file}, line {self.line}" if self.file else f"line {self.line}"

    def describe(self) -> str:
        """One line: the place, the layout and every broken rule's sentence."""
        return f"{self.place}: layout {self.layout}: {'; '.join(self.reasons)}"

    def as_dict(self) -> dict[str, Any]:
        """Every field by name (the JSON form)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True, eq=False)
class PriceableRows:
    """A loaded table split by the layout rules.

    ``table``: the rows whose layout keeps every rule, in order and renumbered from 0 (each
    keeps its file and line); ``specs``: theirs; ``skipped``: the others.
    """

    table: pd.DataFrame
    specs: list[tuple[Job, Layout]]
    skipped: tuple[SkippedRow, ...]


def _places(table: pd.DataFrame) -> list[tuple[str, int]]:
    """The file and the line of each row of a loaded table (``("", n)``, as if a CSV file's,
    for a table built otherwise)."""
    places = row_places(table)
    if places is not None:
        return list(zip(places.files, places.lines, strict=True))
    return [("", position + _FIRST_LINE) for position in range(len(table))]


def take_rows(table: pd.DataFrame, positions: Iterable[int]) -> pd.DataFrame:
    """The rows at ``positions``, renumbered from 0, each keeping the file and line it came
    from (:func:`autotune.dataset.row_places`)."""
    chosen = [int(position) for position in positions]
    taken = table.iloc[chosen].reset_index(drop=True)
    places = row_places(table)
    set_places(taken, None if places is None else places.take(chosen))
    return taken


def priceable_rows(table: pd.DataFrame, job: Job | None = None) -> PriceableRows:
    """Split a loaded table (:func:`dataset.load_measurements`) into the rows a simulator can
    price and those whose layout breaks a rule (:meth:`simulators.Layout.broken_rules`): of
    its own job, or of ``job``, whose rows these are (a search's probes: its settings that no
    column holds, the framework's release among them, decide which layouts run)."""
    specs = table_specs(table)
    sources = table["source"].fillna("").astype(str).tolist()
    kept: list[int] = []
    skipped: list[SkippedRow] = []
    for position, ((own, layout), (file, line), source) in enumerate(
        zip(specs, _places(table), sources, strict=True)
    ):
        broken = layout.broken_rules(job or own)
        if not broken:
            kept.append(position)
            continue
        reasons = tuple(sentence for sentences in broken.values() for sentence in sentences)
        skipped.append(
            SkippedRow(file, int(line), source, layout.describe(), tuple(broken), reasons)
        )
    priceable = take_rows(table, kept)
    full = at_device_ceiling(priceable, [specs[i][0] for i in kept])
    if full.any():  # the allocator took the whole device: the reading bounds the need only
        priceable["peak_memory_gib"] = priceable["peak_memory_gib"].mask(pd.Series(full))
    return PriceableRows(priceable, [specs[i] for i in kept], tuple(skipped))


def peak_readings(table: pd.DataFrame) -> np.ndarray:
    """Each row's reading of its peak: its ``peak_memory_measure`` on its ``peak_memory_rank``
    (:data:`autotune.simulators.prediction.MEMORY_READINGS`)."""
    measures = table["peak_memory_measure"].astype(str)
    ranks = table["peak_memory_rank"].astype(str)
    pairs = zip(measures, ranks, strict=True)
    return np.array([reading(measure, rank) for measure, rank in pairs], dtype=object)


def at_device_ceiling(table: pd.DataFrame, jobs: Sequence[Job]) -> np.ndarray:
    """Per row (``jobs``: each row's job), whether its peak is a device-level reading
    (``nvidia-smi``, ``npu-smi``) at or above the memory its device gives the allocator (the
    device's memory less ``runtime_memory_gib``). PyTorch's caching allocator keeps what it
    got, so such a reading says only that the run fit, not how much it needed: it is read as
    no measured peak
    (docs/decisions/0064-a-device-level-peak-at-the-ceiling-says-only-that-the-run-fit.md)."""
    peaks = table["peak_memory_gib"].to_numpy(dtype=float, na_value=np.nan)
    device_level = (table["peak_memory_measure"].astype(str) == "device").to_numpy()
    ceiling = np.array(
        [job.cluster.device.memory_gib - job.cluster.device.runtime_memory_gib for job in jobs]
    )
    return np.asarray(device_level & (peaks >= ceiling))  # NaN: no reading, never at it
