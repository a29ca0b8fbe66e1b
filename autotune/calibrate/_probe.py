"""The probe loop: which few layouts to measure, and the pick once they are measured.

**Choosing K probes.** The candidates are the layouts predicted to fit whose predicted time is
within ``probe_pool`` of the best. What the simulator does not know is modelled as its
factors being off (each by its prior width, in the direction its sensitivities give: a
candidate dominated by communication moves with the link efficiencies, a host-bound one with
the host overhead) plus an error of ``time_noise`` of its own. Sampling that uncertainty gives
possible true step times of every candidate; the probes are chosen greedily to make the
expected best measured time of the batch smallest (the batch's expected improvement). The
first probe is the candidate most likely to be fast; later ones are those that would win in
the worlds where the first ones lose, so the batch spreads over layouts whose predicted
breakdowns respond differently to the factors, instead of K near-copies of one layout.

**Picking.** After calibrating on the probes, the calibrated predictions are put on the
measured scale of this job: multiplied by the geometric mean of measured / predicted over the
probes that ran (:func:`job_level`; few probes move the factors only a little, so the level
they leave is corrected here, for this job only). An unmeasured layout is picked only when it
is predicted to fit (with the memory margin) and to beat the best measured probe by more than
``time_noise`` (its expected error); otherwise the best measured probe is the pick. So the pick
is never a layout known to be worse than a probe, nor one that ran out of memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.calibrate._fit import FitSettings
from autotune.calibrate._fit import time_sensitivities
from autotune.order import order_key
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import Simulator
from autotune.simulators.calibration import TIME_FACTORS
from autotune.simulators.calibration import Calibration

__all__ = ["Pick", "choose_probes", "job_level", "pick"]

_SAMPLES = 1024  # draws of the simulator's uncertainty
_POOL_MAX = 48  # candidates weighed at most (the best predicted first)


def _order(predicted_s: Sequence[float], fits: Sequence[bool]) -> list[int]:
    """Positions in the one order of layouts: predicted to fit first, then the fastest."""
    return sorted(range(len(fits)), key=lambda i: order_key(bool(fits[i]), predicted_s[i]))


def _pool(predicted_s: Sequence[float], fits: Sequence[bool], k: int, slack: float) -> list[int]:
    """Candidates: predicted to fit, within ``slack`` of the best; at least ``k`` of them."""
    order = _order(predicted_s, fits)
    fitting = [i for i in order if fits[i]]
    if not fitting:
        return order[:k]
    best = predicted_s[fitting[0]]
    pool = [i for i in fitting if predicted_s[i] <= best * (1 + slack)]
    if len(pool) < k:
        pool = fitting[:k] if len(fitting) >= k else order[:k]
    return pool[:_POOL_MAX]


def choose_probes(
    simulator: Simulator,
    specs: Sequence[tuple[Job, Layout]],
    predicted_s: Sequence[float],
    fits: Sequence[bool],
    k: int,
    settings: FitSettings,
    pool_slack: float,
    center: Calibration | None = None,
) -> list[int]:
    """Positions of the ``k`` layouts to measure (or all of them when there are fewer).

    Args:
        simulator: the uncalibrated simulator.
        specs: the candidate layouts of one job, as (job, layout).
        predicted_s: ``simulator``'s predicted step times of them (``center`` applied).
        fits: whether each is predicted to fit (with the memory margin).
        k: how many to measure.
        settings: the fit's priors and noise (the uncertainty sampled).
        pool_slack: candidates are within this share of the best predicted time.
        center: the calibration the predictions came from (None: uncalibrated).
    """
    pool = _pool(predicted_s, fits, k, pool_slack)
    if len(pool) <= k:
        return pool
    center = center or Calibration(simulator=simulator.name)
    sensitivity = time_sensitivities(simulator, center, [specs[i] for i in pool])
    widths = np.array([settings.prior[name] for name in TIME_FACTORS])
    rng = np.random.default_rng(settings.seed)
    shifts = rng.standard_normal((_SAMPLES, len(widths))) * widths
    noise = rng.standard_normal((_SAMPLES, len(pool))) * settings.time_noise
    logs = np.log([predicted_s[i] for i in pool])
    worlds = logs + shifts @ sensitivity.T + noise  # (samples, candidates): true log times
    chosen: list[int] = []
    best = np.full(_SAMPLES, np.inf)
    for _ in range(k):
        left = [j for j in range(len(pool)) if j not in chosen]
        expected = [np.mean(np.minimum(best, worlds[:, j])) for j in left]
        j = left[int(np.argmin(expected))]  # ties: the better predicted (pool order)
        chosen.append(j)
        best = np.minimum(best, worlds[:, j])
    return [pool[j] for j in chosen]


def job_level(
    predicted_s: Sequence[float], probes: Sequence[int], measured_s: Sequence[float]
) -> float:
    """Geometric mean of measured / predicted step time over the probes that ran (1: none)."""
    ratios = [
        math.log(t / predicted_s[i])
        for i, t in zip(probes, measured_s, strict=True)
        if math.isfinite(t) and math.isfinite(predicted_s[i]) and predicted_s[i] > 0
    ]
    return math.exp(sum(ratios) / len(ratios)) if ratios else 1.0


@dataclass(frozen=True, slots=True)
class Pick:
    """The final layout: its position, whether it was measured, why it was chosen, and the
    job's level (what the calibrated predictions were multiplied by)."""

    index: int
    measured: bool
    reason: str
    level: float = 1.0


def pick(
    predicted_s: Sequence[float],
    fits: Sequence[bool],
    probes: Sequence[int],
    measured_s: Sequence[float],
    time_noise: float,
) -> Pick:
    """The final pick among every candidate after the probes were measured.

    Args:
        predicted_s: the calibrated predicted step time of every candidate (probes too).
        fits: whether each is predicted to fit (calibrated, with the memory margin).
        probes: positions of the measured candidates.
        measured_s: their measured step times (NaN: ran out of memory or failed).
        time_noise: the lead (log) an unmeasured layout needs over the best probe.
    """
    level = job_level(predicted_s, probes, measured_s)
    ran = [(t, i) for i, t in zip(probes, measured_s, strict=True) if math.isfinite(t)]
    best_probe = min(ran) if ran else None
    measured = set(probes)
    unmeasured = sorted(
        (predicted_s[i] * level, i) for i in range(len(fits)) if i not in measured and fits[i]
    )
    if unmeasured:
        predicted, i = unmeasured[0]
        if best_probe is None:
            return Pick(i, False, "no probe ran: the best layout predicted to fit", level)
        if predicted * math.exp(time_noise) < best_probe[0]:
            return Pick(
                i,
                False,
                f"predicted {predicted:.3g} s, ahead of the best probe's measured "
                f"{best_probe[0]:.3g} s by more than the expected error",
                level,
            )
    if best_probe is not None:
        return Pick(best_probe[1], True, "the best measured probe", level)
    order = _order(predicted_s, fits)
    rest = [i for i in order if i not in measured] or order
    return Pick(rest[0], False, "no probe ran and no layout is predicted to fit", level)
