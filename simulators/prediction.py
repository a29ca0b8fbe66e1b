"""What a simulator answers for one layout."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field

__all__ = ["BREAKDOWN_KEYS", "Prediction"]

# Time categories of a step, in seconds; they add up to the step time.
BREAKDOWN_KEYS = (
    "compute",
    "recompute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_comm",
    "dp_comm",
    "bubble",
    "optimizer",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Prediction:
    """Predicted step time and memory of one layout.

    ``breakdown`` splits ``step_time_s`` into the categories of :data:`BREAKDOWN_KEYS`
    (seconds, summing to the step time). ``memory_gib`` is the peak memory of the worst rank;
    ``fits`` says whether it stays within ``memory_capacity_gib``. ``mfu`` is model FLOPs per
    second over the devices' peak in the step's precision (FP8 runs: the FP8 peak, as NVIDIA's
    benchmark tables count it). ``detail`` holds optional simulator-specific views (per-rank
    figures, memory breakdown, events).
    """

    step_time_s: float
    memory_gib: float
    memory_capacity_gib: float
    breakdown: Mapping[str, float]
    memory_breakdown_gib: Mapping[str, float]
    tokens_per_s_per_device: float
    mfu: float
    detail: Mapping[str, object] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.memory_gib <= self.memory_capacity_gib

    def as_dict(self) -> dict[str, object]:
        """Plain JSON-ready form (no detail)."""
        return {
            "step_time_s": self.step_time_s,
            "tokens_per_s_per_device": self.tokens_per_s_per_device,
            "mfu": self.mfu,
            "memory_gib": self.memory_gib,
            "memory_capacity_gib": self.memory_capacity_gib,
            "fits": self.fits,
            "breakdown": dict(self.breakdown),
            "memory_breakdown_gib": dict(self.memory_breakdown_gib),
        }
