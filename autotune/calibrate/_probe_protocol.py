"""The probe protocol the benchmark scores, and its top-K baseline.

``probe`` (K = 1..5): per scenario, the probe loop (:mod:`autotune.calibrate._probe`) runs on
the scenario's measured layouts as a user would run it with ``probes=1``, one probe at a time:
it chooses the next probe from what it knows, sees that probe's measured time or that it ran
out of memory (and its measured peak: what it says of memory moves every layout's chance to
fit and the margin, :mod:`autotune.calibrate._memory`), and chooses again, up to K probes, or
fewer when it stops. It knows the simulator's zero-shot predictions of the scenario, the
priors estimated on every *other* shipped source's rows
(:func:`autotune.calibrate._priors.shipped_priors`), the memory margin of the other sources'
runs, and the probes: no other row of the scenario, nor any row of its source. After K
probes it picks (:func:`autotune.calibrate._probe.pick`).
Scored like any ranking: a probe ranks by its measured time, an unmeasured layout by its
expected step time, so regret@1 is the pick's; a probe's own prediction is left out of the
errors (MAPE and memory MAPE are on the other rows only).

``top-K probes`` (baseline): measure the K best predicted, keep the best measured. The
benchmark adds ``random probes`` itself (the exact expected regret of the best of K layouts
drawn at random: :mod:`autotune.benchmark._score`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from autotune import dataset
from autotune.calibrate._fit import Run
from autotune.calibrate._fits import empty_arrays
from autotune.calibrate._fits import peak_key
from autotune.calibrate._memory import Observation
from autotune.calibrate._memory import memory_belief
from autotune.calibrate._memory import observe
from autotune.calibrate._priors import Priors
from autotune.calibrate._priors import given_widths
from autotune.calibrate._priors import shipped_priors
from autotune.calibrate._probe import Candidates
from autotune.calibrate._probe import Outlook
from autotune.calibrate._probe import Probed
from autotune.calibrate._probe import next_probes
from autotune.calibrate._probe import outlook
from autotune.calibrate._protocols import ProtocolScores
from autotune.calibrate._protocols import ProtocolSettings
from autotune.calibrate._protocols import ZeroShot
from autotune.calibrate._protocols import margins_elsewhere
from autotune.calibrate._protocols import scores_of
from autotune.calibrate._residuals import layout_features
from autotune.calibrate._shares import SHARE_FACTORS
from autotune.calibrate._shares import step_shares
from autotune.order import order_key
from autotune.progress import Progress
from autotune.simulators import Simulator
from autotune.simulators.prediction import MEMORY_READINGS

__all__ = ["probe_scores"]

PROBE = "probe"
TOP_PROBES = "top-K probes"
_AFTER_PROBES = 1e30  # top-K probes: the unmeasured rank after every probe that ran


@dataclass(frozen=True, slots=True)
class _Scenario:
    """The measured, priced rows of one scenario and the uncalibrated view of them."""

    rows: np.ndarray  # table positions
    source: str
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
    capacity = np.array([r.specs[0].cluster.device.memory_gib if r else np.nan for r in runs])
    for (source, _), positions in table.groupby(
        ["source", "scenario"], sort=False
    ).indices.items():
        rows = np.array([i for i in positions if runs[i] is not None], dtype=int)
        ran = [i for i in rows if runs[i] is not None and runs[i].ran]  # type: ignore[union-attr]
        if len(rows) < 2 or not ran:
            continue
        framework = runs[rows[0]].specs[0].train.framework.name  # type: ignore[union-attr]
        margin = margins[str(source), framework]
        fits = zero.memory_gib[rows] * (1 + margin) <= capacity[rows]
        found.append(
            _Scenario(
                rows, str(source), zero.predicted_s[rows], zero.memory_gib[rows], fits, margin
            )
        )
    return found


@dataclass(frozen=True, slots=True)
class _Step:
    """The loop's state after some probes: what it knows of every layout."""

    view: Outlook
    candidates: Candidates
    probed: Probed


