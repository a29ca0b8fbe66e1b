"""The best feasible trial of a study, written where optuna-dashboard shows it.

optuna-dashboard's "Best Trial" is the storage's best value, constraints ignored: a layout
predicted not to fit in memory is often the fastest. The study user attribute
``best_feasible_trial`` (the dashboard's "Study User Attributes") holds the trial the search
itself ranks first among the study's trials: the fastest that fits, then the least memory
(:func:`autotune.order.order_key`), the earliest of equals. It is rewritten whenever it changes,
by whichever process sees the change, and once more when a search ends.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.order import order_key

__all__ = ["BEST_FEASIBLE", "BestFeasibleRecord", "best_feasible"]

BEST_FEASIBLE = "best_feasible_trial"


def _feasible(trial: FrozenTrial) -> bool:
    """Whether ``trial`` fits in memory: it has constraints and each is <= 0."""
    constraints = trial.constraints
    return bool(constraints) and all(value <= 0 for value in constraints.values())


def best_feasible(trials: Sequence[FrozenTrial]) -> FrozenTrial | None:
    """The first of ``trials`` (complete ones) in the search's order among those that fit."""
    fitting = [trial for trial in trials if _feasible(trial)]
    if not fitting:
        return None
    return min(
        fitting,
        key=lambda t: (*order_key(True, t.values[0], _memory_gib(t)), t.number),
    )


def _memory_gib(trial: FrozenTrial) -> float:
    """The predicted peak memory the objective recorded (NaN for a trial without it)."""
    return float(trial.user_attrs.get("memory_gib", math.nan))


def _summary(trial: FrozenTrial) -> dict[str, Any]:
    return {
        "number": trial.number,
        "step_time_s": trial.values[0],
        "memory_gib": trial.user_attrs.get("memory_gib"),
        "layout": trial.user_attrs.get("layout"),
    }


class BestFeasibleRecord:
    """Keeps :data:`BEST_FEASIBLE` of a study up to date, looking at each trial once: a
    search calls :meth:`update` after every trial, so a full scan each time would cost the
    square of the trials."""

    __slots__ = ("_best", "_seen")

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self._best: FrozenTrial | None = None

    def update(self, study: optuna.Study, complete: Sequence[FrozenTrial]) -> None:
        """Take in the trials of ``complete`` (the study's complete ones) not seen yet; write
        the best feasible trial when the study holds another (nothing while none fits)."""
        fresh = [trial for trial in complete if trial.number not in self._seen]
        self._seen.update(trial.number for trial in fresh)
        self._best = best_feasible([*fresh, *([self._best] if self._best else [])])
        if self._best is None:
            return
        summary = _summary(self._best)
        if study.user_attrs.get(BEST_FEASIBLE) != summary:
            study.set_user_attr(BEST_FEASIBLE, summary)
