"""Weights, gradients and optimizer states: their memory per device and the optimizer step.

One formula for every simulator and baseline (docs/reference.md 3.2, Megatron's
``docs/user-guide/features/dist_optimizer.md``): every parameter a rank holds keeps its
weight and its gradient; the optimizer states (fp32 master weight, Adam m and v) are sharded
over data parallelism by the distributed optimizer: dense parameters over DP x CP, routed
experts over expert-DP.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from simulators._checks import require_non_negative
from simulators.errors import SpecError
from simulators.layout import Layout
from simulators.specs import DeviceSpec

__all__ = ["StateBytes", "optimizer_step_s", "state_bytes_by_precision", "state_memory_bytes"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StateBytes:
    """Bytes per parameter of the weight, its gradient and its optimizer states."""

    weight: float
    grad: float
    optimizer: float

    def __post_init__(self) -> None:
        require_non_negative(
            "state bytes", weight=self.weight, grad=self.grad, optimizer=self.optimizer
        )

    @property
    def total(self) -> float:
        return self.weight + self.grad + self.optimizer


def state_bytes_by_precision(values: Mapping[str, Mapping[str, float]]) -> dict[str, StateBytes]:
    """``{precision: {weight, grad, optimizer}}`` from a config mapping, checked."""
    try:
        return {precision: StateBytes(**dict(sizes)) for precision, sizes in values.items()}
    except TypeError as exc:
        raise SpecError(
            f"state_bytes_per_param: {exc}; expected weight, grad and optimizer per precision"
        ) from None


def optimizer_shards(layout: Layout) -> tuple[int, int]:
    """How many ways the optimizer states of (dense, expert) parameters are split."""
    if not layout.distributed_optimizer:
        return 1, 1
    return layout.dp * layout.cp, layout.expert_dp


def state_memory_bytes(
    dense_params: float, expert_params: float, layout: Layout, sizes: StateBytes
) -> dict[str, float]:
    """``weights``, ``gradients`` and ``optimizer`` bytes of one rank's parameters.

    ``dense_params`` are the rank's parameters reduced over DP x CP (already split by TP
    and PP), ``expert_params`` its routed-expert parameters (reduced over expert-DP).
    """
    dense_shards, expert_shards = optimizer_shards(layout)
    params = dense_params + expert_params
    return {
        "weights": params * sizes.weight,
        "gradients": params * sizes.grad,
        "optimizer": sizes.optimizer
        * (dense_params / dense_shards + expert_params / expert_shards),
    }


def optimizer_step_s(
    dense_params: float,
    expert_params: float,
    layout: Layout,
    traffic_bytes_per_param: float,
    device: DeviceSpec,
) -> float:
    """Seconds of one optimizer step: memory-bound traffic over the rank's state shard."""
    dense_shards, expert_shards = optimizer_shards(layout)
    local = dense_params / dense_shards + expert_params / expert_shards
    return local * traffic_bytes_per_param / device.achieved_memory_bytes_per_s
