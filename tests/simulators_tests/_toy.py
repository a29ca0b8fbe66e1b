"""A test-only simulator: the least a new simulator writes (docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.simulators import BREAKDOWN_KEYS
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import Prediction
from autotune.simulators import Simulator
from autotune.simulators.calibration import Calibration

# Its conf/simulator/toy.yaml.
TOY_YAML = "name: toy\nseconds_per_layer: 0.5\n"


@dataclass(frozen=True, slots=True)
class ToySimulator(Simulator):
    """Every layer costs ``seconds_per_layer``, shared by the pipeline stages; the weights fill
    the memory (2 bytes a parameter, shared by tp x pp)."""

    seconds_per_layer: float
    name = "toy"

    @classmethod
    def from_config(cls, constants: Mapping[str, Any]) -> ToySimulator:
        return cls(**constants)

    def simulate(self, job: Job, layout: Layout) -> Prediction:
        model, cluster, train = job.model, job.cluster, job.train
        step_s = self.seconds_per_layer * model.num_layers / layout.pp
        weights_gib = 2 * model.num_params / (layout.tp * layout.pp) / 2**30
        return Prediction(
            step_time_s=step_s,
            memory_gib=weights_gib,
            memory_capacity_gib=cluster.device.memory_gib,
            breakdown=dict.fromkeys(BREAKDOWN_KEYS, 0.0) | {"compute": step_s},
            memory_breakdown_gib={"weights": weights_gib},
            tokens_per_s_per_device=train.tokens_per_step / step_s / layout.world_size,
            mfu=0.5,
        )

    def calibrated(self, calibration: Calibration) -> ToySimulator:
        return self  # no constant of its own that a calibration scales
