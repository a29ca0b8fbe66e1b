"""How much of each layout's step the host's pace sets: the part of the step a host-overhead
error moves, which the probe loop's residual model carries (:mod:`autotune.calibrate._residuals`).

Eager PyTorch issues every operator from one host thread, so a pass whose kernels take less
time than the host's calls lasts as long as the calls (docs/decisions/0001-host-dispatch-floor.md).
Both simulators take that floor from one constant, the host's cost per call, which the
``host_overhead`` factor scales. The share of a layout's step that the floor sets is the
derivative ``d log(step time) / d log(host cost per call)``: 0 for a layout whose every pass
is the device's, 1 for one whose every pass is the host's. It is read by a finite difference,
one more simulation per layout, at the simulator's own calibration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from autotune.simulators import Simulator
from autotune.simulators.calibrated import CalibratedSimulator
from autotune.simulators.calibrated import calibrated
from autotune.simulators.calibration import Calibration
from autotune.simulators.job import Job
from autotune.simulators.layout import Layout
from autotune.simulators.limits import MAX_CALIBRATION_SCALE

__all__ = ["host_shares"]

_STEP = 1e-3  # the log step of the host's cost per call (0.1 %)


def host_shares(
    simulator: Simulator,
    specs: Sequence[tuple[Job, Layout]],
    step_s: np.ndarray | None = None,
) -> np.ndarray:
    """The share of each layout's step that the host's pace sets (module docstring), within
    [0, 1].

    Args:
        simulator: the simulator (calibrated or not) whose shares are read.
        specs: the job and layout of each.
        step_s: ``simulator``'s own step time of each, where the caller has it (None: simulated
            here; a prediction of another simulator, such as a search's re-ranked layouts,
            must not be given).
    """
    if isinstance(simulator, CalibratedSimulator):
        center = simulator.calibration
        base: Simulator = simulator.base
    else:
        center, base = Calibration(simulator=simulator.name), simulator
    now = center.factor("host_overhead")
    step = _STEP if now * math.exp(_STEP) <= MAX_CALIBRATION_SCALE else -_STEP
    moved = calibrated(base, center.with_factors({"host_overhead": now * math.exp(step)}))
    if step_s is None:
        step_s = np.array([simulator.simulate(job, layout).step_time_s for job, layout in specs])
    after = np.array([moved.simulate(job, layout).step_time_s for job, layout in specs])
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = (np.log(after) - np.log(step_s)) / step
    return np.clip(np.nan_to_num(shares, nan=0.0), 0.0, 1.0)
