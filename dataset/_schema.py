"""The measurement table, schema v1: one row per measured layout (see docs/architecture.md).

Each column has a kind (how a cell is parsed), whether it is required, and its default. A cell
parser returns the parsed value or raises ``ValueError`` with what was expected; the loader
collects those into one :class:`simulators.DataFileError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulators.layout import LAYOUT_FIELDS
from simulators.layout import Layout
from simulators.layout import field_info
from simulators.specs import ACTIVATIONS
from simulators.specs import ATTENTIONS
from simulators.specs import PRECISIONS

__all__ = ["COLUMNS", "SCHEMA_VERSION", "STATUSES", "Column"]

SCHEMA_VERSION = 1
STATUSES = ("ok", "oom", "error")
_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0")


def _text(cell: str) -> str:
    return cell


def _int(minimum: int) -> Callable[[str], int]:
    """A parser of integers >= ``minimum`` ("8" and "8.0" both give 8)."""

    def parse(cell: str) -> int:
        try:
            value = float(cell)
        except ValueError:
            raise ValueError(f"an integer >= {minimum}") from None
        if not value.is_integer() or value < minimum:
            raise ValueError(f"an integer >= {minimum}")
        return int(value)

    return parse


def _positive_float(cell: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise ValueError("a number > 0") from None
    if not value > 0:
        raise ValueError("a number > 0")
    return value


def _bool(cell: str) -> bool:
    lowered = cell.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"one of {', '.join(_TRUE + _FALSE)}")


def _choice(allowed: tuple[str, ...]) -> Callable[[str], str]:
    def parse(cell: str) -> str:
        if cell not in allowed:
            raise ValueError(f"one of {', '.join(allowed)}")
        return cell

    parse.choices = allowed  # type: ignore[attr-defined]
    return parse


@dataclass(frozen=True, slots=True)
class Column:
    """One column: its parser, whether a row must fill it, and the value of an empty cell."""

    name: str
    parse: Callable[[str], Any]
    required: bool = False
    default: Any = None

    @property
    def dtype(self) -> str:
        """The pandas dtype of the parsed column (nullable, so an empty cell stays missing)."""
        if self.parse is _positive_float:
            return "Float64"
        if self.parse is _bool:
            return "boolean"
        if self.parse is _text or getattr(self.parse, "choices", None):
            return "str"
        return "Int64"


_ARCHITECTURE = (
    Column("num_layers", _int(1), required=True),
    Column("hidden_size", _int(1), required=True),
    Column("ffn_hidden_size", _int(0), required=True),
    Column("num_attention_heads", _int(1), required=True),
    Column("num_kv_heads", _int(1), required=True),
    Column("vocab_size", _int(1), required=True),
    Column("activation", _choice(ACTIVATIONS), default="swiglu"),
    Column("num_experts", _int(0), default=0),
    Column("moe_top_k", _int(0), default=0),
    Column("expert_ffn_hidden_size", _int(0), default=0),
    Column("shared_expert_ffn_hidden_size", _int(0), default=0),
    Column("first_dense_layers", _int(0), default=0),
)

# Beyond the required architecture columns: the rest of ModelSpec (MLA attention, the GPT block),
# read when present (defaults are ModelSpec's; head_dim defaults to hidden / heads).
_ARCHITECTURE_DETAIL = (
    Column("head_dim", _int(1)),
    Column("norm", _choice(("rmsnorm", "layernorm")), default="rmsnorm"),
    Column("qkv_bias", _bool, default=False),
    Column("tied_embeddings", _bool, default=False),
    Column("attention", _choice(ATTENTIONS), default="gqa"),
    Column("q_lora_rank", _int(0), default=0),
    Column("kv_lora_rank", _int(0), default=0),
    Column("qk_nope_head_dim", _int(0), default=0),
    Column("qk_rope_head_dim", _int(0), default=0),
    Column("v_head_dim", _int(0), default=0),
)

_JOB = (
    Column("cluster", _text, required=True),
    Column("devices_per_node", _int(1)),
    Column("device_memory_gib", _positive_float),
    Column("intra_node_gbps", _positive_float),
    Column("inter_node_gbps", _positive_float),
    Column("num_devices", _int(1), required=True),
    Column("seq_len", _int(1), required=True),
    Column("global_batch_size", _int(1), required=True),
)


def _layout_column(name: str) -> Column:
    """The column of one layout field, from the Layout's own field table."""
    info = field_info(name)
    kind = _FIELD_TYPES[name]
    parse: Callable[[str], Any]
    if info.choices:
        parse = _choice(info.choices)
    elif "bool" in kind:
        parse = _bool
    else:
        parse = _int(1)
    default = None if name == "sequence_parallel" else _LAYOUT_DEFAULTS[name]  # tp > 1
    return Column(name, parse, required=info.required_column, default=default)


_FIELD_TYPES = {f.name: str(f.type) for f in dataclasses.fields(Layout)}
_LAYOUT_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Layout)}
_LAYOUT = tuple(_layout_column(name) for name in LAYOUT_FIELDS)
_TRAINING = (
    Column("precision", _choice(PRECISIONS), default="bf16"),
    Column("framework", _text),
    # Not in the v1 table of docs/architecture.md: whether the stack ran fused attention.
    Column("flash_attention", _bool, default=True),
)

_MEASUREMENT = (
    Column("status", _choice(STATUSES), required=True),
    Column("step_time_s", _positive_float),  # required when status is ok (checked per row)
    Column("tokens_per_s_per_device", _positive_float),
    Column("peak_memory_gib", _positive_float),
    Column("predictor", _text),
    Column("predicted_step_time_s", _positive_float),
)

_PROVENANCE = (
    Column("source", _text),
    Column("source_ref", _text),
    Column("license", _text),
)

COLUMNS: tuple[Column, ...] = (
    Column("scenario", _text, required=True),
    Column("model", _text, required=True),
    *_ARCHITECTURE,
    *_ARCHITECTURE_DETAIL,
    *_JOB,
    *_LAYOUT,
    *_TRAINING,
    *_MEASUREMENT,
    *_PROVENANCE,
)
