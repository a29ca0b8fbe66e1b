"""Calibration: fit a simulator's factors to measured runs, apply them, probe a job.

``python -m autotune.calibrate`` fits and writes ``./calibrations/<name>.yaml``;
:func:`calibrated_job` applies one (and a memory margin) to a job; :func:`fit` is the fit.
"""

from __future__ import annotations

from autotune.calibrate._apply import Margin
from autotune.calibrate._apply import calibrated_job
from autotune.calibrate._apply import check_calibration
from autotune.calibrate._apply import shipped_margin
from autotune.calibrate._apply import shipped_margins
from autotune.calibrate._fit import FitResult
from autotune.calibrate._fit import FitSettings
from autotune.calibrate._fit import Run
from autotune.calibrate._fit import fit
from autotune.calibrate._fit import memory_margin
from autotune.calibrate._loop import ProbePlan
from autotune.calibrate._loop import ProbeRound
from autotune.calibrate._loop import plan_probes
from autotune.calibrate._loop import probe_round
from autotune.calibrate._loop import record_round
from autotune.calibrate._margins import MIN_EVIDENCE
from autotune.calibrate._margins import StackMargin
from autotune.calibrate._margins import evidence
from autotune.calibrate._margins import margin_for
from autotune.calibrate._margins import margins_from
from autotune.calibrate._margins import stack_margins
from autotune.calibrate._probe import Pick
from autotune.calibrate._probe import choose_probes
from autotune.calibrate._probe import pick

__all__ = [
    "MIN_EVIDENCE",
    "FitResult",
    "FitSettings",
    "Margin",
    "Pick",
    "ProbePlan",
    "ProbeRound",
    "Run",
    "StackMargin",
    "calibrated_job",
    "check_calibration",
    "choose_probes",
    "evidence",
    "fit",
    "margin_for",
    "margins_from",
    "memory_margin",
    "pick",
    "plan_probes",
    "probe_round",
    "record_round",
    "shipped_margin",
    "shipped_margins",
    "stack_margins",
]
