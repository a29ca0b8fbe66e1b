"""The analytical simulator's own constants (``conf/simulator/analytical.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.simulators._checks import constants_from_mapping
from autotune.simulators._checks import require_positive
from autotune.simulators._checks import require_share
from autotune.simulators.errors import SpecError

__all__ = ["AnalyticalConstants"]


# The keys of the unfused attention's bytes per score element (conf/simulator/analytical.yaml).
_SCORE_BYTES_KEYS = {
    "unfused_attention_bytes_per_score": {
        "forward_gemm",
        "forward_elementwise",
        "backward_gemm",
        "backward_elementwise",
        "saved",
        "kept_copy",
    },
    "unfused_attention_fp32_bytes_per_score": {
        "forward_gemm",
        "forward_elementwise",
        "backward_gemm",
        "backward_elementwise",
        "saved",
        "kept_copy",
    },
    "unfused_attention_dropout_bytes_per_score": {
        "forward_elementwise",
        "backward_elementwise",
        "saved",
    },
}


@dataclass(frozen=True, slots=True, kw_only=True)
class AnalyticalConstants:
    """The simulator's own constants; ``conf/simulator/analytical.yaml`` gives their sources."""

    attention_efficiency: float
    attention_backward_factor: float
    kernels_per_layer_forward: int
    kernel_overhead_us: float
    host_ops_per_layer_forward: int
    host_ops_per_layer_backward: int
    host_ops_per_checkpoint_forward: int
    host_ops_per_checkpoint_backward: int
    host_ops_fp32_softmax: int
    host_op_overhead_us: float
    unfused_attention_bytes_per_score: Mapping[str, float]
    unfused_attention_fp32_bytes_per_score: Mapping[str, float]
    unfused_attention_dropout_bytes_per_score: Mapping[str, float]
    cp_comm_overlap: bool
    optimizer_traffic_bytes_per_param: float
    allocator_fragmentation: float
    reserved_memory_gib: float | None  # None: the device's runtime and the communicators'

    def __post_init__(self) -> None:
        require_positive(
            "analytical simulator",
            attention_efficiency=self.attention_efficiency,
            attention_backward_factor=self.attention_backward_factor,
        )
        require_share("analytical simulator", allocator_fragmentation=self.allocator_fragmentation)
        for name, keys in _SCORE_BYTES_KEYS.items():
            given = set(getattr(self, name))
            if given != keys:
                raise SpecError(
                    f"simulator analytical: {name} has keys {', '.join(sorted(given))}; "
                    f"expected {', '.join(sorted(keys))}"
                )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> AnalyticalConstants:
        """Build from ``conf/simulator/analytical.yaml``; unknown or missing keys raise."""
        return constants_from_mapping(cls, values, "simulator analytical")
