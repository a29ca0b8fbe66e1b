"""Memory margins per training stack, each with the evidence behind it (docs/calibration.md 3).

A layout fits when its predicted peak times ``1 + margin`` is within the device's memory. The
margin is the 95th percentile of how far the memory model under-predicts, measured on runs of
the same stack (framework): a run with a measured peak says ``measured / predicted - 1``, a
run that ran out of memory at least ``capacity / predicted - 1``. A stack with too few such
runs for a 95th percentile gets the widest margin of the stacks that have enough: a stack with
no evidence must not get the margin of the best-measured one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.calibrate._fit import Run
from autotune.calibrate._fit import memory_margin
from simulators import Simulator

__all__ = [
    "MIN_EVIDENCE",
    "StackMargin",
    "evidence",
    "margin_for",
    "margins_from",
    "stack_margins",
]

# Runs a stack needs for its own margin: a 95th percentile needs at least 20 of them (one in
# twenty above it).
MIN_EVIDENCE = 20


@dataclass(frozen=True, slots=True)
class StackMargin:
    """A stack's memory margin, the runs behind it, and the stack it was borrowed from."""

    framework: str
    value: float
    runs: int  # runs of this stack with a measured peak or an out-of-memory outcome
    sources: tuple[str, ...]  # where they come from
    borrowed_from: str | None = None  # too few runs: the widest margin of another stack

    def text(self) -> str:
        """Where the margin comes from, with its run count, in one phrase."""
        own = f"{self.runs} run(s) of {self.framework} with a measured peak or out of memory"
        if self.sources:
            own += f" ({', '.join(self.sources)})"
        if self.borrowed_from is None:
            return f"95th percentile of under-prediction over {own}"
        if self.borrowed_from == "":
            return f"{own}: too few for a margin, and no stack has {MIN_EVIDENCE}"
        return (
            f"{own}: too few for its own, so the widest of the stacks that have "
            f"{MIN_EVIDENCE} ({self.borrowed_from})"
        )


def stack_margins(
    simulator: Simulator, runs: Sequence[Run], sources: Sequence[str] = ()
) -> dict[str, StackMargin]:
    """Each framework's margin from ``runs`` (those with a measured peak or that ran out of
    memory count), as ``simulator`` predicts them; ``sources`` names each run's source.

    The keys are the frameworks of ``runs``; :func:`margin_for` answers any other.
    """
    predicted, measured, frameworks, named = [], [], [], []
    for i, run in enumerate(runs):
        if not (math.isfinite(run.peak_memory_gib) or run.status == "oom"):
            continue
        prediction = simulator.simulate(*run.specs)
        pair = evidence(
            prediction.peak_gib(run.peak_memory_measure),
            prediction.memory_gib,
            run.peak_memory_gib,
            run.specs[1].device.memory_gib,
        )
        predicted.append(pair[0])
        measured.append(pair[1])
        frameworks.append(run.specs[2].framework.name)
        named.append(sources[i] if sources else "")
    return margins_from(np.array(predicted), np.array(measured), frameworks, named)


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
    frameworks: Sequence[str],
    sources: Sequence[str],
) -> dict[str, StackMargin]:
    """Each framework's margin from paired evidence (:func:`evidence`), with its sources."""
    found = {}
    stacks = np.asarray(frameworks, dtype=object)
    names = np.asarray(sources, dtype=object)
    for framework in sorted(set(frameworks)):
        mine = stacks == framework
        value = memory_margin(predicted_gib[mine], measured_gib[mine]) or 0.0
        where = tuple(sorted({str(s) for s in names[mine]} - {""}))
        found[framework] = StackMargin(framework, value, int(mine.sum()), where)
    return found


def margin_for(framework: str, margins: dict[str, StackMargin]) -> StackMargin:
    """``framework``'s own margin if enough runs back it, else the widest of those that have
    enough (the stack's own run count kept, to be said)."""
    mine = margins.get(framework, StackMargin(framework, 0.0, 0, ()))
    if mine.runs >= MIN_EVIDENCE:
        return mine
    backed = [m for m in margins.values() if m.runs >= MIN_EVIDENCE]
    if not backed:
        return StackMargin(framework, mine.value, mine.runs, mine.sources, borrowed_from="")
    widest = max(backed, key=lambda m: m.value)
    return StackMargin(
        framework, widest.value, mine.runs, mine.sources, borrowed_from=widest.framework
    )
