"""Measured ground truth: the schema-v1 measurement table, its loader and the shipped data.

Example:
    >>> from autotune import dataset
    >>> table = dataset.load_public(["korthikanti"])
    >>> job, layout = dataset.row_to_specs(table.iloc[0])
    >>> layout.tp
    8
"""

from __future__ import annotations

from autotune.dataset._clusters import cluster_names
from autotune.dataset._loader import load_measurements
from autotune.dataset._places import RowPlaces
from autotune.dataset._places import row_places
from autotune.dataset._public import DATA_DIR
from autotune.dataset._public import load_data
from autotune.dataset._public import load_public
from autotune.dataset._public import public_sources
from autotune.dataset._rows import PriceableRows
from autotune.dataset._rows import SkippedRow
from autotune.dataset._rows import peak_readings
from autotune.dataset._rows import priceable_rows
from autotune.dataset._rows import take_rows
from autotune.dataset._schema import COLUMNS
from autotune.dataset._schema import SCHEMA_VERSION
from autotune.dataset._schema import STATUSES
from autotune.dataset._specs import MODEL_FIELDS
from autotune.dataset._specs import records
from autotune.dataset._specs import row_to_specs
from autotune.dataset._specs import table_specs

__all__ = [
    "COLUMNS",
    "DATA_DIR",
    "MODEL_FIELDS",
    "SCHEMA_VERSION",
    "STATUSES",
    "PriceableRows",
    "RowPlaces",
    "SkippedRow",
    "cluster_names",
    "load_measurements",
    "load_data",
    "load_public",
    "peak_readings",
    "priceable_rows",
    "public_sources",
    "records",
    "row_places",
    "row_to_specs",
    "table_specs",
    "take_rows",
]
