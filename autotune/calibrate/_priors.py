"""What the probe loop knows of a job before its first probe: the residual model of the
simulator's step time and the common share of its memory error, both estimated on measured
jobs (the shipped rows for a search; every other source's rows for the benchmark), beside
the given sds of the parts of the simulator's constants (their calibration factors' prior
widths)."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from autotune.calibrate._fit import Run
from autotune.calibrate._residuals import LayoutFeatures
from autotune.calibrate._residuals import ResidualModel
from autotune.calibrate._residuals import estimate
from autotune.calibrate._residuals import layout_features
from autotune.calibrate._shares import SHARE_FACTORS
from autotune.calibrate._shares import step_shares
from autotune.simulators import Simulator

__all__ = [
    "Priors",
    "StepResiduals",
    "given_widths",
    "priors_from",
    "shipped_priors",
    "shipped_residuals",
    "step_residuals",
]


@dataclass(frozen=True, slots=True)
class Priors:
    """The step-time residual model, and the share of the memory error's variance that is
    common to a job's layouts (:mod:`autotune.calibrate._memory`): estimated on each source's
    measured peaks alone, then averaged over the sources (each weighing the same; a source
    whose device-level peaks carry the caching allocator's noise says a small share, one
    measuring the tensors a large one), with the measured peaks behind it."""

    time: ResidualModel
    memory_common: float
    memory_rows: int


@dataclass(frozen=True, slots=True)
class StepResiduals:
    """Measured layouts that ran, as the residual model sees them: ``log(measured /
    predicted)`` of each, its job (source, scenario), its source and its features."""

    residuals: np.ndarray
    jobs: list[tuple[str, str]]
    sources: np.ndarray
    features: LayoutFeatures

    def where(self, keep: np.ndarray) -> StepResiduals:
        """The layouts where ``keep`` (one boolean per layout) is true."""
        at = np.flatnonzero(keep)
        return StepResiduals(
            self.residuals[at],
            [self.jobs[i] for i in at],
            self.sources[at],
            self.features.take(at),
        )

    def estimate(
        self, scales: bool = True, given: Mapping[str, float] | None = None
    ) -> ResidualModel:
        """The residual model estimated on these layouts (:func:`estimate`), the sds of the
        constants' parts ``given``."""
        return estimate(
            self.residuals,
            self.jobs,
            list(self.sources),
            self.features,
            scales=scales,
            given=given,
        )


def step_residuals(
    table: pd.DataFrame,
    runs: Sequence[Run | None],
    predicted_s: np.ndarray,
    shares: np.ndarray | None = None,
) -> StepResiduals:
    """The rows of ``table`` that ran and were priced, as :class:`StepResiduals` (``shares``:
    each row's :func:`autotune.calibrate._shares.step_shares`; None: 0)."""
    sources = table["source"].astype(str).to_numpy()
    scenarios = table["scenario"].astype(str).to_numpy()
    timed = [
        i
        for i, run in enumerate(runs)
        if run is not None and run.ran and np.isfinite(predicted_s[i]) and predicted_s[i] > 0
    ]
    return StepResiduals(
        np.log([runs[i].step_time_s / predicted_s[i] for i in timed]),  # type: ignore[union-attr]
        [(sources[i], scenarios[i]) for i in timed],
        sources[timed],
        layout_features(
            [runs[i].specs[1] for i in timed],  # type: ignore[union-attr]
            None if shares is None else shares[timed],
        ),
    )


