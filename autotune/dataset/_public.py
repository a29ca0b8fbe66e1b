"""The measurements this project ships (``autotune/dataset/data/<source>.csv``), and the
table a command's ``data=`` names (:func:`load_data`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from autotune.dataset._loader import load_measurements
from autotune.dataset._places import joined_places
from autotune.dataset._places import set_places
from autotune.simulators.errors import UserError

__all__ = ["DATA_DIR", "load_data", "load_public", "public_sources"]

DATA_DIR = Path(__file__).resolve().parent / "data"


def public_sources(data_dir: Path = DATA_DIR) -> tuple[str, ...]:
    """Names of the shipped sources, one file each (``vtrain``, ``simumax``, ...)."""
    return tuple(sorted(p.stem for p in data_dir.glob("*.csv")))


def load_public(sources: Sequence[str] | None = None, data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """Load the shipped measurements of ``sources`` (all of them when None), validated.

    Raises:
        UserError: an unknown source name (the message lists the shipped ones).
    """
    available = public_sources(data_dir)
    chosen = list(available) if sources is None else list(sources)
    unknown = [s for s in chosen if s not in available]
    if unknown:
        raise UserError(
            f"unknown data source(s) {', '.join(map(repr, unknown))}; available: "
            f"public, {', '.join(available)}, or a path to a schema-v1 .csv/.parquet file"
        )
    tables = [load_measurements(data_dir / f"{name}.csv") for name in chosen]
    table = pd.concat(tables, ignore_index=True)
    set_places(table, joined_places(tables))
    return table


def load_data(data: str) -> pd.DataFrame:
    """The measurement table for ``data=``: ``public``, a shipped source, or a file path.

    Raises:
        UserError: an unknown source name, or a malformed file (every problem listed).
    """
    if data == "public":
        return load_public()
    if data in public_sources():
        return load_public([data])
    if Path(data).suffix.lower() in (".csv", ".parquet", ".pq") or Path(data).exists():
        table = load_measurements(Path(data))
        table["source"] = table["source"].fillna(Path(data).stem)
        return table
    raise UserError(
        f"unknown data {data!r}; expected public, one of "
        f"{', '.join(public_sources())}, or a path to a .csv/.parquet file"
    )
