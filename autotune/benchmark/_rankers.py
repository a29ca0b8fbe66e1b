"""Rankers of measured layouts: simulators, the rule-of-thumb heuristic, and peer predictions.

Each turns the rows of a measurement table into a :class:`Ranking`: a score per row (lower is
picked first), the predicted step time and memory where it has them, and whether it thinks the
layout fits in memory. The ``random`` baseline needs no ranking: it is scored exactly.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from autotune.progress import Progress
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import Simulator
from autotune.simulators.prediction import peak_arrays
from autotune.simulators.prediction import peak_as_measured
from autotune.simulators.states import state_bytes_of
from autotune.simulators.states import state_memory_bytes

__all__ = ["HeuristicRule", "Ranking", "heuristic_ranking", "peer_rankings", "simulate"]

GIB = 1024**3
_RECOMPUTE_PREFERENCE = {"selective": 0, "none": 1, "full": 2}


@dataclass(frozen=True, slots=True)
class Ranking:
    """One ranker's view of the table rows it covers (``rows``: positions in the table)."""

    name: str
    kind: str  # "simulator", "baseline" or "peer"
    rows: np.ndarray
    score: np.ndarray
    predicted_s: np.ndarray
    memory_gib: np.ndarray  # the whole device's peak (what must fit)
    fits: np.ndarray
    seconds_per_layout: float = float("nan")
    protocol: str = "zero_shot"  # how it saw the data (autotune/calibrate/_protocols.py)
    probes: int = 0  # measured layouts per scenario it was given (probe protocols)
    # the predicted peak of each reading (MEMORY_READINGS; None or NaN: memory_gib)
    peaks_gib: Mapping[str, np.ndarray] | None = None
    unscored: tuple[tuple[str, str], ...] = ()  # (source, why some of its rows are not ranked)
    probes_used: np.ndarray | None = None  # per row: the probes its scenario measured

    def peak_gib(self, readings: np.ndarray) -> np.ndarray:
        """The predicted peak of each row as its measurement counts it (``readings``: each
        row's :func:`autotune.dataset.peak_readings`)."""
        return peak_as_measured(readings, self.memory_gib, self.peaks_gib)


def simulate(
    simulator: Simulator,
    specs: Sequence[tuple[Job, Layout]],
    memory_margin: float | Mapping[str, float] = 0.0,
) -> Ranking:
    """Predict every row (each layout keeps the rules: :func:`dataset.priceable_rows`).

    A layout fits when its predicted peak memory times ``1 + margin`` is within the device
    memory, as the search decides it (docs/calibration.md 3); ``memory_margin`` is one margin
    or one per framework. A long run shows its progress on stderr
    (:class:`autotune.progress.Progress`).
    """
    n = len(specs)
    predicted, memory, peaks = np.full(n, np.nan), np.full(n, np.nan), peak_arrays(n)
    fits = np.zeros(n, dtype=bool)
    elapsed = 0.0
    progress = Progress(simulator.name, n, unit="layouts")
    for i, (job, layout) in enumerate(specs):
        progress.update(i)
        start = time.perf_counter()
        prediction = simulator.simulate(job, layout)
        elapsed += time.perf_counter() - start
        margin = (
            memory_margin
            if isinstance(memory_margin, float | int)
            else memory_margin[job.train.framework.name]
        )
        predicted[i], memory[i], fits[i] = (
            prediction.step_time_s,
            prediction.memory_gib,
            prediction.memory_gib * (1 + margin) <= prediction.memory_capacity_gib,
        )
        for key, peak in prediction.readings_gib().items():
            peaks[key][i] = peak
    return Ranking(
        name=simulator.name,
        kind="simulator",
        rows=np.arange(n),
        score=predicted,
        predicted_s=predicted,
        memory_gib=memory,
        fits=fits,
        seconds_per_layout=elapsed / n if n else float("nan"),
        peaks_gib=peaks,
    )


@dataclass(frozen=True, slots=True)
class HeuristicRule:
    """A practitioner's rule of thumb for picking a layout without a simulator.

    Layouts whose weights, gradients and optimizer states (as the framework keeps them,
    :func:`autotune.simulators.states.state_memory_bytes`) fill more than ``state_memory_fraction``
    of a device rank last (they are its "does not fit"). Then, in
    order: tensor parallelism inside a node, the least model
    parallelism tp*pp*cp (the most data parallelism), tensor before pipeline before context
    parallelism, the most expert parallelism, the smallest micro-batch, and selective before no
    before full recompute.
    """

    state_memory_fraction: float

    def fits(self, job: Job, layout: Layout) -> bool:
        """Whether the states of an average pipeline stage fill at most the allowed share."""
        model, cluster, train = job.model, job.cluster, job.train
        experts = model.num_moe_layers * model.expert_params_per_layer
        dense = (model.num_params - experts) / (layout.tp * layout.pp)
        local_experts = experts / (layout.expert_tp * layout.ep * layout.pp)
        states = state_memory_bytes(dense, local_experts, layout, state_bytes_of(train, layout))
        return sum(states.values()) <= self.state_memory_fraction * cluster.device.memory_gib * GIB

    def key(self, job: Job, layout: Layout) -> tuple[int, ...]:
        """Sort key of a layout: smaller is preferred."""
        return (
            int(not self.fits(job, layout)),
            int(layout.tp > job.cluster.devices_per_node),
            layout.tp * layout.pp * layout.cp,
            layout.pp,
            layout.cp,
            -layout.ep,
            layout.micro_batch,
            _RECOMPUTE_PREFERENCE[layout.recompute],
        )


def heuristic_ranking(rule: HeuristicRule, specs: Sequence[tuple[Job, Layout]]) -> Ranking:
    """Rank rows by the rule's key (scenarios are ranked separately, so a global rank works);
    each layout keeps the rules (its expert grid divides the world)."""
    keys = [rule.key(*spec) for spec in specs]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    score = np.empty(len(keys))
    score[order] = np.arange(len(keys), dtype=float)
    fits = np.array([rule.fits(*spec) for spec in specs], dtype=bool)
    nan = np.full(len(keys), np.nan)
    return Ranking("heuristic", "baseline", np.arange(len(keys)), score, nan, nan.copy(), fits)


def peer_rankings(table: pd.DataFrame) -> list[Ranking]:
    """Another simulator's predictions carried in the file (``predictor``), on its rows only.

    A peer states no memory prediction, so it is taken to predict that every layout fits.
    """
    rankings = []
    has = table["predictor"].notna() & table["predicted_step_time_s"].notna()
    for name in sorted(table.loc[has, "predictor"].unique()):
        rows = np.flatnonzero(has & (table["predictor"] == name))
        predicted = table["predicted_step_time_s"].to_numpy(dtype=float, na_value=np.nan)[rows]
        nan = np.full(len(rows), np.nan)
        fits = np.ones(len(rows), dtype=bool)
        rankings.append(Ranking(str(name), "peer", rows, predicted, predicted, nan, fits))
    return rankings
