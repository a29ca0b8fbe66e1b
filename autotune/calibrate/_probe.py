"""The probe loop's choices: the next layouts to measure, when to stop, and the pick.

What is known of each candidate layout of a job is a belief about its step time
(:mod:`autotune.calibrate._residuals`: log-normal, the simulator's prediction moved by what
the measured layouts say of the job and of the field values they share) and a chance that it
fits in memory (:mod:`autotune.calibrate._memory`: the memory margin read as a distribution,
moved by what the probes say of memory).

**The next probe** maximises the expected improvement over the best measured step time so far
(before any probe ran: over the expected time of the layout that would be picked now), times
the chance that the layout fits: a layout that runs out of memory improves nothing. So a
layout is worth a run when it is likely fast, or uncertain (it shares little with what was
measured), and likely to fit; a layout that shares its field values with a measured probe is
known better and is worth less. Several probes at once (``probes=K`` of the search) are chosen
one after the other, each as if the earlier ones had been measured at their expected step
time (the Kriging believer), which spreads them over what the earlier ones do not teach.

**Stopping.** Once a probe has run, the loop stops when the chance that some unmeasured
layout fits and beats the best measured step time by more than ``stop_gain`` is at most
``stop_probability``, and says so. That chance is taken as ``1 - prod(1 - p_i)`` over the
layouts' own chances ``p_i``, as if the layouts were independent. Under the prior every part
is shared with a non-negative weight, the events are positively associated and the product
bounds the chance from above (Harris' inequality); after the probes, two layouts that share
different field values with a probe can be slightly anti-correlated, and the product is then
an approximation (docs/decisions/0055).

**The pick** is the layout with the least expected step time among the probes that ran (their
measured time) and the unmeasured layouts predicted to fit with the memory margin (their
expected time, which carries their uncertainty): a layout known to be worse than a probe, or
one that ran out of memory, is never picked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field

import numpy as np

from autotune.calibrate._memory import MemoryBelief
from autotune.calibrate._memory import normal_cdf
from autotune.calibrate._residuals import Belief
from autotune.calibrate._residuals import LayoutFeatures
from autotune.calibrate._residuals import ResidualModel
from autotune.calibrate._residuals import belief

__all__ = [
    "Candidates",
    "NextProbes",
    "Pick",
    "ProbeSettings",
    "Probed",
    "any_chance",
    "expected_improvement",
    "next_probes",
    "outlook",
    "pick",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeSettings:
    """When the loop stops: the chance that some unmeasured layout fits and beats the best
    measured step time by more than ``stop_gain`` (a share) is at most ``stop_probability``."""

    stop_gain: float
    stop_probability: float


@dataclass(frozen=True, slots=True)
class Candidates:
    """The layouts of one job as the simulator sees them (one entry each)."""

    log_predicted: np.ndarray  # log of the predicted step time
    features: LayoutFeatures  # what the residual model reads of each layout
    memory_gib: np.ndarray  # the simulator's predicted peak of the device
    device_gib: np.ndarray  # the device's memory
    memory: MemoryBelief  # what is believed of the job's memory (the probes' evidence)

    @property
    def fits(self) -> np.ndarray:
        """Predicted to fit with the margin to spare (what the search calls fitting), the
        margin as the probes left it: a chance to fit of 95% at least."""
        return np.asarray(self.memory_gib * (1 + self.memory.margin) <= self.device_gib)

    def fit_chance(self) -> np.ndarray:
        """Each layout's chance to fit (:meth:`MemoryBelief.fit_chance`)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            room = np.log(self.device_gib / self.memory_gib)
        return np.where(np.isfinite(room), self.memory.fit_chance(np.nan_to_num(room)), 0.0)


@dataclass(frozen=True, slots=True)
class Probed:
    """What the probes found: the step time of those that ran, and those that ran out of
    memory (positions among the candidates)."""

    ran: Mapping[int, float] = field(default_factory=dict)
    failed: frozenset[int] = frozenset()

    @property
    def tried(self) -> set[int]:
        return {*self.ran, *self.failed}

    def best(self) -> tuple[float, int] | None:
        """The best measured (step time, position); None when no probe ran."""
        return min((t, i) for i, t in self.ran.items()) if self.ran else None


