"""How much of each layout's step a constant of the simulator sets: the part of the step that
an error in that constant moves, which the probe loop's residual model carries
(:mod:`autotune.calibrate._residuals`; why:
docs/decisions/0063-a-probe-says-what-it-says-of-the-hosts-pace.md).

Two constants are read, each through the calibration factor that scales it:

- ``host_overhead``, the host's cost per operator call. Eager PyTorch issues every operator
  from one host thread, so a pass whose kernels take less time than the host's calls lasts as
  long as the calls (docs/decisions/0001-host-dispatch-floor.md): 0 for a layout whose every
  pass is the device's, 1 for one whose every pass is the host's.
- ``inter_node_efficiency``, the share of the links between nodes a collective gets: 0 for a
  layout on one node or whose traffic between nodes is hidden, up to 1 for one that waits on
  that traffic all step.

The share of a constant is ``|d log(step time) / d log(factor)|``, within [0, 1], read by a
finite difference: one more simulation per layout and constant, at the simulator's own
calibration.
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

__all__ = ["SHARE_FACTORS", "step_shares"]

# the calibration factors whose share of each layout's step the residual model reads
SHARE_FACTORS: tuple[str, ...] = ("host_overhead", "inter_node_efficiency")

_STEP = 1e-3  # the log step of a factor (0.1 %)


def step_shares(
    simulator: Simulator,
    specs: Sequence[tuple[Job, Layout]],
    step_s: np.ndarray | None = None,
    factors: Sequence[str] = SHARE_FACTORS,
) -> np.ndarray:
    """The share of each layout's step that each factor's constant sets (module docstring): one
    row per layout, one column per factor, within [0, 1].

    Args:
        simulator: the simulator (calibrated or not) whose shares are read.
        specs: the job and layout of each.
        step_s: ``simulator``'s own step time of each, where the caller has it (None: simulated
            here; a prediction of another simulator, such as a search's re-ranked layouts,
            must not be given).
        factors: the calibration factors read (:data:`SHARE_FACTORS`).
    """
    if isinstance(simulator, CalibratedSimulator):
        center = simulator.calibration
        base: Simulator = simulator.base
    else:
        center, base = Calibration(simulator=simulator.name), simulator
    if step_s is None:
        step_s = np.array([simulator.simulate(job, layout).step_time_s for job, layout in specs])
    shares = np.zeros((len(specs), len(factors)))
    for k, name in enumerate(factors):
        now = center.factor(name)
        # down: an efficiency above 1 is capped (autotune/simulators/calibration.py)
        step = -_STEP if now * math.exp(-_STEP) >= 1 / MAX_CALIBRATION_SCALE else _STEP
        moved = calibrated(base, center.with_factors({name: now * math.exp(step)}))
        after = np.array([moved.simulate(job, layout).step_time_s for job, layout in specs])
        with np.errstate(divide="ignore", invalid="ignore"):
            slope = (np.log(after) - np.log(step_s)) / step
        shares[:, k] = np.clip(np.abs(np.nan_to_num(slope, nan=0.0)), 0.0, 1.0)
    return shares
