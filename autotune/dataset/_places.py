"""Where each row of a loaded table comes from: its file and its line, for the messages that
name rows. A loaded table carries them in ``attrs["places"]``, which follows the rows through
:func:`autotune.dataset.take_rows` and :func:`autotune.dataset.load_public`'s concatenation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["RowPlaces", "joined_places", "row_places", "set_places"]

_KEY = "places"


@dataclass(frozen=True, slots=True)
class RowPlaces:
    """The file name and the CSV line (the header is line 1) of each row of a table."""

    files: tuple[str, ...]
    lines: tuple[int, ...]

    def __deepcopy__(self, memo: dict[int, object]) -> RowPlaces:
        # Immutable, so shared. pandas deep-copies a frame's attrs into every frame and column
        # taken from it; as lists, a whole table's places cost the benchmark seconds per run.
        return self

    def __len__(self) -> int:
        return len(self.lines)

    def take(self, positions: Sequence[int] | np.ndarray) -> RowPlaces:
        return RowPlaces(
            tuple(self.files[i] for i in positions), tuple(self.lines[i] for i in positions)
        )


def set_places(table: pd.DataFrame, places: RowPlaces | None) -> None:
    if places is None:
        table.attrs.pop(_KEY, None)
    else:
        table.attrs[_KEY] = places


def row_places(table: pd.DataFrame) -> RowPlaces | None:
    """The places of ``table``'s rows, or None for a table not read from a file (or whose rows
    no longer match them)."""
    places = table.attrs.get(_KEY)
    if isinstance(places, RowPlaces) and len(places) == len(table):
        return places
    return None


def joined_places(tables: Sequence[pd.DataFrame]) -> RowPlaces | None:
    """The places of the rows of ``tables`` stacked in this order; None if one has none."""
    found = [places for table in tables if (places := row_places(table)) is not None]
    if len(found) < len(tables):
        return None
    return RowPlaces(
        tuple(f for p in found for f in p.files), tuple(n for p in found for n in p.lines)
    )
