"""The calibrations a protocol fits, and the predictions each makes of the rows it scores: one
after another, or in ``workers`` processes (the fits are independent; each process gets the
simulator and the table's runs once, each fit its own rows).

A fit's predictions do not depend on where it ran: the same factors, margins and arrays, to
the bit, in one process or several.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune._process import pool_worker
from autotune.calibrate._fit import FitSettings
from autotune.calibrate._fit import Run
from autotune.calibrate._fit import fit
from autotune.calibrate._margins import margin_for
from autotune.calibrate._margins import stack_margins
from autotune.progress import Progress
from autotune.simulators import Simulator
from autotune.simulators.calibrated import CalibratedSimulator
from autotune.simulators.calibration import Calibration
from autotune.simulators.prediction import MEMORY_READINGS

__all__ = ["ProtocolFit", "empty_arrays", "peak_key", "predict_calibrated", "run_fits"]


@dataclass(frozen=True, slots=True)
class ProtocolFit:
    """One calibration of a protocol: fitted on ``train`` (named by ``sources``, or ``()``),
    it predicts ``rows`` (table positions), with ``no_evidence`` the margin of each stack
    whose runs in ``train`` are too few (:func:`predict_calibrated`)."""

    train: Sequence[Run]
    sources: Sequence[str]
    rows: np.ndarray
    no_evidence: Mapping[str, float]
    layouts: bool = False


def empty_arrays(n: int) -> dict[str, np.ndarray]:
    return {
        "score": np.full(n, np.nan),
        "predicted_s": np.full(n, np.nan),
        "memory_gib": np.full(n, np.nan),
        **{peak_key(key): np.full(n, np.nan) for key in MEMORY_READINGS},
        "fits": np.zeros(n, dtype=bool),
    }


def peak_key(reading: str) -> str:
    """The key of the predicted peak of ``reading`` (:data:`MEMORY_READINGS`) in
    :func:`empty_arrays`."""
    return f"{reading}_gib"


def predict_calibrated(
    simulator: Simulator,
    one: ProtocolFit,
    runs: Sequence[Run | None],
    settings: FitSettings,
    arrays: dict[str, np.ndarray],
) -> Calibration:
    """Fit on ``one.train``, predict ``one.rows`` into ``arrays``; the calibration fitted.

    A layout fits with its stack's margin on ``train`` as calibrated
    (:func:`autotune.calibrate.stack_margins`; too few runs of the stack, or, with ``sources``
    named, runs of one source: every stack's pooled), or the stack's ``no_evidence`` (its
    uncalibrated margin of every other source,
    :func:`autotune.calibrate._protocols.margins_elsewhere`) when even every stack's runs of
    ``train`` with a measured peak or out of memory are too few for a 95th percentile
    (:data:`autotune.calibrate.MIN_EVIDENCE`). ``layouts``: the calibration also remembers
    what ``train``'s layouts measured beyond it (a cluster's history,
    :func:`autotune.calibrate._layouts.measured_layouts`).
    """
    result = fit(simulator, one.train, settings, layouts=one.layouts)
    calibrated = CalibratedSimulator(simulator, result.calibration, 0.0)
    stacks = stack_margins(calibrated, one.train, one.sources)
    for i in one.rows:
        run = runs[int(i)]
        if run is None:
            continue
        p = calibrated.simulate(*run.specs)
        # sources named: other clusters' runs (leave-one-source-out); none: the job's own
        framework = run.specs[0].train.framework.name
        stack = margin_for(framework, stacks, elsewhere=bool(one.sources))
        margin = stack.value if stack.supported else one.no_evidence[framework]
        arrays["score"][i] = arrays["predicted_s"][i] = p.step_time_s
        arrays["memory_gib"][i] = p.memory_gib
        for key, peak in p.readings_gib().items():
            arrays[peak_key(key)][i] = peak
        arrays["fits"][i] = p.memory_gib * (1 + margin) <= p.memory_capacity_gib
    return result.calibration


def run_fits(
    simulator: Simulator,
    planned: Sequence[ProtocolFit],
    runs: Sequence[Run | None],
    settings: FitSettings,
    arrays: dict[str, np.ndarray],
    progress: Progress,
    workers: int = 1,
) -> list[Calibration]:
    """Each planned fit's calibration, in order, its rows' predictions written into ``arrays``;
    ``progress`` counts the fits done. With ``workers`` above 1, that many processes fit at
    once (a ``multiprocessing.Pool``; Ctrl-C ends them with the command). They are spawned,
    not forked: a fork copies whatever locks the parent's threads (torch's, MLflow's) hold."""
    count = min(workers, len(planned))
    if count <= 1:
        found = []
        for done, one in enumerate(planned, start=1):
            found.append(predict_calibrated(simulator, one, runs, settings, arrays))
            progress.update(done)
        return found
    calibrations: dict[int, Calibration] = {}
    shared = _Shared(simulator, runs, settings, len(arrays["score"]))
    context = multiprocessing.get_context("spawn")
    with context.Pool(count, _start_worker, (os.getpid(), shared)) as pool:
        results = pool.imap_unordered(_fit_in_worker, enumerate(planned))
        for finished, (index, calibration, predicted) in enumerate(results, start=1):
            rows = planned[index].rows
            for key, values in predicted.items():
                arrays[key][rows] = values
            calibrations[index] = calibration
            progress.update(finished)
    return [calibrations[i] for i in range(len(planned))]


@dataclass(frozen=True, slots=True)
class _Shared:
    """What every fit of a worker process shares."""

    simulator: Simulator
    runs: Sequence[Run | None]
    settings: FitSettings
    n_rows: int


_shared: list[_Shared] = []  # in a worker process: its one _Shared


def _start_worker(parent: int, shared: _Shared) -> None:
    pool_worker(parent)
    _shared.append(shared)


def _fit_in_worker(
    indexed: tuple[int, ProtocolFit],
) -> tuple[int, Calibration, dict[str, np.ndarray]]:
    """One fit in a worker process: its index, calibration and its rows' predictions."""
    index, one = indexed
    shared = _shared[0]
    arrays = empty_arrays(shared.n_rows)
    calibration = predict_calibrated(shared.simulator, one, shared.runs, shared.settings, arrays)
    return index, calibration, {key: values[one.rows] for key, values in arrays.items()}
