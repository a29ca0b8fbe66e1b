"""The closed-form simulator: roofline operators, alpha-beta collectives, pipeline formulas.

Per micro-batch and pipeline stage it adds up the time of every layer's GEMMs (roofline),
flash attention, memory-bound elementwise work and kernel launches, plus the exposed tensor,
context and expert parallel communication. The pipeline runs ``m`` micro-batches at the pace
of the slowest stage plus a fill-and-drain bubble divided by the virtual stages
(Narayanan et al. 2021, docs/reference.md 3.4). Data-parallel gradient reduction hides behind the
last micro-batch's backward where the framework overlaps it; then the first and last stages
all-reduce a tied embedding's gradient. Memory is weights, gradients and optimizer states
(sharded by DP or expert-DP with the distributed optimizer, docs/reference.md 3.2) plus the
activations of the micro-batches the schedule holds in flight (Korthikanti et al. 2022 with
flash attention, docs/reference.md 3.3), checked on every pipeline rank.

One layer is priced in :mod:`~autotune.simulators.analytical.layer`, a pipeline stage in
:mod:`~autotune.simulators.analytical.stages` (for one layout and for many), one layout from
the pieces a job's layouts share in :mod:`~autotune.simulators.analytical.prices`, many
layouts at once in :mod:`~autotune.simulators.analytical.batch`.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from autotune.simulators.analytical.batch import BatchPrediction
from autotune.simulators.analytical.batch import simulate_batch
from autotune.simulators.analytical.constants import AnalyticalConstants
from autotune.simulators.analytical.prices import JobPrices
from autotune.simulators.analytical.prices import simulate_layout
from autotune.simulators.base import Simulator
from autotune.simulators.calibration import Calibration
from autotune.simulators.calibration import calibrate_constants
from autotune.simulators.calibration import constant_values
from autotune.simulators.job import Job
from autotune.simulators.layout import Layout
from autotune.simulators.prediction import Prediction

__all__ = ["AnalyticalSimulator"]


class AnalyticalSimulator(Simulator):
    """Closed-form step time and memory; microseconds per layout, or many layouts at once
    with numpy (:meth:`simulate_many`).

    Example:
        >>> from autotune import catalog
        >>> catalog.load_simulator("analytical").name
        'analytical'
    """

    name = "analytical"
    # Layouts per simulate_many call in a search: a signal is noticed between two calls (a few
    # tenths of a second) and the per-call cost stays small.
    batch_size = 4096
    calibrated_constants = {
        "matmul_efficiency": ("attention_efficiency",),
        "host_overhead": ("host_op_overhead_us",),
        "memory_constant_gib": ("reserved_memory_gib",),
    }

    def __init__(self, constants: AnalyticalConstants) -> None:
        self.constants = constants
        self._jobs: dict[Job, JobPrices] = {}
        self._last: JobPrices | None = None

    @classmethod
    def from_config(cls, constants: Mapping[str, Any]) -> AnalyticalSimulator:
        return cls(AnalyticalConstants.from_mapping(constants))

    def simulate(self, job: Job, layout: Layout) -> Prediction:
        return simulate_layout(self._prices(job), layout)

    def simulate_many(self, job: Job, layouts: Sequence[Layout]) -> BatchPrediction:
        """Price ``layouts`` at once with numpy: the numbers of :meth:`simulate`, as arrays.

        Like :meth:`simulate`, it assumes every layout is valid.
        """
        return simulate_batch(self._prices(job), layouts)

    def calibrated(self, calibration: Calibration) -> AnalyticalSimulator:
        return AnalyticalSimulator(
            calibrate_constants(self.constants, calibration, self.calibrated_constants)
        )

    def calibrated_values(self) -> dict[str, float]:
        return constant_values(self.constants, self.calibrated_constants)

    def _prices(self, job: Job) -> JobPrices:
        prices = self._last
        if prices is None or prices.job != job:
            prices = self._jobs.get(job)
            if prices is None:
                prices = self._jobs[job] = JobPrices(job, self.constants)
            self._last = prices
        return prices
