"""Measured ground truth: the schema-v1 measurement table, its loader and the shipped data.

Example:
    >>> import dataset
    >>> table = dataset.load_public(["korthikanti"])
    >>> model, cluster, train, layout = dataset.row_to_specs(table.iloc[0])
    >>> layout.tp
    8
"""

from __future__ import annotations

from dataset._clusters import cluster_names
from dataset._loader import load_measurements
from dataset._public import DATA_DIR
from dataset._public import load_public
from dataset._public import public_sources
from dataset._rows import PriceableRows
from dataset._rows import SkippedRow
from dataset._rows import priceable_rows
from dataset._rows import take_rows
from dataset._schema import COLUMNS
from dataset._schema import SCHEMA_VERSION
from dataset._schema import STATUSES
from dataset._specs import row_to_specs
from dataset._specs import table_specs

__all__ = [
    "COLUMNS",
    "DATA_DIR",
    "SCHEMA_VERSION",
    "STATUSES",
    "PriceableRows",
    "SkippedRow",
    "cluster_names",
    "load_measurements",
    "load_public",
    "priceable_rows",
    "public_sources",
    "row_to_specs",
    "table_specs",
    "take_rows",
]
