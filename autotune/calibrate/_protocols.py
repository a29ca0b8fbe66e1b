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

``probe`` (K = 1..5): per scenario, the tool chooses K probes among the scenario's measured
layouts from its uncalibrated predictions (:func:`autotune.calibrate.choose_probes`), sees
their measured time or out-of-memory status, calibrates on them and nothing else from the
scenario (nor from any other scenario), re-predicts the other layouts and picks
(:func:`autotune.calibrate.pick`): an unmeasured layout only when it is predicted to fit and to
beat the best measured probe by more than the expected error. Baselines: ``top-K probes``
(measure the K best predicted, keep the best measured) and, added by the benchmark, ``random
probes`` (the exact expected regret of the best of K layouts drawn at random). Each is scored
like any other ranking:
a probe ranks by its measured time, an unmeasured layout by its calibrated prediction plus the
lead it needs, so regret@1 is the pick's. A probe's own prediction is left out of the errors
(MAPE and memory MAPE are on the other rows only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from autotune.calibrate._fit import FitSettings
from autotune.calibrate._fit import Run
from autotune.calibrate._fit import fit
from autotune.calibrate._margins import evidence
from autotune.calibrate._margins import margin_for
from autotune.calibrate._margins import margins_from
from autotune.calibrate._margins import stack_margins
from autotune.calibrate._probe import choose_probes
from autotune.calibrate._probe import job_level
from autotune.order import order_key
from autotune.simulators import Simulator
from autotune.simulators.calibrated import CalibratedSimulator
from autotune.simulators.calibration import Calibration

__all__ = [
    "PROTOCOLS",
    "ProtocolScores",
    "ProtocolSettings",
    "ZeroShot",
    "leave_one_model_out",
    "leave_one_source_out",
    "probe_scores",
]

PROTOCOLS = ("zero_shot", "leave_one_source_out", "leave_one_model_out", "probe")
PROBE = "probe"
TOP_PROBES = "top-K probes"
_AFTER_PROBES = 1e30  # top-K probes: the unmeasured rank after every probe that ran


@dataclass(frozen=True, slots=True)
class ProtocolSettings:
    """The fit's settings, the probe pool and the K values."""

    fit: FitSettings
    probe_pool: float
    probes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ZeroShot:
    """The uncalibrated predictions of every row of the table (NaN where none)."""

    predicted_s: np.ndarray
    memory_gib: np.ndarray  # the device's peak
    allocated_gib: np.ndarray | None  # the framework's tensors; None: not predicted apart

    def peak_gib(self, allocated: np.ndarray) -> np.ndarray:
        """Each row's predicted peak as its measurement counts it: the tensors where
        ``allocated`` (per row) says the peak was measured so, else the device's."""
        if self.allocated_gib is None:
            return self.memory_gib
        return np.where(allocated, self.allocated_gib, self.memory_gib)


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
    allocated_gib: np.ndarray
    fits: np.ndarray
    probes: int = 0
    unscored: tuple[tuple[str, str], ...] = ()  # (source, why some of its rows are not)
    probes_used: np.ndarray | None = None  # per row: the probes its scenario measured


def _margins_elsewhere(
    table: pd.DataFrame, runs: Sequence[Run | None], zero: ZeroShot
) -> dict[tuple[str, str], float]:
    """Per (source, framework), the uncalibrated memory margin that the runs of every other
    source give that stack (:mod:`autotune.calibrate._margins`)."""
    sources = table["source"].astype(str).to_numpy()
    frameworks = np.array([run.specs[2].framework.name if run else "" for run in runs])
    measured = table["peak_memory_gib"].to_numpy(dtype=float, na_value=np.nan)
    oom = table["status"].to_numpy(dtype=str) == "oom"
    capacity = np.array([run.specs[1].device.memory_gib if run else np.nan for run in runs])
    allocated = table["peak_memory_measure"].to_numpy(dtype=str) == "allocated"
    as_measured = zero.peak_gib(allocated)
    has = (np.isfinite(measured) | oom) & (frameworks != "")
    pairs = [
        evidence(as_measured[i], zero.memory_gib[i], measured[i], capacity[i])
        for i in range(len(runs))
    ]
    predicted = np.array([p for p, _ in pairs], dtype=float)
    truth = np.array([t for _, t in pairs], dtype=float)
    margins = {}
    for source in sorted(set(sources)):
        other = has & (sources != source)
        stacks = margins_from(predicted[other], truth[other], list(frameworks[other]), ())
        for framework in set(frameworks[sources == source]) - {""}:
            margins[source, str(framework)] = margin_for(str(framework), stacks).value
    return margins


def _empty(n: int) -> dict[str, np.ndarray]:
    return {
        "score": np.full(n, np.nan),
        "predicted_s": np.full(n, np.nan),
        "memory_gib": np.full(n, np.nan),
        "allocated_gib": np.full(n, np.nan),
        "fits": np.zeros(n, dtype=bool),
    }


def _scores(
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
        allocated_gib=arrays["allocated_gib"][rows],
        fits=arrays["fits"][rows],
        probes=k,
        unscored=unscored,
    )


def _predict_calibrated(
    simulator: Simulator,
    train: Sequence[Run],
    sources: Sequence[str],
    rows: np.ndarray,
    runs: Sequence[Run | None],
    settings: ProtocolSettings,
    arrays: dict[str, np.ndarray],
    no_evidence: float = 0.0,
) -> Calibration:
    """Fit on ``train`` (named by ``sources``, or ``()``), predict ``rows`` (table positions)
    into ``arrays``; the calibration fitted.

    A layout fits with its stack's margin on ``train`` as calibrated
    (:func:`autotune.calibrate.stack_margins`; too few runs of the stack: every stack's
    pooled), or ``no_evidence`` when no run of ``train`` has a measured peak or ran out of
    memory.
    """
    result = fit(simulator, train, settings.fit)
    calibrated = CalibratedSimulator(simulator, result.calibration, 0.0)
    stacks = stack_margins(calibrated, train, sources)
    for i in rows:
        run = runs[int(i)]
        if run is None:
            continue
        p = calibrated.simulate(*run.specs)
        stack = margin_for(run.specs[2].framework.name, stacks)
        margin = stack.value if stack.runs or stack.pooled_runs else no_evidence
        arrays["score"][i] = arrays["predicted_s"][i] = p.step_time_s
        arrays["memory_gib"][i] = p.memory_gib
        arrays["allocated_gib"][i] = p.peak_gib("allocated")
        arrays["fits"][i] = p.memory_gib * (1 + margin) <= p.memory_capacity_gib
    return result.calibration


def leave_one_source_out(
    simulator: Simulator,
    table: pd.DataFrame,
    runs: Sequence[Run | None],
    settings: ProtocolSettings,
) -> tuple[ProtocolScores, dict[str, Calibration]]:
    """Each source's rows predicted by a calibration fitted on every other source's rows."""
    sources = table["source"].astype(str).to_numpy()
    arrays = _empty(len(table))
    calibrations: dict[str, Calibration] = {}
    for source in sorted(set(sources)):
        others = [(r, s) for r, s in zip(runs, sources, strict=True) if r and s != source]
        if not others:
            continue
        train, named = [r for r, _ in others], [s for _, s in others]
        # Each stack's margin from the other sources' runs of it (too few: the widest).
        calibrations[source] = _predict_calibrated(
            simulator, train, named, np.flatnonzero(sources == source), runs, settings, arrays
        )
    name = f"{simulator.name}, leave-one-source-out"
    return _scores(name, "simulator", "leave_one_source_out", arrays), calibrations


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
            key = (str(sources[i]), str(clusters[i]), run.specs[2].framework.name)
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
    its source, cluster and framework.

    The margin is that calibration's (:func:`_predict_calibrated`); where those rows hold no
    memory evidence, the uncalibrated one of the other sources' runs of the stack (what the
    probe protocol starts from): no row of the scored model decides its margin. A history of
    a single model is not scored: :attr:`ProtocolScores.unscored` says so per source.
    """
    elsewhere = _margins_elsewhere(table, runs, zero)
    models = table["model"].astype(str).to_numpy()
    arrays = _empty(len(table))
    scored: list[np.ndarray] = []
    unscored: dict[str, list[str]] = {}
    for history in _histories(table, runs):
        names = sorted(set(models[history.rows]))
        if len(names) < 2:
            unscored.setdefault(history.source, []).append(
                f"{history.cluster}, {history.framework}: one model ({names[0]})"
            )
            continue
        for model in names:
            held = history.rows[models[history.rows] == model]
            train = [r for i in history.rows if models[i] != model and (r := runs[i])]
            margin = elsewhere[history.source, history.framework]
            _predict_calibrated(simulator, train, (), held, runs, settings, arrays, margin)
            scored.append(held)
    rows = np.sort(np.concatenate(scored)) if scored else np.array([], dtype=int)
    why = tuple((source, "; ".join(texts)) for source, texts in sorted(unscored.items()))
    name = f"{simulator.name}, leave-one-model-out"
    return _scores(name, "simulator", "leave_one_model_out", arrays, rows=rows, unscored=why)


@dataclass(frozen=True, slots=True)
class _Scenario:
    """The measured, priced rows of one scenario and the uncalibrated view of them."""

    rows: np.ndarray  # table positions
    predicted_s: np.ndarray
    memory_gib: np.ndarray
    fits: np.ndarray  # with the margin
    margin: float


def _scenarios(
    table: pd.DataFrame,
    runs: Sequence[Run | None],
    zero: ZeroShot,
    margins: dict[tuple[str, str], float],
) -> list[_Scenario]:
    """Scenarios whose regret is defined: two measured layouts, one of which ran."""
    found = []
    capacity = np.array([r.specs[1].device.memory_gib if r else np.nan for r in runs])
    for (source, _), positions in table.groupby(
        ["source", "scenario"], sort=False
    ).indices.items():
        rows = np.array([i for i in positions if runs[i] is not None], dtype=int)
        ran = [i for i in rows if runs[i] is not None and runs[i].ran]  # type: ignore[union-attr]
        if len(rows) < 2 or not ran:
            continue
        framework = runs[rows[0]].specs[2].framework.name  # type: ignore[union-attr]
        margin = margins[str(source), framework]
        fits = zero.memory_gib[rows] * (1 + margin) <= capacity[rows]
        found.append(_Scenario(rows, zero.predicted_s[rows], zero.memory_gib[rows], fits, margin))
    return found


def _calibrated_pick(
    simulator: Simulator,
    scenario: _Scenario,
    runs: Sequence[Run | None],
    probes: Sequence[int],
    settings: ProtocolSettings,
    arrays: dict[str, np.ndarray],
) -> None:
    """Calibrate on the probes (local positions), re-predict the rest, write the scores."""
    scenario_runs = [run for run in (runs[i] for i in scenario.rows) if run is not None]
    result = fit(simulator, [scenario_runs[j] for j in probes], settings.fit)
    margin = result.calibration.memory_margin
    calibrated = CalibratedSimulator(
        simulator, result.calibration, scenario.margin if margin is None else margin
    )
    predictions = [calibrated.simulate(*run.specs) for run in scenario_runs]
    predicted = [p.step_time_s for p in predictions]
    level = job_level(predicted, probes, [scenario_runs[j].step_time_s for j in probes])
    lead = math.exp(settings.fit.time_noise)
    for j, (i, run, p) in enumerate(zip(scenario.rows, scenario_runs, predictions, strict=True)):
        if j in probes:  # known: ranked by its measurement, left out of the errors
            arrays["fits"][i] = run.ran
            arrays["score"][i] = run.step_time_s if run.ran else math.nan
            continue
        arrays["predicted_s"][i] = p.step_time_s * level
        arrays["memory_gib"][i] = p.memory_gib
        arrays["allocated_gib"][i] = p.peak_gib("allocated")
        arrays["fits"][i] = p.fits
        arrays["score"][i] = p.step_time_s * level * lead


def _top_probes(
    scenario: _Scenario, runs: Sequence[Run | None], probes: Sequence[int], arrays: dict
) -> None:
    """Keep the best measured of the K best predicted; the rest rank after them."""
    for j, i in enumerate(scenario.rows):
        run = runs[i]
        assert run is not None
        if j in probes:
            arrays["fits"][i] = run.ran
            arrays["score"][i] = run.step_time_s if run.ran else math.nan
        else:
            arrays["fits"][i] = scenario.fits[j]
            arrays["score"][i] = _AFTER_PROBES + scenario.predicted_s[j]


def probe_scores(
    simulator: Simulator,
    table: pd.DataFrame,
    runs: Sequence[Run | None],
    zero: ZeroShot,
    settings: ProtocolSettings,
) -> list[ProtocolScores]:
    """The probe protocol and its top-K baseline, for every K of ``settings.probes`` (the
    benchmark adds the random-probes baseline, exactly)."""
    margins = _margins_elsewhere(table, runs, zero)
    scenarios = _scenarios(table, runs, zero, margins)
    ks = sorted(set(settings.probes))
    families = {(family, k): _empty(len(table)) for family in (PROBE, TOP_PROBES) for k in ks}
    for scenario in scenarios:
        specs = [runs[i].specs for i in scenario.rows]  # type: ignore[union-attr]
        order = sorted(
            range(len(scenario.rows)),
            key=lambda j: order_key(
                bool(scenario.fits[j]),
                float(scenario.predicted_s[j]),
                float(scenario.memory_gib[j]),
            ),
        )
        for k in ks:
            everything = list(range(len(scenario.rows)))
            probe = everything
            if k < len(scenario.rows):
                probe = choose_probes(
                    simulator,
                    specs,
                    list(scenario.predicted_s),
                    list(scenario.fits),
                    k,
                    settings.fit,
                    settings.probe_pool,
                )
            _calibrated_pick(simulator, scenario, runs, probe, settings, families[PROBE, k])
            _top_probes(scenario, runs, order[:k], families[TOP_PROBES, k])
    covered = (
        np.sort(np.concatenate([s.rows for s in scenarios])) if scenarios else np.array([], int)
    )
    scores = []
    for (family, k), arrays in families.items():
        if family == PROBE:
            name, kind = f"{simulator.name}, probe K={k}", "simulator"
        else:
            name, kind = f"{simulator.name}, top-{k} probes", "baseline"
        scores.append(_scores(name, kind, family, arrays, k, covered))
    return scores