def expected_improvement(best_s: float, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """E[max(0, best - T)] for T log-normal with log mean ``mean`` and log variance ``var``."""
    sd = np.sqrt(np.maximum(var, 1e-18))
    z = (math.log(best_s) - mean) / sd
    return np.asarray(best_s * normal_cdf(z) - np.exp(mean + var / 2) * normal_cdf(z - sd)).clip(
        min=0.0
    )


@dataclass(frozen=True, slots=True)
class Outlook:
    """What is known of every candidate: the belief about its step time, its expected step
    time, its chance of fitting (1 for a probe that ran, 0 for one that failed), whether it is
    predicted to fit, and whether it is ruled out by a probe that ran out of memory with no
    more memory predicted than it (:func:`outlook`)."""

    belief: Belief
    expected_s: np.ndarray
    fit_chance: np.ndarray
    fits: np.ndarray
    ruled_out: np.ndarray


def outlook(model: ResidualModel, candidates: Candidates, probed: Probed) -> Outlook:
    """The belief and fit chances of every candidate given what the probes found.

    A layout predicted to need at least the memory of a probe that ran out of memory is taken
    not to fit (chance 0): it could fit only if the memory model ordered the two wrongly, and
    such a layout is no pick and no probe worth its risk.
    """
    known = belief(model, candidates.log_predicted, candidates.features, probed.ran)
    chance = candidates.fit_chance()
    fits = candidates.fits.copy()
    ruled_out = np.zeros(len(chance), dtype=bool)
    if probed.failed:
        ruled_out = candidates.memory_gib >= min(candidates.memory_gib[list(probed.failed)])
        chance[ruled_out] = 0.0
        fits[ruled_out] = False
    chance[list(probed.ran)] = 1.0
    fits[list(probed.ran)] = True
    return Outlook(known, known.expected_s, chance, fits, ruled_out)


def _beat_chance(view: Outlook, best_s: float, gain: float, open_: np.ndarray) -> np.ndarray:
    """Per open candidate: the chance that it fits and runs faster than ``best * (1 - gain)``."""
    sd = np.sqrt(np.maximum(view.belief.var[open_], 1e-18))
    z = (math.log(best_s * (1 - gain)) - view.belief.mean[open_]) / sd
    return np.asarray(view.fit_chance[open_] * normal_cdf(z))


@dataclass(frozen=True, slots=True)
class NextProbes:
    """The layouts to measure next (positions), each with its expected improvement times its
    fit chance when chosen, and why the loop stops (None: it goes on)."""

    chosen: list[int]
    value_s: list[float]
    stop: str | None = None


# size: the greedy batch, its believer updates and the stop rule read the same few arrays
def next_probes(
    model: ResidualModel,
    candidates: Candidates,
    probed: Probed,
    k: int,
    settings: ProbeSettings,
) -> NextProbes:
    """Up to ``k`` layouts to measure next (module docstring), or fewer with the reason.

    Args:
        model: the prior of the job's step-time residuals.
        candidates: every layout of the job.
        probed: what earlier probes found (none: the first round).
        k: how many to choose at most.
        settings: the stop rule.
    """
    believed = dict(probed.ran)
    chosen: list[int] = []
    values: list[float] = []
    for _ in range(k):
        view = outlook(model, candidates, Probed(believed, probed.failed))
        tried = {*believed, *probed.failed}
        open_ = np.array([i for i in range(len(view.expected_s)) if i not in tried], dtype=int)
        open_ = open_[view.fit_chance[open_] > 0]
        if not len(open_):
            return NextProbes(chosen, values, "every layout has been measured or cannot fit")
        best = min(believed.values()) if believed else None
        if best is not None:
            chance = _beat_chance(view, best, settings.stop_gain, open_)
            if any_chance(chance) <= settings.stop_probability:
                return NextProbes(chosen, values, _stop_text(best, chance, settings))
        else:  # nothing ran yet: improve on the layout that would be picked now
            fitting = open_[view.fits[open_]]
            best = float(np.min(view.expected_s[fitting if len(fitting) else open_]))
        gains = expected_improvement(best, view.belief.mean[open_], view.belief.var[open_])
        value = gains * view.fit_chance[open_]
        j = int(np.argmax(value))  # ties: the first in the candidates' order
        chosen.append(int(open_[j]))
        values.append(float(value[j]))
        believed[int(open_[j])] = float(np.exp(view.belief.mean[open_[j]]))
    return NextProbes(chosen, values)


def any_chance(chances: np.ndarray) -> float:
    """The chance that at least one of several positively associated events happens, at most
    (module docstring): ``1 - prod(1 - p)``."""
    return float(1.0 - np.prod(1.0 - np.asarray(chances, dtype=float)))


def _stop_text(best_s: float, chances: np.ndarray, settings: ProbeSettings) -> str:
    return (
        f"the chance that an unmeasured layout fits and beats {best_s:.4g} s by more than "
        f"{settings.stop_gain:.1%} is {any_chance(chances):.1%}, not above "
        f"{settings.stop_probability:.0%} ({len(chances)} unmeasured "
        f"layout{'s' if len(chances) != 1 else ''}; the most likely alone: "
        f"{float(np.max(chances)):.1%}): stop probing"
    )


@dataclass(frozen=True, slots=True)
class Pick:
    """The final layout: its position, whether it was measured, why it was chosen, and its
    expected step time (its measurement, if measured)."""

    index: int
    measured: bool
    reason: str
    expected_s: float


def pick(view: Outlook, candidates: Candidates, probed: Probed) -> Pick:
    """The layout with the least expected step time among the probes that ran and the
    unmeasured layouts predicted to fit with the margin (module docstring)."""
    best = probed.best()
    tried = probed.tried
    fits = view.fits
    unmeasured = [
        (float(view.expected_s[i]), i) for i in range(len(fits)) if i not in tried and fits[i]
    ]
    top = min(unmeasured) if unmeasured else None
    if best is not None and (top is None or best[0] <= top[0]):
        return Pick(best[1], True, "the best measured probe", best[0])
    if top is not None:
        why = (
            "no probe ran: the best layout predicted to fit (the least expected step time)"
            if best is None
            else f"expected {top[0]:.4g} s, below the best probe's measured {best[0]:.4g} s"
        )
        return Pick(top[1], False, why, top[0])
    rest = sorted(
        (float(view.expected_s[i]), i) for i in range(len(fits)) if i not in probed.failed
    ) or sorted((float(view.expected_s[i]), i) for i in range(len(fits)))
    return Pick(rest[0][1], False, "no probe ran and no layout is predicted to fit", rest[0][0])
