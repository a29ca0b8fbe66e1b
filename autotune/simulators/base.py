"""The contract every simulator keeps."""

from __future__ import annotations

from typing import Protocol
from typing import runtime_checkable

from autotune.simulators.layout import Layout
from autotune.simulators.prediction import Prediction
from autotune.simulators.specs import ClusterSpec
from autotune.simulators.specs import ModelSpec
from autotune.simulators.specs import TrainSpec

__all__ = ["Simulator"]


@runtime_checkable
class Simulator(Protocol):
    """Predicts the step time and memory of a layout; pure and deterministic.

    ``simulate`` assumes the layout is valid (``layout.violations(...)`` is empty); callers
    check the rules first.
    """

    name: str

    def simulate(
        self, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, layout: Layout
    ) -> Prediction: ...
