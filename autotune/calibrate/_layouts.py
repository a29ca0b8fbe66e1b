"""What the measured layouts of a cluster's history ran beyond the calibrated prediction
(:attr:`autotune.simulators.calibration.Calibration.layouts`, docs/decisions/0065).

Scale factors set how the simulator prices every layout alike; they cannot say that on one
cluster one layout runs 20% slower than the simulator ranks it against the others of its job.
A model that differs only in depth runs its layouts alike, though: on vTrain's single node the
residuals of the same layout, each against its job's other layouts, correlate 0.93-1.00
between models of the same layer (``benchmarks/results/history_transfer_analytical.md``). So a
calibration fitted on a cluster's history remembers, per measured layout
(by its job's :func:`autotune.simulators.calibrated.job_key`), that residual, and a layout of
a new job with the same key takes it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol

from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import Simulator
from autotune.simulators.calibrated import CalibratedSimulator
from autotune.simulators.calibrated import job_key
from autotune.simulators.calibration import Calibration
from autotune.simulators.limits import MAX_CALIBRATION_SCALE

__all__ = ["measured_layouts"]


class MeasuredRun(Protocol):
    """What :func:`measured_layouts` reads of a run (:class:`autotune.calibrate.Run`)."""

    @property
    def specs(self) -> tuple[Job, Layout]: ...

    @property
    def group(self) -> str: ...

    @property
    def step_time_s(self) -> float: ...

    @property
    def ran(self) -> bool: ...


def measured_layouts(
    simulator: Simulator, calibration: Calibration, runs: Sequence[MeasuredRun]
) -> dict[str, dict[str, float]]:
    """Per job key, then layout, what the runs of it that ran measured beyond ``calibration``'s
    prediction against the other layouts of their job: the mean over them of ``log(measured
    / predicted)`` less its mean over the job's layouts (a job: the runs of one ``group``).

    A job of one layout that ran says nothing of how its layouts differ and is left out.
    Each value stays within the calibration's range (+-log of its largest scale).
    """
    model = CalibratedSimulator(simulator, calibration.with_layouts({}))
    jobs: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    for run in runs:
        if run.ran:
            job, layout = run.specs
            residual = math.log(run.step_time_s / model.simulate(job, layout).step_time_s)
            jobs[run.group].append((job_key(job), layout.describe(), residual))
    found: dict[tuple[str, str], list[float]] = defaultdict(list)
    for members in jobs.values():
        if len(members) > 1:
            mean = sum(residual for *_, residual in members) / len(members)
            for key, described, residual in members:
                found[key, described].append(residual - mean)
    bound = math.log(MAX_CALIBRATION_SCALE)
    remembered: dict[str, dict[str, float]] = defaultdict(dict)
    for (key, described), values in sorted(found.items()):
        remembered[key][described] = min(bound, max(-bound, sum(values) / len(values)))
    return dict(remembered)
