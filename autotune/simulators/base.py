"""The contract every simulator keeps: what it must implement, and the hooks it may override.

As Optuna's ``BaseSampler`` does, :class:`Simulator` declares the whole contract and gives every
optional hook a default, so that no caller asks a simulator what it has.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from typing import Protocol
from typing import Self

from autotune.simulators.calibration import Calibration
from autotune.simulators.errors import UserError
from autotune.simulators.job import Job
from autotune.simulators.layout import Layout
from autotune.simulators.prediction import Prediction
from autotune.simulators.specs import ClusterSpec

__all__ = ["PredictionBatch", "PredictionList", "Simulator"]


class PredictionBatch(Protocol):
    """The predictions of many layouts, in the order they were given."""

    def __len__(self) -> int: ...

    def prediction(self, index: int) -> Prediction:
        """The prediction of layout ``index`` (negative counts from the end)."""
        ...


@dataclass(frozen=True, slots=True)
class PredictionList:
    """A :class:`PredictionBatch` of predictions made one by one."""

    predictions: tuple[Prediction, ...]

    def __len__(self) -> int:
        return len(self.predictions)

    def prediction(self, index: int) -> Prediction:
        return self.predictions[index]


class Simulator(abc.ABC):
    """Predicts the step time and memory of a layout; pure and deterministic.

    A simulator implements :meth:`from_config`, :meth:`simulate` and :meth:`calibrated`; the
    other hooks have defaults. ``simulate`` assumes the layout is valid
    (``layout.violations(job)`` is empty); callers check the rules first. A new simulator is a
    subclass, its ``conf/simulator/<name>.yaml`` and its line in
    :mod:`autotune.simulators.registry` (docs/architecture.md, "Adding a simulator").

    Attributes:
        name: the simulator's name in the registry and in ``conf/simulator/<name>.yaml``.
        batch_size: how many layouts :meth:`simulate_many` is worth giving at once (1: it
            prices them one by one).
        calibrated_constants: which of its constants (keys of its yaml, dotted) each
            calibration factor scales; ``memory_constant_gib`` sets its key instead. The
            factors not named scale the cluster's figures or the prediction's terms
            (:mod:`autotune.simulators.calibration`).
        calibration: the calibration applied (None: uncalibrated).
        memory_margin: the share of the predicted peak a layout must keep free to fit.
    """

    name: str
    batch_size: int = 1
    calibrated_constants: Mapping[str, tuple[str, ...]] = {}
    calibration: Calibration | None = None
    memory_margin: float = 0.0

    @classmethod
    @abc.abstractmethod
    def from_config(cls, constants: Mapping[str, Any]) -> Self:
        """Build from ``conf/simulator/<name>.yaml`` (without its ``name`` key).

        Raises:
            SpecError: an unknown or missing key, or a value out of bounds.
        """

    @abc.abstractmethod
    def simulate(self, job: Job, layout: Layout) -> Prediction:
        """Predict one layout of ``job``."""

    def simulate_many(self, job: Job, layouts: Sequence[Layout]) -> PredictionBatch:
        """Predict ``layouts`` of one job; by default one by one with :meth:`simulate`."""
        return PredictionList(tuple(self.simulate(job, lay) for lay in layouts))

    def write_trace(self, job: Job, layout: Layout, path: str | Path) -> Path:
        """Simulate the layout and write its event timeline as a Chrome trace (Perfetto).

        Raises:
            UserError: the simulator keeps no event timeline (the default).
        """
        raise UserError(
            f"the {self.name} simulator writes no trace: it keeps no event timeline "
            "(autotune.simulators.registry.TRACE_WRITERS names the simulators that do)"
        )

    @abc.abstractmethod
    def calibrated(self, calibration: Calibration) -> Self:
        """This simulator with ``calibration`` applied to its own constants: those of
        :attr:`calibrated_constants`, by
        :func:`autotune.simulators.calibration.calibrate_constants`.

        The cluster's figures and the prediction's terms are calibrated around it
        (:class:`autotune.simulators.calibrated.CalibratedSimulator`).
        """

    def calibrated_values(self) -> dict[str, float]:
        """The values of the constants a calibration sets (:attr:`calibrated_constants`) by
        key, those that are None (derived per layout) left out; by default none
        (:func:`autotune.simulators.calibration.constant_values`)."""
        return {}

    def effective_cluster(self, cluster: ClusterSpec) -> ClusterSpec:
        """The cluster as this simulator prices it: with the figures its constants override
        (by default none), so that a calibration scales what the simulator uses."""
        return cluster
