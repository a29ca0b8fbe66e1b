"""Memory margins per training stack, each with the evidence behind it (docs/calibration.md 3).

A layout fits when its predicted peak times ``1 + margin`` is within the device's memory. The
margin keeps a layout at that limit clear of the memory model's misses 19 times in 20, the
misses measured on runs of the same stack (framework) in shares of the device's memory
(:func:`autotune.calibrate._fit.memory_margin`): a run with a measured peak misses
``(measured - predicted) / capacity``, a run that ran out of memory at least ``(capacity -
predicted) / capacity``. A stack with too few such runs for a 95th percentile gets the margin
of every stack's runs pooled: what the memory model misses across stacks, not the margin of
the best-measured one. So does a stack whose runs all come from one source, for a job on
another cluster: they show how the memory model misses on that cluster, not how much that
moves from one cluster to the next (docs/decisions/0068).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.calibrate._fit import MIN_EVIDENCE
from autotune.calibrate._fit import Run
from autotune.calibrate._fit import device_share
from autotune.calibrate._fit import memory_margin
from autotune.simulators import Simulator

__all__ = [
    "MIN_EVIDENCE",
    "MIN_SOURCES",
    "POOLED",
    "Evidence",
    "StackMargin",
    "evidence",
    "margin_for",
    "margins_from",
    "run_evidence",
    "stack_margins",
]


POOLED = "every stack"  # the margin over every stack's runs together
# Sources a stack's runs must come from for its own margin on a cluster they did not measure
MIN_SOURCES = 2


@dataclass(frozen=True, slots=True)
class StackMargin:
    """A stack's memory margin and the runs behind it: its own (``pooled`` False), or, with
    fewer than :data:`MIN_EVIDENCE` of its own, every stack's together."""

    framework: str
    value: float
    runs: int  # runs of this stack with a measured peak or an out-of-memory outcome
    sources: tuple[str, ...]  # where they come from
    pooled_runs: int = 0  # > 0: the margin is of this many runs of every stack

    @property
    def supported(self) -> bool:
        """Whether enough runs back the margin for a 95th percentile: the stack's own, or
        every stack's pooled (:data:`MIN_EVIDENCE`)."""
        return max(self.runs, self.pooled_runs) >= MIN_EVIDENCE

    def text(self) -> str:
        """Where the margin comes from, with its run counts, in one short phrase."""
        free = f"{100 * device_share(self.value):.1f}% of the device free"
        if not self.pooled_runs:
            where = f": {', '.join(self.sources)}" if self.sources else ""
            return f"{free}: 95th percentile, {self.runs} {self.framework} runs{where}"
        where = f" ({', '.join(self.sources)})" if self.sources else ""
        return (
            f"{free}: {self.runs} {self.framework} runs with a known peak{where}; every "
            f"stack's {self.pooled_runs} runs pooled"
        )


def stack_margins(
    simulator: Simulator, runs: Sequence[Run], sources: Sequence[str] = ()
) -> dict[str, StackMargin]:
    """Each framework's margin from ``runs`` (those with a measured peak or that ran out of
    memory count), as ``simulator`` predicts them; ``sources`` names each run's source.

    The keys are the frameworks of ``runs``; :func:`margin_for` answers any other.
    """
    return run_evidence(simulator, runs, sources).margins()


@dataclass(frozen=True, slots=True)
class Evidence:
    """What runs say of the memory model, one entry per run with a measured peak or an
    out-of-memory outcome (:func:`evidence`), with its device's memory, stack and source."""

    predicted_gib: np.ndarray
    measured_gib: np.ndarray
    capacity_gib: np.ndarray
    frameworks: list[str]
    sources: list[str]

    def take(self, keep: np.ndarray) -> Evidence:
        """The entries where ``keep`` (a boolean mask) holds."""
        return Evidence(
            self.predicted_gib[keep],
            self.measured_gib[keep],
            self.capacity_gib[keep],
            [f for f, k in zip(self.frameworks, keep, strict=True) if k],
            [s for s, k in zip(self.sources, keep, strict=True) if k],
        )

    def joined(self, other: Evidence) -> Evidence:
        """These entries, then ``other``'s."""
        return Evidence(
            np.concatenate([self.predicted_gib, other.predicted_gib]),
            np.concatenate([self.measured_gib, other.measured_gib]),
            np.concatenate([self.capacity_gib, other.capacity_gib]),
            self.frameworks + other.frameworks,
            self.sources + other.sources,
        )

    def margins(self) -> dict[str, StackMargin]:
        """Each framework's margin from these entries (:func:`margins_from`)."""
        return margins_from(
            self.predicted_gib, self.measured_gib, self.capacity_gib, self.frameworks, self.sources
        )


