"""What the probe loop believes of a job's memory: which layouts fit, and how that changes when
a probe runs out of memory or measures its peak.

The memory residual of a layout, ``log(true peak / predicted peak)``, is modelled as a part
``u`` common to every layout of the job (what the memory model misses on this job: a
framework's buffers, the allocator) plus a part ``e`` of the layout's own, both Gaussian with
mean 0. Together their sd is the one the memory margin implies: the margin is what a layout
at the device's limit is under-predicted by, at most, 19 times in 20 (docs/calibration.md 3),
so ``sd = log(1 + margin) / z(0.95)``; the common share of the variance, ``common``, is
estimated on measured peaks (:func:`autotune.calibrate._residuals.estimate` with no layout
field: the job's part and the layout's own). Without a probe a layout fits with probability
95% exactly when it fits with the margin, as the search decides it.

A probe tells of ``u``: a measured peak, ``u + e = log(measured / predicted)``; a run out of
memory, ``u + e > log(device memory / predicted)``; a run without a measured peak, ``u + e <=
log(device memory / predicted)``. The posterior of ``u`` is computed on a grid (it is one
number, and a run out of memory truncates it), and with it every layout's chance to fit, the
memory factor ``exp(E[u])`` and the margin after the probes (the 95th percentile of ``u + e``
over the posterior): an out-of-memory probe moves the whole job's memory up, most for the
layouts whose predicted peak is near or above the one that failed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from autotune.calibrate._fit import Run

__all__ = [
    "MARGIN_QUANTILE",
    "MemoryBelief",
    "Observation",
    "memory_belief",
    "normal_cdf",
    "observe",
]


MARGIN_QUANTILE = 0.95  # a layout at the limit is under-predicted by at most the margin this often
_Z = NormalDist().inv_cdf(MARGIN_QUANTILE)
_GRID = 801  # points of the common part's grid, over +-8 of its prior sds, or wider (below)
_WIDE = 8.0
_MIN_SD = 1e-4  # an sd of a log memory residual never below 0.01 % (a step, not a chance)
_erf = np.vectorize(math.erf, otypes=[float])


def normal_cdf(x: np.ndarray | float) -> np.ndarray:
    """The standard normal distribution function, elementwise."""
    return np.asarray(0.5 * (1 + _erf(np.asarray(x, dtype=float) / math.sqrt(2))))


@dataclass(frozen=True, slots=True)
class Observation:
    """What one probe says of memory: ``peak`` (a measured peak: ``value`` is log measured /
    predicted as it was measured), ``oom`` (``value`` is log device memory / predicted peak,
    which the true peak passed) or ``ran`` (the same bound, which it stayed within)."""

    kind: str
    value: float


@dataclass(frozen=True, slots=True)
class MemoryBelief:
    """The posterior of the job's common memory residual on a grid, and the own part's sd."""

    grid: np.ndarray
    weights: np.ndarray  # sum to 1
    own: float
    margin: float  # the margin after the probes (:func:`margin_of`)

    def fit_chance(self, log_room: np.ndarray) -> np.ndarray:
        """The chance that each layout fits: ``log_room`` is log(device memory / predicted
        peak) of each."""
        room = np.asarray(log_room, dtype=float)
        z = (room[:, None] - self.grid[None, :]) / self.own
        return np.asarray(normal_cdf(z) @ self.weights)

    @property
    def factor(self) -> float:
        """The memory factor the probes imply: exp of the common part's posterior mean."""
        return float(math.exp(float(self.weights @ self.grid)))


def _margin_of(belief: MemoryBelief) -> float:
    """The margin after the probes: a layout whose predicted peak times ``1 + margin`` is
    within the device fits with probability :data:`MARGIN_QUANTILE` (at least 0)."""
    low = float(belief.grid[0]) - _WIDE * belief.own
    high = float(belief.grid[-1]) + _WIDE * belief.own
    for _ in range(60):  # bisection on the distribution of u + e
        mid = (low + high) / 2
        if float(belief.fit_chance(np.array([mid]))[0]) < MARGIN_QUANTILE:
            low = mid
        else:
            high = mid
    return max(0.0, math.exp(high) - 1)


def memory_belief(
    margin: float, common: float, observations: Sequence[Observation] = ()
) -> MemoryBelief:
    """The belief about a job's memory given the margin, the common share of the variance and
    what the probes found (module docstring)."""
    from scipy.special import log_ndtr  # log Phi, exact far in the tail

    sd = max(math.log1p(margin) / _Z, _MIN_SD)
    common = min(max(common, 0.0), 1.0)
    sd_u = max(sd * math.sqrt(common), _MIN_SD)
    # the grid reaches every observation: a probe far beyond the prior (a layout predicted at a
    # third of the device that ran out of memory) puts the common part many prior sds out
    reach = max([_WIDE * sd_u, *(abs(seen.value) for seen in observations)])
    grid = np.linspace(-reach, reach, _GRID)
    own = max(sd * math.sqrt(1 - common), float(grid[1] - grid[0]))  # no finer than the grid
    log_weight = -0.5 * (grid / sd_u) ** 2
    for seen in observations:
        z = (seen.value - grid) / own
        if seen.kind == "peak":
            log_weight += -0.5 * z**2
        elif seen.kind == "oom":  # u + e above the room: P = 1 - Phi(z)
            log_weight += log_ndtr(-z)
        elif seen.kind == "ran":
            log_weight += log_ndtr(z)
        else:
            raise ValueError(f"unknown memory observation {seen.kind!r}")
    weights = np.exp(log_weight - log_weight.max())
    belief = MemoryBelief(grid=grid, weights=weights / weights.sum(), own=own, margin=margin)
    return MemoryBelief(belief.grid, belief.weights, own, _margin_of(belief))


def observe(run: Run, peak_gib: float, as_measured_gib: float, device_gib: float) -> Observation:
    """What a measured run says of memory.

    Args:
        run: the measured run (``ok`` or ``oom``).
        peak_gib: its predicted peak of the device.
        as_measured_gib: its predicted peak as its measured peak counts it
            (``run.peak_memory_measure``).
        device_gib: the device's memory.
    """
    if run.status == "ok" and math.isfinite(run.peak_memory_gib) and run.peak_memory_gib > 0:
        return Observation("peak", math.log(run.peak_memory_gib / as_measured_gib))
    return Observation("ran" if run.status == "ok" else "oom", math.log(device_gib / peak_gib))
