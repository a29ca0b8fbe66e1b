"""The Optuna study: a simulator as the objective over the valid layout space."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import optuna

from autotune.space import SEARCHED
from autotune.space import SearchSpace
from simulators import ClusterSpec
from simulators import Layout
from simulators import ModelSpec
from simulators import Prediction
from simulators import Simulator
from simulators import TrainSpec
from simulators import UserError

__all__ = ["SAMPLERS", "Evaluator", "SearchResult", "exhaustive_best", "run_search"]

log = logging.getLogger("autotune")


def _grid(space: SearchSpace, seed: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.GridSampler(
        {name: list(values) for name, values in space.choices.items()}, seed=seed
    )


# Sampler name -> factory(space, seed). All are Optuna's own; TPE, GP and NSGA-II read the
# constraints set in the objective (Optuna 5 `trial.set_constraint`).
SAMPLERS: dict[str, Callable[[SearchSpace, int], optuna.samplers.BaseSampler]] = {
    "tpe": lambda space, seed: optuna.samplers.TPESampler(seed=seed, multivariate=True),
    "gp": lambda space, seed: optuna.samplers.GPSampler(seed=seed),
    "random": lambda space, seed: optuna.samplers.RandomSampler(seed=seed),
    "nsga2": lambda space, seed: optuna.samplers.NSGAIISampler(seed=seed),
    "grid": _grid,
}


class Evaluator:
    """Simulates layouts once each: TPE re-proposes seen points, the cache answers them."""

    def __init__(
        self, simulator: Simulator, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec
    ) -> None:
        self.simulator, self.model, self.cluster, self.train = simulator, model, cluster, train
        self._cache: dict[Layout, Prediction] = {}
        self.simulations = 0

    def __call__(self, layout: Layout) -> Prediction:
        prediction = self._cache.get(layout)
        if prediction is None:
            prediction = self.simulator.simulate(self.model, self.cluster, self.train, layout)
            self._cache[layout] = prediction
            self.simulations += 1
        return prediction


@dataclass(frozen=True, slots=True)
class SearchResult:
    """A finished study: its trials as (layout, prediction) in trial order, and timing."""

    study: optuna.Study
    evaluated: tuple[tuple[int, Layout, Prediction], ...]  # (trial number, layout, prediction)
    elapsed_s: float

    def ranked(self) -> list[tuple[Layout, Prediction]]:
        """Distinct layouts, those that fit first, then by step time."""
        seen: dict[Layout, Prediction] = {lay: pred for _, lay, pred in self.evaluated}
        return sorted(seen.items(), key=lambda item: (not item[1].fits, item[1].step_time_s))


def _objective(
    space: SearchSpace, evaluate: Evaluator, multi_objective: bool
) -> Callable[[optuna.Trial], float | tuple[float, float]]:
    def objective(trial: optuna.Trial) -> float | tuple[float, float]:
        values = {name: trial.suggest_categorical(name, space.choices[name]) for name in SEARCHED}
        layout = space.nearest(values)
        prediction = evaluate(layout)
        trial.set_user_attr("layout", layout.describe())
        # Feasible when <= 0: layouts that do not fit in memory are infeasible, not zero.
        trial.set_constraint("memory_gib", prediction.memory_gib - prediction.memory_capacity_gib)
        if multi_objective:
            return prediction.step_time_s, prediction.memory_gib
        return prediction.step_time_s

    return objective


def run_search(
    space: SearchSpace,
    evaluate: Evaluator,
    *,
    sampler: str,
    n_trials: int,
    seed: int,
    storage: str | None,
    study_name: str,
    progress: Callable[[int, int, optuna.Study], None] | None = None,
) -> SearchResult:
    """Run the study; ``grid`` runs every point of its grid instead of ``n_trials``."""
    if sampler not in SAMPLERS:
        raise UserError(f"unknown sampler {sampler!r}; available: {', '.join(SAMPLERS)}")
    if n_trials < 1:
        raise UserError(f"search.n_trials={n_trials} must be >= 1")
    multi = sampler == "nsga2"
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # progress is ours, every tenth
    study = optuna.create_study(
        study_name=study_name,
        storage=storage,
        load_if_exists=storage is not None,
        sampler=SAMPLERS[sampler](space, seed),
        directions=["minimize", "minimize"] if multi else ["minimize"],
    )
    if sampler == "grid":
        n_trials = 1
        for values in space.choices.values():
            n_trials *= len(values)
    objective = _objective(space, evaluate, multi)
    callbacks = [lambda st, tr: progress(tr.number + 1, n_trials, st)] if progress else []
    started = time.perf_counter()
    study.optimize(objective, n_trials=n_trials, callbacks=callbacks)
    elapsed = time.perf_counter() - started
    # Every trial of the study, earlier sessions of a resumed study included.
    evaluated = tuple(
        (trial.number, layout, evaluate(layout))
        for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        for layout in (space.nearest(trial.params),)
    )
    return SearchResult(study=study, evaluated=evaluated, elapsed_s=elapsed)


def exhaustive_best(space: SearchSpace, evaluate: Evaluator) -> tuple[Layout, Prediction] | None:
    """The fastest layout that fits, over the whole valid space (None if nothing fits)."""
    best: tuple[Layout, Prediction] | None = None
    for layout in space.layouts:
        prediction = evaluate(layout)
        if prediction.fits and (best is None or prediction.step_time_s < best[1].step_time_s):
            best = (layout, prediction)
    return best