def priors_from(
    table: pd.DataFrame,
    runs: Sequence[Run | None],
    predicted_s: np.ndarray,
    predicted_peak_gib: np.ndarray,
    leave_out: str | None = None,
    shares: np.ndarray | None = None,
    given: Mapping[str, float] | None = None,
) -> Priors:
    """Both models estimated on the rows of ``table`` (``source`` and ``scenario`` name each
    row's job), but those of source ``leave_out``.

    Args:
        table: the measured rows.
        runs: each row as a run (None: not priced).
        predicted_s: the simulator's step time of each row.
        predicted_peak_gib: its peak of each row as the row's peak was measured
            (``peak_memory_measure``).
        leave_out: a source whose rows are not used (the one the benchmark scores).
        shares: each row's :func:`autotune.calibrate._shares.step_shares` (None: 0).
        given: the sd of the part of each share factor (its calibration prior width).
    """
    timed = step_residuals(table, runs, predicted_s, shares)
    time = timed.where(timed.sources != leave_out).estimate(given=given)
    sources = table["source"].astype(str).to_numpy()
    jobs = list(zip(sources, table["scenario"].astype(str).to_numpy(), strict=True))
    mine = sources != leave_out
    peaks = [
        i
        for i, run in enumerate(runs)
        if run is not None
        and mine[i]
        and np.isfinite(run.peak_memory_gib)
        and np.isfinite(predicted_peak_gib[i])
        and predicted_peak_gib[i] > 0
    ]
    common_shares = []
    for source in sorted(set(sources[peaks])):  # each source's own split, then their mean
        mine = [i for i in peaks if sources[i] == source]
        memory = estimate(
            np.log([runs[i].peak_memory_gib / predicted_peak_gib[i] for i in mine]),  # type: ignore[union-attr]
            [jobs[i] for i in mine],
            sources[mine],
            LayoutFeatures.none(len(mine)),
            scales=False,  # the share below is the same at any scale
        )
        common_shares.append(memory.level**2 / (memory.level**2 + memory.own**2))
    # no measured peak: the whole error taken as the job's, the cautious side (an OOM probe
    # then rules out every layout predicted to need as much)
    common = float(np.mean(common_shares)) if common_shares else 1.0
    return Priors(time=time, memory_common=common, memory_rows=len(peaks))


@dataclass(frozen=True, slots=True)
class _Shipped:
    """The shipped rows as one simulator predicts them."""

    table: pd.DataFrame
    runs: list[Run | None]
    predicted_s: np.ndarray
    peak_gib: np.ndarray  # as each row's peak was measured
    shares: np.ndarray  # each row's step_shares (0 where not priced)


_SHIPPED: dict[int, tuple[Simulator, _Shipped]] = {}  # by simulator, the last few


def _shipped(simulator: Simulator) -> _Shipped:
    found = _SHIPPED.get(id(simulator))
    if found is not None and found[0] is simulator:
        return found[1]
    from autotune.calibrate._rows import shipped_rows

    table, shipped_runs = shipped_rows()
    runs = list(shipped_runs)
    predicted = np.full(len(runs), np.nan)
    peaks = np.full(len(runs), np.nan)
    for i, run in enumerate(runs):
        if run is not None and (run.ran or np.isfinite(run.peak_memory_gib)):
            prediction = simulator.simulate(*run.specs)
            predicted[i] = prediction.step_time_s
            peaks[i] = prediction.peak_gib(run.peak_memory_measure, run.peak_memory_rank)
    priced = [i for i, run in enumerate(runs) if run is not None and run.ran]  # the residuals
    shares = np.zeros((len(runs), len(SHARE_FACTORS)))
    shares[priced] = step_shares(
        simulator,
        [runs[i].specs for i in priced],  # type: ignore[union-attr]
        predicted[priced],
    )
    shipped = _Shipped(table, runs, predicted, peaks, shares)
    if len(_SHIPPED) > 4:
        _SHIPPED.clear()
    _SHIPPED[id(simulator)] = (simulator, shipped)
    return shipped


def shipped_residuals(simulator: Simulator) -> StepResiduals:
    """The shipped rows that ran as ``simulator`` predicts them (:class:`StepResiduals`)."""
    shipped = _shipped(simulator)
    return step_residuals(shipped.table, shipped.runs, shipped.predicted_s, shipped.shares)


def shipped_priors(
    simulator: Simulator, given: Mapping[str, float], leave_out: str | None = None
) -> Priors:
    """:func:`priors_from` the shipped rows as ``simulator`` predicts them, but those of source
    ``leave_out``: what the probe loop of a search starts from (every shipped row), and what
    the benchmark's probe protocol gives a source (every other shipped source's rows).
    ``given``: the sd of the part of each share factor (its calibration prior width)."""
    shipped = _shipped(simulator)
    return priors_from(
        shipped.table,
        shipped.runs,
        shipped.predicted_s,
        shipped.peak_gib,
        leave_out,
        shipped.shares,
        given,
    )


def given_widths(prior: Mapping[str, float]) -> dict[str, float]:
    """The sd of the residual model's part of each :data:`SHARE_FACTORS` constant: the prior
    width of its calibration factor (:attr:`FitSettings.prior`), so the probe loop doubts a
    constant as much as a calibration does."""
    return {name: float(prior[name]) for name in SHARE_FACTORS}