def run_evidence(
    simulator: Simulator, runs: Sequence[Run], sources: Sequence[str] = ()
) -> Evidence:
    """The :class:`Evidence` of those of ``runs`` (named by ``sources``, or ``()``) that have a
    measured peak or ran out of memory, as ``simulator`` predicts them."""
    predicted, measured, capacity, frameworks, named = [], [], [], [], []
    for i, run in enumerate(runs):
        if not (math.isfinite(run.peak_memory_gib) or run.status == "oom"):
            continue
        prediction = simulator.simulate(*run.specs)
        pair = evidence(
            prediction.peak_gib(run.peak_memory_measure, run.peak_memory_rank),
            prediction.memory_gib,
            run.peak_memory_gib,
            run.specs[0].cluster.device.memory_gib,
        )
        predicted.append(pair[0])
        measured.append(pair[1])
        capacity.append(run.specs[0].cluster.device.memory_gib)
        frameworks.append(run.specs[0].train.framework.name)
        named.append(sources[i] if sources else "")
    return Evidence(
        np.array(predicted, dtype=float),
        np.array(measured, dtype=float),
        np.array(capacity, dtype=float),
        frameworks,
        named,
    )


def evidence(
    as_measured_gib: float, device_gib: float, measured_gib: float, capacity_gib: float
) -> tuple[float, float]:
    """(predicted, measured) of one run: its peak as measured, or, for a run that ran out of
    memory without a measured peak, the device's predicted peak against the device's memory
    (which its real peak passed)."""
    if math.isfinite(measured_gib):
        return as_measured_gib, measured_gib
    return device_gib, capacity_gib


def margins_from(
    predicted_gib: np.ndarray,
    measured_gib: np.ndarray,
    capacity_gib: np.ndarray,
    frameworks: Sequence[str],
    sources: Sequence[str],
) -> dict[str, StackMargin]:
    """Each framework's margin from paired evidence (:func:`evidence`) on devices of
    ``capacity_gib``, with its sources, and every stack's together under :data:`POOLED`."""
    found = {}
    stacks = np.asarray(frameworks, dtype=object)
    names = np.asarray(sources, dtype=object) if len(sources) else np.full(len(stacks), "")
    every = np.ones(len(stacks), dtype=bool)
    for framework, mine in [(f, stacks == f) for f in sorted(set(frameworks))] + [(POOLED, every)]:
        value = memory_margin(predicted_gib[mine], measured_gib[mine], capacity_gib[mine])
        value = value or 0.0
        where = tuple(sorted({str(s) for s in names[mine]} - {""}))
        found[framework] = StackMargin(framework, value, int(mine.sum()), where)
    return found


def margin_for(
    framework: str, margins: dict[str, StackMargin], elsewhere: bool = False
) -> StackMargin:
    """``framework``'s own margin if enough runs back it, else every stack's pooled (the
    stack's own run count kept, to be said); :attr:`StackMargin.supported` says whether even
    the pooled runs are enough.

    ``elsewhere``: the job runs on a cluster that none of the runs measured (the shipped runs
    for a search, the other sources' for the benchmark); the stack's own margin then also
    needs runs of :data:`MIN_SOURCES` sources.
    """
    mine = margins.get(framework, StackMargin(framework, 0.0, 0, ()))
    if mine.runs >= MIN_EVIDENCE and (not elsewhere or len(mine.sources) >= MIN_SOURCES):
        return mine
    pooled = margins.get(POOLED, StackMargin(POOLED, 0.0, 0, ()))
    return StackMargin(framework, pooled.value, mine.runs, mine.sources, pooled.runs)
