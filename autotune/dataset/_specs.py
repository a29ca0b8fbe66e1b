"""From one validated measurement row to the specs a simulator speaks."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import pandas as pd

from autotune import catalog
from autotune.dataset._clusters import sized_cluster
from autotune.simulators.job import Job
from autotune.simulators.layout import LAYOUT_FIELDS
from autotune.simulators.layout import Layout
from autotune.simulators.specs import CARD_FIELDS
from autotune.simulators.specs import RUN_SETTINGS
from autotune.simulators.specs import ModelSpec
from autotune.simulators.specs import TrainSpec

__all__ = ["MODEL_FIELDS", "records", "row_to_specs", "table_specs"]

# The architecture columns: every ModelSpec field but the display name (``model``) and the
# model-card facts, which no simulator prices (CARD_FIELDS: the catalog's, and their defaults).
MODEL_FIELDS = tuple(
    f.name for f in dataclasses.fields(ModelSpec) if f.name != "name" and f.name not in CARD_FIELDS
)
_OVERRIDES = ("devices_per_node", "device_memory_gib", "intra_node_gbps", "inter_node_gbps")
_TRAINING = ("framework", "precision", "flash_attention", *RUN_SETTINGS)


def _given(row: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The row's values of ``keys`` that are given (not absent, None, NaN or ""), as Python."""
    given = {}
    for key in keys:
        value = row.get(key)
        if value is None or value is pd.NA or value != value or value == "":  # NaN != NaN
            continue
        given[key] = value.item() if hasattr(value, "item") else value  # numpy -> Python
    return given


# Specs are values, and a table has few distinct models and layouts: build each once.
@functools.lru_cache(maxsize=4096)
def _model(name: str, values: tuple[tuple[str, Any], ...]) -> ModelSpec:
    return ModelSpec(name=name, **dict(values))


@functools.lru_cache(maxsize=4096)
def _layout(values: tuple[tuple[str, Any], ...]) -> Layout:
    return Layout(**dict(values))


def row_to_specs(row: Mapping[str, Any]) -> tuple[Job, Layout]:
    """The job (model, cluster, training step) and the layout of one row of a loaded
    measurement table.

    ``row`` is a row of :func:`dataset.load_measurements` (a mapping such as a pandas Series):
    types parsed and defaults filled. The cluster is ``conf/cluster/<cluster>.yaml`` sized to
    ``num_devices``, with the row's ``devices_per_node``, ``device_memory_gib``,
    ``intra_node_gbps`` and ``inter_node_gbps`` where given.

    Raises:
        SpecError: a value that the specs refuse (unknown cluster, kv heads not dividing heads).
    """
    model_values = _given(row, MODEL_FIELDS)
    head_dim = model_values.get("head_dim")
    if head_dim is None:
        head_dim = int(row["hidden_size"]) // int(row["num_attention_heads"])
    model_values["head_dim"] = int(head_dim)
    model = _model(str(row["model"]), tuple(model_values.items()))
    overrides = _given(row, _OVERRIDES)
    cluster = sized_cluster(str(row["cluster"]), int(row["num_devices"]), **overrides)
    training = _given(row, _TRAINING)
    framework = catalog.load_framework(training.get("framework") or cluster.default_framework)
    train = TrainSpec(
        framework=framework,
        seq_len=int(row["seq_len"]),
        global_batch_size=int(row["global_batch_size"]),
        precision=str(training.get("precision", "bf16")),
        flash_attention=bool(training.get("flash_attention") in (None, True)),
        grad_reduce_in_fp32=training.get("grad_reduce_in_fp32"),
        overlap_grad_reduce=training.get("overlap_grad_reduce"),
        overlap_param_gather=training.get("overlap_param_gather"),
        tp_comm_overlap=training.get("tp_comm_overlap"),
        moe_dispatcher=training.get("moe_dispatcher"),
        moe_a2a_overlap=bool(training.get("moe_a2a_overlap", False)),
        cp_comm_type=training.get("cp_comm_type"),
        dropout=training.get("dropout"),
        fused_softmax_rule=training.get("fused_softmax_rule"),
    )
    train.check_on(cluster)
    layout = _layout(tuple(_given(row, LAYOUT_FIELDS).items()))
    return Job(model=model, cluster=cluster, train=train), layout


def records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of a table as dicts of plain Python values, None where missing.

    Several times faster than ``DataFrame.to_dict("records")``, which boxes every value of a
    nullable column on its own.
    """
    names = list(table.columns)
    columns = [table[n].astype(object).where(table[n].notna(), None).tolist() for n in names]
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def table_specs(table: pd.DataFrame) -> list[tuple[Job, Layout]]:
    """:func:`row_to_specs` of every row of a loaded measurement table, in order.

    Raises:
        SpecError: a row that the specs refuse (none, in a table that loaded).
    """
    return [row_to_specs(row) for row in records(table)]
