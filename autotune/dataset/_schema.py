"""The measurement table, schema v1: one row per measured layout (see docs/architecture.md).

Each column has a kind (how a cell is parsed), whether it is required, and its default. A cell
parser returns the parsed value or raises ``ValueError`` with what was expected; the loader
collects those into one :class:`simulators.DataFileError`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autotune import catalog
from autotune.simulators import limits
from autotune.simulators.frameworks import CP_COMM_TYPES
from autotune.simulators.frameworks import MOE_DISPATCHERS
from autotune.simulators.fused_softmax import FUSED_SOFTMAX_RULES
from autotune.simulators.layout import LAYOUT_FIELDS
from autotune.simulators.layout import ZERO_STAGES
from autotune.simulators.layout import Layout
from autotune.simulators.layout import field_info
from autotune.simulators.prediction import MEMORY_MEASURES
from autotune.simulators.prediction import PEAK_RANKS
from autotune.simulators.recompute_modules import RECOMPUTE_MODULES
from autotune.simulators.specs import ACTIVATIONS
from autotune.simulators.specs import ATTENTIONS
from autotune.simulators.specs import PRECISIONS

__all__ = ["COLUMNS", "SCHEMA_VERSION", "STATUSES", "Column"]

SCHEMA_VERSION = 1
STATUSES = ("ok", "oom", "error")
_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0")


def _text(cell: str) -> str:
    return cell


# Upper bounds of the numeric columns, far beyond any real training run
# (autotune/simulators/limits.py gives each one's reason): a typo, a unit slip or an overflow
# (1e30 layers, 8e9 devices, an infinite time) is refused with its line and column instead of
# reaching a simulator.
_MAX_LAYERS = limits.MAX_LAYERS
_MAX_WIDTH = limits.MAX_WIDTH
_MAX_VOCAB = limits.MAX_VOCAB
_MAX_EXPERTS = limits.MAX_EXPERTS
_MAX_DEVICES = limits.MAX_DEVICES
_MAX_SEQ_LEN = limits.MAX_SEQ_LEN
_MAX_BATCH = limits.MAX_BATCH
_MAX_MEMORY_GIB = limits.MAX_MEMORY_GIB
_MAX_TOKENS_PER_S = limits.MAX_TOKENS_PER_S


@dataclass(frozen=True, slots=True)
class _Int:
    """A parser of integers from ``minimum`` to ``maximum`` ("8" and "8.0" both give 8)."""

    minimum: int
    maximum: int

    def __call__(self, cell: str) -> int:
        try:
            value = float(cell)
        except ValueError:
            value = math.nan
        if not (value.is_integer() and self.minimum <= value <= self.maximum):
            raise ValueError(f"an integer from {self.minimum} to {self.maximum:,}")
        return int(value)


@dataclass(frozen=True, slots=True)
class _Positive:
    """A parser of numbers above 0 and below ``maximum`` (so never inf or nan)."""

    maximum: float

    def __call__(self, cell: str) -> float:
        try:
            value = float(cell)
        except ValueError:
            value = math.nan
        if not 0 < value < self.maximum:
            raise ValueError(f"a number > 0 and < {self.maximum:,.0f}")
        return value


@dataclass(frozen=True, slots=True)
class _Bounded:
    """A parser of numbers from ``minimum`` to ``maximum`` (so never inf or nan)."""

    minimum: float
    maximum: float

    def __call__(self, cell: str) -> float:
        try:
            value = float(cell)
        except ValueError:
            value = math.nan
        if not self.minimum <= value <= self.maximum:
            raise ValueError(f"a number from {self.minimum:g} to {self.maximum:,g}")
        return value


_STEP_S = _Bounded(limits.MIN_STEP_S, limits.MAX_STEP_S)  # a millisecond to a day
_GBPS = _Bounded(limits.MIN_GBPS, limits.MAX_GBPS)


def _probability(cell: str) -> float:
    """A number in [0, 1) (a dropout probability)."""
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    if not 0 <= value < 1:
        raise ValueError("a probability from 0 to below 1")
    return value


def _bool(cell: str) -> bool:
    lowered = cell.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"one of {', '.join(_TRUE + _FALSE)}")


def _int_list(cell: str) -> tuple[int, ...]:
    """Integers >= 1 separated by ``/`` or ``,`` (a layer split: ``19/21/21/19``)."""
    parts = cell.replace(",", "/").split("/")
    try:
        values = tuple(int(part) for part in parts)
    except ValueError:
        raise ValueError("integers >= 1 separated by / (e.g. 19/21/21/19)") from None
    if min(values) < 1:
        raise ValueError("integers >= 1 separated by / (e.g. 19/21/21/19)")
    return values


def _module_list(cell: str) -> tuple[str, ...]:
    """Recompute modules separated by ``/`` or ``,`` (``core_attn/mlp``)."""
    values = tuple(part.strip() for part in cell.replace(",", "/").split("/"))
    if not all(value in RECOMPUTE_MODULES for value in values):
        raise ValueError(f"modules of {', '.join(RECOMPUTE_MODULES)} separated by /")
    return values


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
        if isinstance(self.parse, _Positive | _Bounded) or self.parse is _probability:
            return "Float64"
        if self.parse is _bool:
            return "boolean"
        if self.parse is _text or getattr(self.parse, "choices", None):
            return "str"
        if self.parse is _int_list or self.parse is _module_list:
            return "object"
        return "Int64"


_ARCHITECTURE = (
    Column("num_layers", _Int(1, _MAX_LAYERS), required=True),
    Column("hidden_size", _Int(1, _MAX_WIDTH), required=True),
    Column("ffn_hidden_size", _Int(0, _MAX_WIDTH), required=True),
    Column("num_attention_heads", _Int(1, _MAX_WIDTH), required=True),
    Column("num_kv_heads", _Int(1, _MAX_WIDTH), required=True),
    Column("vocab_size", _Int(1, _MAX_VOCAB), required=True),
    Column("activation", _choice(ACTIVATIONS), default="swiglu"),
    Column("num_experts", _Int(0, _MAX_EXPERTS), default=0),
    Column("moe_top_k", _Int(0, _MAX_EXPERTS), default=0),
    Column("expert_ffn_hidden_size", _Int(0, _MAX_WIDTH), default=0),
    Column("shared_expert_ffn_hidden_size", _Int(0, _MAX_WIDTH), default=0),
    Column("first_dense_layers", _Int(0, _MAX_LAYERS), default=0),
)

# Beyond the required architecture columns: the rest of ModelSpec (MLA attention, the GPT block),
# read when present (defaults are ModelSpec's; head_dim defaults to hidden / heads).
_ARCHITECTURE_DETAIL = (
    Column("head_dim", _Int(1, _MAX_WIDTH)),
    Column("norm", _choice(("rmsnorm", "layernorm")), default="rmsnorm"),
    Column("qkv_bias", _bool, default=False),
    Column("tied_embeddings", _bool, default=False),
    Column("attention", _choice(ATTENTIONS), default="gqa"),
    Column("q_lora_rank", _Int(0, _MAX_WIDTH), default=0),
    Column("kv_lora_rank", _Int(0, _MAX_WIDTH), default=0),
    Column("qk_nope_head_dim", _Int(0, _MAX_WIDTH), default=0),
    Column("qk_rope_head_dim", _Int(0, _MAX_WIDTH), default=0),
    Column("v_head_dim", _Int(0, _MAX_WIDTH), default=0),
)

_JOB = (
    Column("cluster", _text, required=True),
    Column("devices_per_node", _Int(1, _MAX_DEVICES)),
    Column("device_memory_gib", _Bounded(limits.MIN_MEMORY_GIB, _MAX_MEMORY_GIB)),
    Column("intra_node_gbps", _GBPS),
    Column("inter_node_gbps", _GBPS),
    Column("num_devices", _Int(1, _MAX_DEVICES), required=True),
    Column("seq_len", _Int(1, _MAX_SEQ_LEN), required=True),
    Column("global_batch_size", _Int(1, _MAX_BATCH), required=True),
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
    elif "tuple[str" in kind:
        parse = _module_list
    elif "tuple" in kind:
        parse = _int_list
    elif name == "zero_stage":  # 0 to 3; 0 and 1 agree with distributed_optimizer
        parse = _Int(min(ZERO_STAGES), max(ZERO_STAGES))
    else:
        parse = _Int(1, _MAX_DEVICES if info.degree else _LAYOUT_MAXIMA[name])
    default = None if name == "sequence_parallel" else _LAYOUT_DEFAULTS[name]  # tp > 1
    return Column(name, parse, required=info.required_column, default=default)


# not degrees
_LAYOUT_MAXIMA = {
    "micro_batch": _MAX_BATCH,
    "recompute_layers": _MAX_LAYERS,
    "dp_replicate": _MAX_DEVICES,
}
_FIELD_TYPES = {f.name: str(f.type) for f in dataclasses.fields(Layout)}
_LAYOUT_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Layout)}
_LAYOUT = tuple(_layout_column(name) for name in LAYOUT_FIELDS)
_TRAINING = (
    # A framework of conf/framework/; empty: the cluster's default_framework.
    Column("framework", _choice(catalog.options("framework"))),
    Column("precision", _choice(PRECISIONS), default="bf16"),
    # Not in the v1 table of docs/architecture.md: whether the stack ran fused attention.
    Column("flash_attention", _bool, default=True),
    # Optional training settings; empty: the framework's default (TrainSpec's fields).
    Column("grad_reduce_in_fp32", _bool),  # bf16 gradients accumulated and reduced in fp32
    Column("overlap_grad_reduce", _bool),  # DP gradient reduction during the backward
    Column("overlap_param_gather", _bool),  # DP parameter all-gather in the next forward
    Column("tp_comm_overlap", _bool),  # TP collectives overlapped with the GEMMs
    Column("moe_dispatcher", _choice(MOE_DISPATCHERS)),  # how MoE tokens reach their experts
    Column("moe_a2a_overlap", _bool),  # expert all-to-all under another micro-batch's compute
    Column("cp_comm_type", _choice(CP_COMM_TYPES)),  # the CP exchange: p2p ring or a2a Ulysses
    Column("dropout", _probability),  # attention and hidden dropout; empty: the model's recipe
    # The check that lets the unfused path's fused softmax run; empty: the framework's.
    Column("fused_softmax_rule", _choice(FUSED_SOFTMAX_RULES)),
)

_MEASUREMENT = (
    Column("status", _choice(STATUSES), required=True),
    Column("step_time_s", _STEP_S),  # required when status is ok (checked per row)
    Column("tokens_per_s_per_device", _Positive(_MAX_TOKENS_PER_S)),
    Column("peak_memory_gib", _Positive(_MAX_MEMORY_GIB)),
    # What peak_memory_gib measured: the framework's tensors (torch.cuda.max_memory_allocated,
    # Megatron's "max allocated") or all the device holds (nvidia-smi, npu-smi).
    Column("peak_memory_measure", _choice(MEMORY_MEASURES), default="allocated"),
    # Whose peak it is: the fullest rank's (a maximum over the ranks), or the first pipeline
    # rank's (rank 0, the first node's GPUs) where the reading was taken there alone.
    Column("peak_memory_rank", _choice(PEAK_RANKS), default="fullest"),
    Column("predictor", _text),
    Column("predicted_step_time_s", _STEP_S),
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
