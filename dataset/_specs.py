"""From one validated measurement row to the specs a simulator speaks."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pandas as pd

import catalog
from dataset._clusters import sized_cluster
from simulators.layout import LAYOUT_FIELDS
from simulators.layout import Layout
from simulators.specs import ClusterSpec
from simulators.specs import ModelSpec
from simulators.specs import TrainSpec

__all__ = ["MODEL_FIELDS", "row_to_specs"]

# The architecture columns: every ModelSpec field but the display name (``model``).
MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ModelSpec) if f.name != "name")
_OVERRIDES = ("devices_per_node", "device_memory_gib", "intra_node_gbps", "inter_node_gbps")


def _given(row: Mapping[str, Any], key: str) -> Any:
    """The row's value, or None when the column is absent or the cell empty (NaN, "")."""
    value = row.get(key)
    if value is None or isinstance(value, tuple):
        return value
    if (not isinstance(value, str) and pd.isna(value)) or value == "":
        return None
    return value.item() if hasattr(value, "item") else value  # numpy scalar -> Python


def row_to_specs(row: Mapping[str, Any]) -> tuple[ModelSpec, ClusterSpec, TrainSpec, Layout]:
    """The model, cluster, training step and layout of one row of a loaded measurement table.

    ``row`` is a row of :func:`dataset.load_measurements` (a mapping such as a pandas Series):
    types parsed and defaults filled. The cluster is ``conf/cluster/<cluster>.yaml`` sized to
    ``num_devices``, with the row's ``devices_per_node``, ``device_memory_gib``,
    ``intra_node_gbps`` and ``inter_node_gbps`` where given.

    Raises:
        SpecError: a value that the specs refuse (unknown cluster, kv heads not dividing heads).
    """
    model_values = {k: _given(row, k) for k in MODEL_FIELDS if k != "head_dim"}
    model_values = {k: v for k, v in model_values.items() if v is not None}
    head_dim = _given(row, "head_dim")
    if head_dim is None:
        head_dim = int(row["hidden_size"]) // int(row["num_attention_heads"])
    model = ModelSpec(name=str(row["model"]), head_dim=int(head_dim), **model_values)
    overrides = {k: _given(row, k) for k in _OVERRIDES}
    cluster = sized_cluster(str(row["cluster"]), int(row["num_devices"]), **overrides)
    framework = catalog.load_framework(_given(row, "framework") or cluster.default_framework)
    train = TrainSpec(
        framework=framework,
        seq_len=int(row["seq_len"]),
        global_batch_size=int(row["global_batch_size"]),
        precision=str(_given(row, "precision") or "bf16"),
        flash_attention=bool(_given(row, "flash_attention") in (None, True)),
    )
    train.check_on(cluster)
    layout_values = {k: _given(row, k) for k in LAYOUT_FIELDS}
    layout = Layout(**{k: v for k, v in layout_values.items() if v is not None})
    return model, cluster, train, layout
