"""Shared steps of the importers: read the long raw format, one record per configuration."""

from __future__ import annotations

import csv
import dataclasses
import re
from collections.abc import Collection
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from autotune import catalog
from autotune.dataset._schema import COLUMNS
from autotune.dataset._specs import MODEL_FIELDS

__all__ = [
    "EARLY_MEGATRON",
    "GPT_BLOCK",
    "Config",
    "catalog_architecture",
    "gpt_model",
    "configs",
    "dp_overlap",
    "job_columns",
    "knobs",
    "leading_int",
    "padded_vocab",
    "metric",
    "order_columns",
    "provenance",
]


@dataclass(frozen=True, slots=True)
class Config:
    """One measured configuration of a raw file: its first metric row and all its metrics."""

    row: dict[str, str]
    metrics: dict[str, float]
    units: dict[str, str]


# The training stack of 2021-22 Megatron-LM / Megatron-DeepSpeed runs: fp16 mixed precision,
# no sequence parallelism, no distributed optimizer, Megatron's unfused attention.
EARLY_MEGATRON: dict[str, object] = {
    "sequence_parallel": False,
    "distributed_optimizer": False,
    "precision": "fp16",
    "flash_attention": False,
}


# The GPT block of Megatron-LM (GPT-2/3 family): GeLU MLP of 4h, LayerNorm, biases, tied
# embeddings (docs/reference.md 2.1 row GPT-3 175B).
GPT_BLOCK: dict[str, object] = {
    "activation": "gelu",
    "norm": "layernorm",
    "qkv_bias": True,
    "tied_embeddings": True,
}


def gpt_model(num_layers: int, hidden_size: int, heads: int, vocab_size: int) -> dict[str, object]:
    """The architecture columns of a Megatron GPT model (MHA, FFN 4h, the GPT block)."""
    return {
        "num_layers": num_layers,
        "hidden_size": hidden_size,
        "ffn_hidden_size": 4 * hidden_size,
        "num_attention_heads": heads,
        "num_kv_heads": heads,
        "vocab_size": vocab_size,
        **GPT_BLOCK,
    }


def catalog_architecture(name: str, **changes: object) -> dict[str, object]:
    """The architecture columns of the catalog model ``conf/model/<name>.yaml``.

    ``changes`` replaces fields (a layer-truncated proxy: ``num_layers=12``).
    """
    spec = dataclasses.replace(catalog.load_model(name), **changes)  # type: ignore[arg-type]
    return {field: getattr(spec, field) for field in MODEL_FIELDS}


def job_columns(row: dict[str, str]) -> dict[str, object]:
    """The job and the parallel degrees of a raw ground-truth row."""
    return {
        "num_devices": int(row["num_devices"]),
        "seq_len": int(row["seq_len"]),
        "global_batch_size": int(row["global_batch"]),
        **{k: int(row[k]) for k in ("dp", "tp", "pp", "cp", "ep", "vpp")},
    }


def configs(path: Path) -> Iterator[Config]:
    """The configurations of a raw ground-truth file (rows joined by ``config_id``), in order."""
    groups: dict[str, list[dict[str, str]]] = {}
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            groups.setdefault(row["config_id"], []).append(row)
    for rows in groups.values():
        # an empty value is a run that gave none (out of memory): the metric is absent
        metrics = {r["metric_name"]: float(r["metric_value"]) for r in rows if r["metric_value"]}
        units = {r["metric_name"]: r["unit"] for r in rows}
        yield Config(row=rows[0], metrics=metrics, units=units)


def metric(config: Config, name: str, unit: str) -> float:
    """The value of metric ``name``, checked to be present and in ``unit``."""
    if name not in config.metrics:
        raise ValueError(f"config {config.row['config_id']}: no value for metric {name}")
    if config.units[name] != unit:
        raise ValueError(
            f"config {config.row['config_id']}: {name} in {config.units[name]!r}, "
            f"expected {unit!r}"
        )
    return config.metrics[name]


def knobs(text: str) -> dict[str, str]:
    """``a=1;b=x;flag`` -> ``{"a": "1", "b": "x", "flag": ""}`` (the raw files' free text)."""
    found: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        key, _, value = part.partition("=")
        found[key.strip()] = value.strip()
    return found


def dp_overlap(flags: Collection[str] | str) -> dict[str, bool | None]:
    """The data-parallel overlap columns of a launch script's ``flags`` (a set of flag names,
    or a text listing them): True where it passes ``--overlap-grad-reduce`` or
    ``--overlap-param-gather``, else empty (the framework's default)."""
    return {
        "overlap_grad_reduce": True if "overlap-grad-reduce" in flags else None,
        "overlap_param_gather": True if "overlap-param-gather" in flags else None,
    }


def padded_vocab(vocab_size: int, tp: int, multiple: int = 128) -> int:
    """``vocab_size`` rounded up to a multiple of ``multiple * tp``, as Megatron pads the
    embedding (``--make-vocab-size-divisible-by``, default 128, times the TP degree)."""
    step = multiple * tp
    return -(-vocab_size // step) * step


def leading_int(text: str) -> int:
    """The integer a free-text cell starts with (``"4 (num-layers-...=5)"`` -> 4)."""
    match = re.match(r"\s*(\d+)", text)
    if not match:
        raise ValueError(f"no leading integer in {text!r}")
    return int(match.group(1))


def provenance(config: Config, source: str) -> dict[str, str]:
    """The provenance columns: short source name, the raw reference and configuration id."""
    row = config.row
    return {
        "source": source,
        "source_ref": f"{row['source_ref']} [config_id {row['config_id']}]",
        "license": row["license"],
    }


# Integer columns that are empty on most rows: pandas would write them as floats ("1.0").
_NULLABLE_INTEGERS = ("devices_per_node", "etp", "recompute_layers", "zero_stage", "dp_replicate")


def order_columns(records: list[dict[str, object]]) -> pd.DataFrame:
    """A table of ``records`` with the schema columns first, in schema order, then extras."""
    table = pd.DataFrame.from_records(records)
    schema = [c.name for c in COLUMNS if c.name in table.columns]
    extra = [c for c in table.columns if c not in schema]
    table = table[schema + extra]
    for name in _NULLABLE_INTEGERS:
        if name in table.columns:
            table[name] = table[name].astype("Int64")
    return table