def _probe_steps(
    scenario: _Scenario,
    runs: Sequence[Run | None],
    as_measured_gib: np.ndarray,
    shares: np.ndarray,
    priors: Priors,
    settings: ProtocolSettings,
) -> dict[int, _Step]:
    """The loop on one scenario, one probe at a time: its state after each K asked. It reads
    the measurement of a row only once it has chosen that row as a probe.

    Args:
        scenario: the scenario's rows and their zero-shot predictions.
        runs: every row of the table as a run.
        as_measured_gib: every row's predicted peak as its measured peak counts it.
        shares: the step shares of each of the scenario's rows (:func:`step_shares`).
        priors: the step-time and memory priors (estimated without the scenario's source).
        settings: the stop rule and the K asked.
    """
    scenario_runs = [run for run in (runs[i] for i in scenario.rows) if run is not None]
    device = np.array([run.specs[0].cluster.device.memory_gib for run in scenario_runs])
    candidates = Candidates(
        log_predicted=np.log(scenario.predicted_s),
        features=layout_features([run.specs[1] for run in scenario_runs], shares),
        memory_gib=scenario.memory_gib,
        device_gib=device,
        memory=memory_belief(scenario.margin, priors.memory_common),
    )
    seen: list[Observation] = []
    probed = Probed()
    steps: dict[int, _Step] = {}
    for k in range(1, max(settings.probes) + 1):
        chosen = next_probes(priors.time, candidates, probed, 1, settings.probe).chosen
        if not chosen:  # the loop stopped: every larger K ends where it is (K may be huge)
            last = _Step(outlook(priors.time, candidates, probed), candidates, probed)
            return steps | {later: last for later in settings.probes if later >= k}
        j = chosen[0]
        run = scenario_runs[j]
        probed = (
            Probed({**probed.ran, j: run.step_time_s}, probed.failed)
            if run.ran
            else Probed(probed.ran, probed.failed | {j})
        )
        as_measured = as_measured_gib[scenario.rows[j]]
        seen.append(observe(run, scenario.memory_gib[j], as_measured, device[j]))
        memory = memory_belief(scenario.margin, priors.memory_common, seen)
        candidates = dataclasses.replace(candidates, memory=memory)
        if k in settings.probes:
            steps[k] = _Step(outlook(priors.time, candidates, probed), candidates, probed)
    return steps


def _write_step(
    step: _Step, scenario: _Scenario, zero: ZeroShot, arrays: dict[str, np.ndarray]
) -> None:
    """The scores of one scenario after the probes of ``step``: the predicted memory is the
    zero-shot one times the memory factor the probes imply."""
    fits = step.view.fits
    factor = step.candidates.memory.factor
    peaks = zero.peaks_gib or {}
    for j, i in enumerate(scenario.rows):
        arrays["probes_used"][i] = len(step.probed.tried)
        if j in step.probed.ran:  # known: ranked by its measurement, left out of the errors
            arrays["fits"][i] = True
            arrays["score"][i] = step.probed.ran[j]
        elif j in step.probed.failed:
            arrays["fits"][i] = False
        else:
            arrays["predicted_s"][i] = arrays["score"][i] = step.view.expected_s[j]
            arrays["memory_gib"][i] = step.candidates.memory_gib[j] * factor
            for key in MEMORY_READINGS:
                arrays[peak_key(key)][i] = peaks.get(key, zero.memory_gib)[i] * factor
            arrays["fits"][i] = fits[j]


def _top_probes(
    scenario: _Scenario, runs: Sequence[Run | None], probes: Sequence[int], arrays: dict
) -> None:
    """Keep the best measured of the K best predicted; the rest rank after them."""
    for j, i in enumerate(scenario.rows):
        run = runs[i]
        assert run is not None
        arrays["probes_used"][i] = len(probes)
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
    """The probe protocol and its top-K baseline, for every K of ``settings.probes``."""
    margins = margins_elsewhere(simulator, table, runs, zero)
    scenarios = _scenarios(table, runs, zero, margins)
    as_measured = zero.peak_gib(dataset.peak_readings(table))
    given = given_widths(settings.fit.prior)
    priors = {
        source: shipped_priors(simulator, given, leave_out=source)
        for source in sorted({s.source for s in scenarios})
    }
    priced = [i for s in scenarios for i in s.rows]
    shares = np.zeros((len(table), len(SHARE_FACTORS)))
    specs = [runs[i].specs for i in priced]  # type: ignore[union-attr]
    shares[priced] = step_shares(simulator, specs, zero.predicted_s[priced])
    ks = sorted(set(settings.probes))
    families = {
        (family, k): empty_arrays(len(table)) for family in (PROBE, TOP_PROBES) for k in ks
    }
    for arrays in families.values():
        arrays["probes_used"] = np.full(len(table), np.nan)
    progress = Progress(f"{simulator.name}, probes", len(scenarios), unit="scenarios")
    for done, scenario in enumerate(scenarios, start=1):
        steps = _probe_steps(
            scenario, runs, as_measured, shares[scenario.rows], priors[scenario.source], settings
        )
        order = sorted(
            range(len(scenario.rows)),
            key=lambda j: order_key(
                bool(scenario.fits[j]),
                float(scenario.predicted_s[j]),
                float(scenario.memory_gib[j]),
            ),
        )
        for k in ks:
            _write_step(steps[k], scenario, zero, families[PROBE, k])
            _top_probes(scenario, runs, order[:k], families[TOP_PROBES, k])
        progress.update(done)
    covered = (
        np.sort(np.concatenate([s.rows for s in scenarios])) if scenarios else np.array([], int)
    )
    scores = []
    for (family, k), arrays in families.items():
        if family == PROBE:
            name, kind = f"{simulator.name}, probe K={k}", "simulator"
        else:
            name, kind = f"{simulator.name}, top-{k} probes", "baseline"
        scores.append(scores_of(name, kind, family, arrays, k, covered))
    return scores
