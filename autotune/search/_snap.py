"""A sampler that proposes valid layouts only, so a trial's parameters are the layout it priced.

Optuna's samplers propose one value per dimension, and most combinations break a rule (tp * pp
* cp must divide the world, ...). :class:`SnappingSampler` asks its inner sampler for the whole
proposal at once, moves it to the nearest valid layout (:meth:`SearchSpace.nearest`) and gives
Optuna that layout's values: Optuna stores them as the trial's parameters, which optuna-dashboard,
``trials_dataframe()`` and the plots show, and the inner sampler learns from the layouts that were
really priced. A parameter cannot be changed once stored (the RDB storages hold one row per trial
and name), so the move happens before, in the sampler. The proposal itself is kept until the
objective records it (:meth:`SnappingSampler.proposal`). The search wraps TPE and the random
sampler only (``SNAPPED``): GP and NSGA-II search worse from the moved layouts
(docs/architecture.md, "Search").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from autotune.search._space import FIELDS
from autotune.search._space import SearchSpace

__all__ = ["SnappingSampler", "snapping"]


class SnappingSampler(optuna.samplers.BaseSampler):
    """``inner``'s proposals, each moved to the nearest valid layout of ``space``.

    Every searched field is sampled relatively (one proposal per trial): what ``inner`` samples
    relatively, then each remaining field by ``inner``'s independent sampling, in the order the
    objective suggests them (so a seeded sampler draws what it drew without the move).
    """

    def __init__(self, inner: optuna.samplers.BaseSampler, space: SearchSpace) -> None:
        self._inner = inner
        self._space = space
        self._distributions = {
            name: CategoricalDistribution(space.choices[name]) for name in FIELDS
        }
        self._proposals: dict[int, dict[str, Any]] = {}  # trial number -> a moved proposal

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return {name: d for name, d in self._distributions.items() if not d.single()}

    def sample_relative(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        search_space: dict[str, BaseDistribution],
    ) -> dict[str, Any]:
        relative = self._inner.infer_relative_search_space(study, trial)
        proposal = self._inner.sample_relative(study, trial, relative)
        values = {}
        for name, distribution in self._distributions.items():
            if distribution.single():
                values[name] = distribution.choices[0]
            elif name in proposal:
                values[name] = proposal[name]
            else:
                values[name] = self._inner.sample_independent(study, trial, name, distribution)
        layout = self._space.values_of(self._space.nearest(values))
        if layout != values:
            self._proposals[trial.number] = values
        return {name: layout[name] for name in search_space}

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        """A parameter outside the layout (none is suggested today): ``inner``'s."""
        return self._inner.sample_independent(study, trial, param_name, param_distribution)

    def proposal(self, number: int) -> dict[str, Any] | None:
        """What ``inner`` proposed for trial ``number`` when it was not a valid layout (then
        forgotten); None when the proposal was valid as it stood."""
        return self._proposals.pop(number, None)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._inner.before_trial(study, trial)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._proposals.pop(trial.number, None)
        self._inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._inner.reseed_rng()


def snapping(study: optuna.Study, space: SearchSpace) -> SnappingSampler:
    """The study's sampler, wrapped in a :class:`SnappingSampler` of ``space`` the first time
    (Optuna's own ``PartialFixedSampler`` is set on a study the same way)."""
    if not isinstance(study.sampler, SnappingSampler):
        study.sampler = SnappingSampler(study.sampler, space)
    return study.sampler
