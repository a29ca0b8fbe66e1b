"""The Optuna study: a simulator as the objective over the valid layout space."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.order import order_key
from autotune.search._space import SearchSpace
from simulators import ClusterSpec
from simulators import Layout
from simulators import ModelSpec
from simulators import Prediction
from simulators import Simulator
from simulators import TrainSpec
from simulators import UserError
from simulators.layout import SEARCHED

__all__ = ["SAMPLERS", "Evaluator", "SearchResult", "exhaustive_best", "run_search"]

log = logging.getLogger("autotune")


def _grid(space: SearchSpace, seed: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.GridSampler(
        {name: list(values) for name, values in space.choices.items()}, seed=seed
    )


# Sampler name -> factory(space, seed). All are Optuna's own; TPE, GP and NSGA-II read the
# constraints set in the objective (Optuna 5 `trial.set_constraint`).
SAMPLERS: dict[str, Callable[[SearchSpace, int], optuna.samplers.BaseSampler]] = {
    # 64 expected-improvement candidates instead of 24: 20 of 20 seeds within 2% of the
    # exhaustive optimum on llama70b/ascend, against 17 of 20 (benchmarks/bench_autotune.py).
    "tpe": lambda space, seed: optuna.samplers.TPESampler(
        seed=seed, multivariate=True, n_ei_candidates=64
    ),
    "gp": lambda space, seed: optuna.samplers.GPSampler(seed=seed),
    "random": lambda space, seed: optuna.samplers.RandomSampler(seed=seed),
    "nsga2": lambda space, seed: optuna.samplers.NSGAIISampler(seed=seed),
    "grid": _grid,
}


# Samplers whose last trials polish the incumbent (not NSGA-II's front, not the full grid).
POLISHED = ("tpe", "gp", "random")
POLISH_INCUMBENTS = 3  # the polish looks around this many of the best layouts


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
        """Distinct layouts, those that fit first, then by step time (:func:`order_key`)."""
        seen: dict[Layout, Prediction] = {lay: pred for _, lay, pred in self.evaluated}
        return sorted(seen.items(), key=lambda item: _key(item[1]))


def _key(prediction: Prediction) -> tuple[bool, bool, float]:
    return order_key(prediction.fits, prediction.step_time_s)


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
    polish_fraction: float = 0.0,
    progress: Callable[[int, int, optuna.Study], None] | None = None,
) -> SearchResult:
    """Run the study; ``grid`` runs every point of its grid instead of ``n_trials``.

    With ``polish_fraction`` > 0 (single-objective samplers), that share of the trials goes
    last to the neighbours of the best layout so far, enqueued into the same study: a
    coordinate-descent finish for the last few percent that sampling alone often misses.
    """
    if sampler not in SAMPLERS:
        raise UserError(f"unknown sampler {sampler!r}; available: {', '.join(SAMPLERS)}")
    if n_trials < 1:
        raise UserError(f"search.n_trials={n_trials} must be >= 1")
    if not 0 <= polish_fraction < 1:
        raise UserError(f"search.polish={polish_fraction} must be in [0, 1)")
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
    polish = int(n_trials * polish_fraction) if sampler in POLISHED else 0
    study.optimize(objective, n_trials=n_trials - polish, callbacks=callbacks)
    left = _polish(study, space, evaluate, objective, polish, callbacks)
    if left:
        study.optimize(objective, n_trials=left, callbacks=callbacks)
    elapsed = time.perf_counter() - started
    # Every trial of the study, earlier sessions of a resumed study included.
    evaluated = tuple(
        (trial.number, layout, evaluate(layout))
        for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        for layout in (space.nearest(trial.params),)
    )
    return SearchResult(study=study, evaluated=evaluated, elapsed_s=elapsed)


def _polish(
    study: optuna.Study,
    space: SearchSpace,
    evaluate: Evaluator,
    objective: Callable[[optuna.Trial], Any],
    budget: int,
    callbacks: list[Callable[[optuna.Study, optuna.trial.FrozenTrial], None]],
) -> int:
    """Enqueue the unseen neighbours of the best layouts until none is left; return the rest."""
    complete = (optuna.trial.TrialState.COMPLETE,)
    seen = {space.nearest(t.params) for t in study.get_trials(deepcopy=False, states=complete)}
    while budget > 0:
        fitting = [
            lay for lay in sorted(seen, key=lambda lay: _key(evaluate(lay))) if evaluate(lay).fits
        ]
        fresh = list(
            dict.fromkeys(
                near
                for incumbent in fitting[:POLISH_INCUMBENTS]
                for near in space.neighbours(incumbent)
                if near not in seen
            )
        )[:budget]
        if not fresh:
            break
        for layout in fresh:
            study.enqueue_trial({name: getattr(layout, name) for name in SEARCHED})
            seen.add(layout)
        study.optimize(objective, n_trials=len(fresh), callbacks=callbacks)
        budget -= len(fresh)
    return budget


def exhaustive_best(space: SearchSpace, evaluate: Evaluator) -> tuple[Layout, Prediction] | None:
    """The fastest layout that fits, over the whole valid space (None if nothing fits)."""
    best = min(space.layouts, key=lambda lay: _key(evaluate(lay)), default=None)
    return (best, evaluate(best)) if best is not None and evaluate(best).fits else None
