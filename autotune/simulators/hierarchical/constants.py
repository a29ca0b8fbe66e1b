"""Tunable constants of the hierarchical simulator (values: conf/simulator/hierarchical.yaml)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.simulators._checks import constants_from_mapping
from autotune.simulators._checks import require_share
from autotune.simulators.errors import SpecError
from autotune.simulators.hierarchical.cost import Efficiencies
from autotune.simulators.schedule import SCHEDULES

__all__ = ["HierarchicalConstants"]


@dataclass(frozen=True, slots=True, kw_only=True)
class HierarchicalConstants:
    """Settings of :class:`~autotune.simulators.hierarchical.HierarchicalSimulator` (units in
    names).

    ``schedule``: ``1f1b`` or ``gpipe`` (interleaved whenever ``vpp > 1``); ``op_costs``: a
    profiled table (CSV) or ``None`` for the roofline; ``efficiency``: per-class overrides;
    what overlaps, how gradients are bucketed and what a rank keeps per parameter are the
    framework's (``train.framework``); ``optimizer_traffic_bytes_per_param`` is the HBM
    traffic of one Adam update.
    ``host_op_overhead_us`` is the CPU time eager PyTorch spends on one Python-level torch call
    or autograd node (a chunk's phase lasts at least its host calls times this);
    ``host_ops_per_checkpoint_*`` the calls an activation checkpoint adds around a recomputed
    layer or core attention (forward, and backward with the recomputation);
    ``allocator_fragmentation`` the share of what the caching allocator reserves that it
    loses to fragmentation; ``reserved_memory_gib`` what a rank holds outside the allocator
    (None: the device's runtime and the communicators' buffers,
    :func:`autotune.simulators.device_memory.reserved_bytes`).
    """

    schedule: str
    op_costs: str | None
    efficiency: Efficiencies
    optimizer_traffic_bytes_per_param: float
    host_op_overhead_us: float
    host_ops_per_checkpoint_forward: int
    host_ops_per_checkpoint_backward: int
    allocator_fragmentation: float
    reserved_memory_gib: float | None

    def __post_init__(self) -> None:
        if self.schedule not in ("1f1b", "gpipe"):
            allowed = ", ".join(s for s in SCHEDULES if s != "interleaved")
            raise SpecError(
                f"simulator.schedule={self.schedule!r} is not one of {allowed} "
                "(interleaved 1F1B is used whenever vpp > 1)"
            )
        if self.op_costs is not None and not self.op_costs.strip():
            raise SpecError(
                f"simulator.op_costs={self.op_costs!r} is empty; give the path of a table "
                "autotune.profile wrote, or null for none"
            )
        for key in (
            "host_op_overhead_us",
            "host_ops_per_checkpoint_forward",
            "host_ops_per_checkpoint_backward",
        ):
            if not getattr(self, key) >= 0:
                raise SpecError(f"simulator.{key}={getattr(self, key)!r} must be >= 0")
        require_share(
            "simulator hierarchical", allocator_fragmentation=self.allocator_fragmentation
        )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> HierarchicalConstants:
        """Build from ``conf/simulator/hierarchical.yaml``; unknown or missing keys raise."""
        return constants_from_mapping(
            cls,
            values,
            "simulator hierarchical",
            {
                "efficiency": lambda value: Efficiencies(**dict(value)),
            },
        )
