"""The calibration protocols the benchmark scores: leave one source out, leave one model out,
and probing K layouts.

They run here, beside the fit and the probe choice they exercise, on plain arrays: the
benchmark hands in the zero-shot predictions (:class:`ZeroShot`) and scores the
:class:`ProtocolScores` that come back like any ranking.

``leave_one_source_out``: for each source, calibrate on the rows of every other source
(relative factors, so they carry across clusters), then predict this source's rows.

``leave_one_model_out``: within each source, for each model, calibrate on the rows of the
other models of the same cluster and framework (the cluster's history), then predict this
model's rows. A (source, cluster, framework) with a single model is not scored, and says so
(:attr:`ProtocolScores.unscored`).

``probe`` (K = 1..5): :mod:`autotune.calibrate._probe_protocol`.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from autotune import dataset
from autotune.calibrate._fit import FitSettings
from autotune.calibrate._fit import Run
from autotune.calibrate._fits import ProtocolFit
from autotune.calibrate._fits import empty_arrays
from autotune.calibrate._fits import peak_key
from autotune.calibrate._fits import run_fits
from autotune.calibrate._margins import Evidence
from autotune.calibrate._margins import evidence
from autotune.calibrate._margins import margin_for
from autotune.calibrate._margins import run_evidence
from autotune.calibrate._probe import ProbeSettings
from autotune.calibrate._rows import shipped_runs_beyond
from autotune.progress import Progress
from autotune.simulators import Simulator
from autotune.simulators.calibration import Calibration
from autotune.simulators.prediction import MEMORY_READINGS
from autotune.simulators.prediction import peak_as_measured

__all__ = [
    "PROTOCOLS",
    "ProtocolScores",
    "ProtocolSettings",
    "ZeroShot",
    "empty_arrays",
    "leave_one_model_out",
    "leave_one_source_out",
    "margins_elsewhere",
    "peak_key",
    "scores_of",
]

PROTOCOLS = ("zero_shot", "leave_one_source_out", "leave_one_model_out", "probe")


@dataclass(frozen=True, slots=True)
class ProtocolSettings:
    """The fit's settings, the probe loop's stop rule and the K values of the probe protocol."""

    fit: FitSettings
    probe: ProbeSettings
    probes: tuple[int, ...]
    workers: int = 1  # processes fitting leave one source out's and model out's calibrations


@dataclass(frozen=True, slots=True)
class ZeroShot:
    """The uncalibrated predictions of every row of the table (NaN where none)."""

    predicted_s: np.ndarray
    memory_gib: np.ndarray  # the device's peak (what must fit)
    # the peak of each reading (MEMORY_READINGS); None: memory_gib for every reading
    peaks_gib: Mapping[str, np.ndarray] | None = None

    def peak_gib(self, readings: np.ndarray) -> np.ndarray:
        """Each row's predicted peak as its measurement counts it (``readings``: each row's
        :func:`autotune.dataset.peak_readings`)."""
        return peak_as_measured(readings, self.memory_gib, self.peaks_gib)


@dataclass(frozen=True, slots=True)
class ProtocolScores:
    """What one protocol (and K) gives the rows it covers: a score to rank by (lower first),
    the predictions, and whether each fits; arrays over ``rows`` (table positions)."""

    name: str
    kind: str  # "simulator" or "baseline"
    protocol: str
    rows: np.ndarray
    score: np.ndarray
    predicted_s: np.ndarray
    memory_gib: np.ndarray
    peaks_gib: Mapping[str, np.ndarray]  # the peak of each of MEMORY_READINGS
    fits: np.ndarray
    probes: int = 0
    unscored: tuple[tuple[str, str], ...] = ()  # (source, why some of its rows are not)
    probes_used: np.ndarray | None = None  # per row: the probes its scenario measured


def margins_elsewhere(
    simulator: Simulator, table: pd.DataFrame, runs: Sequence[Run | None], zero: ZeroShot
) -> dict[tuple[str, str], float]:
    """Per (source, framework) of the table, the uncalibrated memory margin that the runs of
    every other source give that stack (:mod:`autotune.calibrate._margins`): the table's other
    sources and the shipped sources it does not hold, so a source scored alone (``data=`` one
    source, or a file of one's own) gets the margin the others give it, as in the whole
    table, not the margin of no evidence (docs/decisions/0070)."""
    table_sources = table["source"].astype(str).to_numpy()
    found = _table_evidence(table, runs, zero)
    beyond = shipped_runs_beyond(set(table_sources))
    if beyond:  # run_evidence keeps those with a measured peak or out of memory
        runs_beyond, sources_beyond = zip(*beyond, strict=True)
        found = found.joined(run_evidence(simulator, runs_beyond, sources_beyond))
    frameworks = [run.specs[0].train.framework.name if run else "" for run in runs]
    margins = {}
    for source in sorted(set(table_sources)):
        stacks = found.take(np.array(found.sources, dtype=object) != source).margins()
        mine = {f for f, s in zip(frameworks, table_sources, strict=True) if s == source}
        for framework in mine - {""}:
            margins[source, framework] = margin_for(framework, stacks, elsewhere=True).value
    return margins


def _table_evidence(table: pd.DataFrame, runs: Sequence[Run | None], zero: ZeroShot) -> Evidence:
    """The :class:`Evidence` of the table's rows with a measured peak or out of memory, as
    the zero-shot predictions price them."""
    measured = table["peak_memory_gib"].to_numpy(dtype=float, na_value=np.nan)
    oom = table["status"].to_numpy(dtype=str) == "oom"
    as_measured = zero.peak_gib(dataset.peak_readings(table))
    sources = table["source"].astype(str).tolist()
    kept = [
        (i, run)
        for i, run in enumerate(runs)
        if run is not None and (np.isfinite(measured[i]) or oom[i])
    ]
    capacity = [run.specs[0].cluster.device.memory_gib for _, run in kept]
    pairs = [
        evidence(as_measured[i], zero.memory_gib[i], measured[i], device)
        for (i, _), device in zip(kept, capacity, strict=True)
    ]
    return Evidence(
        np.array([p for p, _ in pairs], dtype=float),
        np.array([t for _, t in pairs], dtype=float),
        np.array(capacity, dtype=float),
        [run.specs[0].train.framework.name for _, run in kept],
        [sources[i] for i, _ in kept],
    )


def scores_of(
    name: str,
    kind: str,
    protocol: str,
    arrays: dict[str, np.ndarray],
    k: int = 0,
    rows: np.ndarray | None = None,
    unscored: tuple[tuple[str, str], ...] = (),
) -> ProtocolScores:
    """The scores of ``rows`` (every row when None) from full-length arrays."""
    rows = np.arange(len(arrays["score"])) if rows is None else rows
    return ProtocolScores(
        name=name,
        kind=kind,
        protocol=protocol,
        rows=rows,
        score=arrays["score"][rows],
        predicted_s=arrays["predicted_s"][rows],
        memory_gib=arrays["memory_gib"][rows],
        peaks_gib={key: arrays[peak_key(key)][rows] for key in MEMORY_READINGS},
        fits=arrays["fits"][rows],
        probes=k,
        unscored=unscored,
        probes_used=arrays["probes_used"][rows] if "probes_used" in arrays else None,
    )


def leave_one_source_out(
    simulator: Simulator,
    table: pd.DataFrame,
    runs: Sequence[Run | None],
    zero: ZeroShot,
    settings: ProtocolSettings,
) -> tuple[ProtocolScores, dict[str, Calibration]]:
    """Each source's rows predicted by a calibration fitted on every other source's rows: the
    table's and those of the shipped sources it does not hold, so a source scored alone is
    scored as in the whole table (docs/decisions/0070).

    The margin is that calibration's (:func:`autotune.calibrate._fits.predict_calibrated`);
    where the other sources' rows hold too little memory evidence for a 95th percentile, the
    uncalibrated one of every other source's runs of the stack, the shipped ones included
    (:func:`margins_elsewhere`). ``settings.workers`` processes fit at once.
    """
    elsewhere = margins_elsewhere(simulator, table, runs, zero)
    sources = table["source"].astype(str).to_numpy()
    beyond = shipped_runs_beyond(set(sources))
    scored = sorted(set(sources))
    planned = []
    for source in scored:
        pairs = [(r, s) for r, s in zip(runs, sources, strict=True) if r and s != source] + beyond
        planned.append(
            ProtocolFit(
                train=[r for r, _ in pairs],
                sources=[s for _, s in pairs],
                rows=np.flatnonzero(sources == source),
                no_evidence={f: m for (s, f), m in elsewhere.items() if s == source},
            )
        )
    arrays = empty_arrays(len(table))
    progress = Progress(f"{simulator.name}, leave one source out", len(planned), unit="fits")
    found = run_fits(simulator, planned, runs, settings.fit, arrays, progress, settings.workers)
    calibrations = dict(zip(scored, found, strict=True))
    name = f"{simulator.name}, leave-one-source-out"
    return scores_of(name, "simulator", "leave_one_source_out", arrays), calibrations


@dataclass(frozen=True, slots=True)
class _History:
    """The measured rows of one (source, cluster, framework): one cluster's history."""

    source: str
    cluster: str
    framework: str
    rows: np.ndarray  # table positions


def _histories(table: pd.DataFrame, runs: Sequence[Run | None]) -> list[_History]:
    """The measured rows of each (source, cluster, framework), in that order."""
    sources = table["source"].astype(str).to_numpy()
    clusters = table["cluster"].astype(str).to_numpy()
    found: dict[tuple[str, str, str], list[int]] = {}
    for i, run in enumerate(runs):
        if run is not None:
            key = (str(sources[i]), str(clusters[i]), run.specs[0].train.framework.name)
            found.setdefault(key, []).append(i)
    return [_History(*key, np.array(rows, dtype=int)) for key, rows in sorted(found.items())]


def leave_one_model_out(
    simulator: Simulator,
    table: pd.DataFrame,
    runs: Sequence[Run | None],
    zero: ZeroShot,
    settings: ProtocolSettings,
) -> ProtocolScores:
    """Each model's rows predicted by a calibration fitted on the rows of the other models of
    its source, cluster and framework, with what their layouts measured beyond it (a layout of
    a job of the same key, :func:`autotune.simulators.calibrated.job_key`, takes it).

    The margin is that calibration's (:func:`autotune.calibrate._fits.predict_calibrated`);
    where those rows hold too little memory evidence for a 95th percentile, the uncalibrated
    one of every other source's runs of the stack (what the probe protocol starts from): no row
    of the scored model decides its margin. A history of a single model is not scored:
    :attr:`ProtocolScores.unscored` says so per source. ``settings.workers`` processes fit at
    once.
    """
    elsewhere = margins_elsewhere(simulator, table, runs, zero)
    models = table["model"].astype(str).to_numpy()
    arrays = empty_arrays(len(table))
    planned = []
    unscored: dict[str, list[str]] = {}
    for history in _histories(table, runs):
        names = sorted(set(models[history.rows]))
        if len(names) < 2:
            unscored.setdefault(history.source, []).append(
                f"{history.cluster}, {history.framework}: one model ({names[0]})"
            )
            continue
        no_evidence = {history.framework: elsewhere[history.source, history.framework]}
        for model in names:
            train = [r for i in history.rows if models[i] != model and (r := runs[i])]
            held = history.rows[models[history.rows] == model]
            planned.append(ProtocolFit(train, (), held, no_evidence, layouts=True))
    progress = Progress(f"{simulator.name}, leave one model out", len(planned), unit="fits")
    run_fits(simulator, planned, runs, settings.fit, arrays, progress, settings.workers)
    scored = [one.rows for one in planned]
    rows = np.sort(np.concatenate(scored)) if scored else np.array([], dtype=int)
    why = tuple((source, "; ".join(texts)) for source, texts in sorted(unscored.items()))
    name = f"{simulator.name}, leave-one-model-out"
    return scores_of(name, "simulator", "leave_one_model_out", arrays, rows=rows, unscored=why)
