"""Calibration: fit a simulator's factors to measured runs, apply them, probe a job.

``python -m autotune.calibrate`` fits and writes ``conf/calibrations/<name>.yaml``;
:func:`calibrated_job` applies one (and a memory margin) to a job; :func:`fit` is the fit.
"""

from __future__ import annotations

from autotune.calibrate._apply import Margin
from autotune.calibrate._apply import calibrated_job
from autotune.calibrate._apply import check_calibration
from autotune.calibrate._apply import shipped_margin
from autotune.calibrate._fit import FitResult
from autotune.calibrate._fit import FitSettings
from autotune.calibrate._fit import Run
from autotune.calibrate._fit import fit
from autotune.calibrate._fit import memory_margin

__all__ = [
    "FitResult",
    "FitSettings",
    "Margin",
    "Run",
    "calibrated_job",
    "check_calibration",
    "fit",
    "memory_margin",
    "shipped_margin",
]
