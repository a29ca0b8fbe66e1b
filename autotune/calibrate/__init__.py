"""Calibration: fit a simulator's factors to measured runs, apply them, probe a job, and
run the calibration protocols the benchmark scores (:func:`leave_one_source_out`,
:func:`leave_one_model_out`, :func:`probe_scores`).

``python -m autotune.calibrate`` fits and writes ``./calibrations/<name>.yaml``;
:func:`calibrated_job` applies one (and a memory margin) to a job; :func:`fit` is the fit.
"""

from __future__ import annotations

from autotune.calibrate._apply import Margin
from autotune.calibrate._apply import calibrated_job
from autotune.calibrate._apply import check_calibration
from autotune.calibrate._apply import memory_runs
from autotune.calibrate._apply import shipped_margin
from autotune.calibrate._apply import shipped_margins
from autotune.calibrate._command import fit_settings
from autotune.calibrate._fit import FitResult
from autotune.calibrate._fit import FitSettings
from autotune.calibrate._fit import Run
from autotune.calibrate._fit import device_share
from autotune.calibrate._fit import fit
from autotune.calibrate._fit import memory_margin
from autotune.calibrate._loop import ProbePlan
from autotune.calibrate._loop import ProbeRound
from autotune.calibrate._loop import plan_probes
from autotune.calibrate._loop import record_round
from autotune.calibrate._margins import MIN_EVIDENCE
from autotune.calibrate._margins import StackMargin
from autotune.calibrate._margins import evidence
from autotune.calibrate._margins import margin_for
from autotune.calibrate._margins import margins_from
from autotune.calibrate._margins import stack_margins
from autotune.calibrate._priors import StepResiduals
from autotune.calibrate._priors import given_widths
from autotune.calibrate._priors import shipped_residuals
from autotune.calibrate._probe import Pick
from autotune.calibrate._probe import ProbeSettings
from autotune.calibrate._probe import next_probes
from autotune.calibrate._probe import pick
from autotune.calibrate._probe_protocol import probe_scores
from autotune.calibrate._protocols import PROTOCOLS
from autotune.calibrate._protocols import ProtocolScores
from autotune.calibrate._protocols import ProtocolSettings
from autotune.calibrate._protocols import ZeroShot
from autotune.calibrate._protocols import leave_one_model_out
from autotune.calibrate._protocols import leave_one_source_out
from autotune.calibrate._residuals import ResidualModel
from autotune.calibrate._residuals import log_density
from autotune.calibrate._round import probe_round
from autotune.calibrate._rows import row_runs

__all__ = [
    "MIN_EVIDENCE",
    "PROTOCOLS",
    "FitResult",
    "FitSettings",
    "Margin",
    "Pick",
    "ProbePlan",
    "ProbeRound",
    "ProbeSettings",
    "ProtocolScores",
    "ProtocolSettings",
    "ResidualModel",
    "Run",
    "StackMargin",
    "StepResiduals",
    "ZeroShot",
    "calibrated_job",
    "check_calibration",
    "device_share",
    "evidence",
    "fit",
    "fit_settings",
    "given_widths",
    "leave_one_model_out",
    "leave_one_source_out",
    "log_density",
    "margin_for",
    "margins_from",
    "memory_margin",
    "memory_runs",
    "next_probes",
    "pick",
    "plan_probes",
    "probe_round",
    "probe_scores",
    "record_round",
    "row_runs",
    "shipped_margin",
    "shipped_margins",
    "shipped_residuals",
    "stack_margins",
]
