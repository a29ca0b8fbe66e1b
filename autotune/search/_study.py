"""The Optuna study: its samplers, a simulator as the objective, resume and sharing.

A study is bound to one job and one sampler (both written into it): reusing it for another is
refused. ``n_trials`` counts the study's complete trials, so a resumed or shared study runs up
to that many in all. A trial left RUNNING by a process that died is failed (only that trial is
lost); a process stopped by SIGINT or SIGTERM finishes the trial in flight and stops.

What optuna-dashboard and ``trials_dataframe()`` read: the objectives' names, each trial's layout
(user attributes ``layout``, ``memory_gib``, ``fits``; with the samplers of :data:`SNAPPED` its
parameters too) and the study's best feasible trial (``best_feasible_trial``).

No trial is ever queued (``enqueue_trial``): on SQLite two processes can pop the same WAITING
trial, and the second then fails with "Cannot tell a COMPLETE trial". The polish prices its
layouts itself and adds them as complete trials.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import warnings
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from autotune._process import dead_here
from autotune._process import this_process
from autotune.search._best import BestFeasibleRecord
from autotune.search._price import Evaluator
from autotune.search._snap import SnappingSampler
from autotune.search._snap import snapping
from autotune.search._space import FIELDS
from autotune.search._space import SearchSpace
from autotune.search._storage import open_storage
from autotune.simulators import Layout
from autotune.simulators import Prediction
from autotune.simulators import UserError

__all__ = [
    "SAMPLERS",
    "SNAPPED",
    "StopFlag",
    "StudyResult",
    "add_priced_trials",
    "evaluated_trials",
    "name_metrics",
    "open_study",
    "optimize",
    "sample",
]

log = logging.getLogger("autotune")

# Sampler name -> factory(seed). All are Optuna's own; TPE, GP and NSGA-II read the
# constraints set in the objective (Optuna 5 `trial.set_constraint`).
SAMPLERS: dict[str, Callable[[int], optuna.samplers.BaseSampler]] = {
    # 64 expected-improvement candidates instead of 24: 20 of 20 seeds within 2% of the
    # exhaustive optimum on llama70b/ascend's 2,268 layouts, against 17 of 20, when chosen;
    # today's figures: benchmarks/results/autotune.md (README, "Measured figures").
    "tpe": lambda seed: optuna.samplers.TPESampler(
        seed=seed, multivariate=True, n_ei_candidates=64
    ),
    "gp": lambda seed: optuna.samplers.GPSampler(seed=seed),
    "random": lambda seed: optuna.samplers.RandomSampler(seed=seed),
    "nsga2": lambda seed: optuna.samplers.NSGAIISampler(seed=seed),
}
MULTI_OBJECTIVE = ("nsga2",)  # step time and memory
# The objectives' names (study.set_metric_names): optuna-dashboard's axes, trials_dataframe()
METRICS = ("step_time_s",)
MULTI_METRICS = ("step_time_s", "memory_gib")
POLISHED = ("tpe", "gp", "random")  # samplers whose last trials polish the incumbent
# Samplers whose proposals move to the nearest valid layout before Optuna stores them, so that
# a trial's parameters are the layout priced (autotune/search/_snap.py). GP and NSGA-II keep
# their proposals: learning from the moved ones cost them (docs/architecture.md, "Search").
SNAPPED = ("tpe", "random")
POLISH_INCUMBENTS = 3  # the polish looks around this many of the best layouts
# Layouts the polish adds at once: processes sharing a study overshoot n_trials by at most this
POLISH_ROUND = 4
_PROCESS_KEY = "autotune.process:"  # a study attribute per process that opened it


@dataclass(frozen=True, slots=True)
class StudyResult:
    """A finished study: its complete trials as (trial number, layout, prediction)."""

    study: optuna.Study
    evaluated: tuple[tuple[int, Layout, Prediction], ...]
    stopped: bool  # by a signal, before n_trials were complete


class StopFlag:
    """Set by a signal handler; the study stops after the trial in flight."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal = 0

    def set(self, signal: int) -> None:
        self.signal = signal
        self._event.set()

    def __bool__(self) -> bool:
        return self._event.is_set()


def open_study(
    storage: BaseStorage | str | None,
    study_name: str,
    sampler: str,
    seed: int,
    fingerprint: Mapping[str, Any],
) -> optuna.Study:
    """Create or resume the study ``study_name``; refuse one made for another job or sampler.

    Trials left RUNNING by dead processes of this host are failed (on other hosts the heartbeat
    does it after its grace period).
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # progress is ours
    if isinstance(storage, str):
        storage = open_storage(storage)
    multi = sampler in MULTI_OBJECTIVE
    try:
        study = optuna.create_study(
            study_name=study_name,
            storage=storage,
            load_if_exists=storage is not None,
            # a grid study only stores layouts priced outside Optuna: its sampler never runs
            sampler=SAMPLERS.get(sampler, optuna.samplers.RandomSampler)(seed),
            directions=["minimize", "minimize"] if multi else ["minimize"],
        )
    except ValueError as exc:  # directions of an existing study differ
        raise UserError(f"study {study_name!r} cannot be resumed: {exc}") from None
    _bind(study, {**fingerprint, "sampler": sampler})
    name_metrics(study)
    if storage is not None:
        _fail_dead(study)
        study.set_user_attr(f"{_PROCESS_KEY}{this_process()}", True)  # before its first trial
    return study


def name_metrics(study: optuna.Study) -> None:
    """Name the objectives (:data:`METRICS`, or :data:`MULTI_METRICS` for time and memory),
    unless the study already holds those names (a resumed or shared study)."""
    names = list(MULTI_METRICS if len(study.directions) > 1 else METRICS)
    if study.metric_names != names:
        with warnings.catch_warnings():  # set_metric_names is experimental in Optuna 5: known
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(names)


def _bind(study: optuna.Study, fingerprint: Mapping[str, Any]) -> None:
    expected = json.dumps(fingerprint, sort_keys=True, default=str)
    held = study.user_attrs.get("autotune.job")
    if held is None:
        study.set_user_attr("autotune.job", expected)
    elif held != expected:
        raise UserError(
            f"study {study.study_name!r} in this storage was made for another job or sampler "
            f"({_differences(json.loads(held), json.loads(expected))}); resume it with the same "
            "settings, or choose another search.study_name"
        )


_SHOWN_DIFFERENCES = 4  # settings named where a study and a search differ, before "and N more"


def _differences(held: Any, wanted: Any, key: str = "") -> str:
    """Where the study's settings and the search's differ, the first few: ``model.name:
    'Llama-2-7B' in the study, 'Qwen2.5-7B' here``."""
    found = _differing(held, wanted, key)
    more = len(found) - _SHOWN_DIFFERENCES
    shown = "; ".join(
        f"{where}: {was!r} in the study, {now!r} here"
        for where, was, now in found[:_SHOWN_DIFFERENCES]
    )
    return shown + (f" and {more} more" if more > 0 else "")


def _differing(held: Any, wanted: Any, key: str) -> list[tuple[str, Any, Any]]:
    if isinstance(held, dict) and isinstance(wanted, dict):
        return [
            found
            for name in sorted(set(held) | set(wanted))
            for found in _differing(
                held.get(name), wanted.get(name), f"{key}.{name}" if key else name
            )
        ]
    return [] if held == wanted else [(key or "the settings", held, wanted)]


def _fail_dead(study: optuna.Study) -> None:
    """Fail the trials left RUNNING by dead processes of this host (other hosts' trials are
    failed by the heartbeat after its grace period).

    A trial names its process from the objective's first line on; one killed before that
    (while Optuna created the trial, before its first heartbeat, which Optuna's stale-trial
    check then never sees) names none, and is failed once every process that ever opened the
    study is a dead one of this host.
    """
    writers = [
        key.removeprefix(_PROCESS_KEY) for key in study.user_attrs if key.startswith(_PROCESS_KEY)
    ]
    all_dead = all(dead_here(writer) for writer in writers)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        writer = trial.user_attrs.get("autotune.worker")
        if not (dead_here(str(writer)) if writer is not None else all_dead):
            continue
        with contextlib.suppress(RuntimeError):  # another process failed it first
            study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)  # noqa: SLF001
            log.info(f"  trial {trial.number} of a stopped search is failed")


def _objective(
    space: SearchSpace, evaluate: Evaluator, snapper: SnappingSampler | None, multi: bool
) -> Callable[[optuna.Trial], float | tuple[float, float]]:
    """The objective; with ``snapper`` (the study's sampler) the values suggested are a valid
    layout already, and a proposal it moved is kept as the user attribute ``sampler_proposal``."""

    def objective(trial: optuna.Trial) -> float | tuple[float, float]:
        trial.set_user_attr("autotune.worker", this_process())
        values = {name: trial.suggest_categorical(name, space.choices[name]) for name in FIELDS}
        layout = space.nearest(values)
        prediction = evaluate(layout)
        proposal = snapper.proposal(trial.number) if snapper is not None else None
        if proposal is not None:
            trial.set_user_attr("sampler_proposal", proposal)
        trial.set_user_attr("layout", layout.describe())
        trial.set_user_attr("memory_gib", prediction.memory_gib)
        trial.set_user_attr("fits", prediction.fits)  # optuna-dashboard shows no constraint
        # Feasible when <= 0: layouts that do not fit in memory are infeasible, not zero.
        trial.set_constraint("memory_gib", prediction.memory_gib - prediction.memory_capacity_gib)
        if multi:
            return prediction.step_time_s, prediction.memory_gib
        return prediction.step_time_s

    return objective


def _complete(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def optimize(
    study: optuna.Study,
    space: SearchSpace,
    evaluate: Evaluator,
    *,
    n_trials: int,
    polish_fraction: float,
    stop: StopFlag,
    progress: Callable[[int, optuna.Study], None] | None = None,
) -> StudyResult:
    """:func:`sample` the study, then its complete trials with their predictions."""
    sample(
        study,
        space,
        evaluate,
        n_trials=n_trials,
        polish_fraction=polish_fraction,
        stop=stop,
        progress=progress,
    )
    return StudyResult(study, evaluated_trials(study, space, evaluate), stopped=bool(stop))


def sample(
    study: optuna.Study,
    space: SearchSpace,
    evaluate: Evaluator,
    *,
    n_trials: int,
    polish_fraction: float,
    stop: StopFlag,
    progress: Callable[[int, optuna.Study], None] | None = None,
) -> None:
    """Run the study until it holds ``n_trials`` complete trials (or ``stop`` is set).

    With ``polish_fraction`` > 0 (single-objective samplers), that share of the trials goes
    last to the unseen neighbours of the best layouts (one dimension changed), round after
    round: a coordinate-descent finish for the last few percent that sampling often misses.
    """
    sampler = json.loads(study.user_attrs["autotune.job"])["sampler"]
    snapper = snapping(study, space) if sampler in SNAPPED else None
    objective = _objective(space, evaluate, snapper, sampler in MULTI_OBJECTIVE)
    polish = int(n_trials * polish_fraction) if sampler in POLISHED else 0
    best = BestFeasibleRecord()

    def sample_until(target: int) -> None:
        def callback(st: optuna.Study, trial: FrozenTrial) -> None:
            complete = _complete(st)
            best.update(st, complete)
            if progress is not None:
                progress(len(complete), st)
            if stop or len(complete) >= target:
                st.stop()

        missing = target - len(_complete(study))
        if not stop and missing > 0:
            study.optimize(objective, callbacks=[callback], n_trials=missing)

    sample_until(n_trials - polish)
    while polish and not stop and (missing := n_trials - len(_complete(study))) > 0:
        if not _polish_round(study, space, evaluate, missing):
            break  # no unseen neighbour left: sampling spends the rest
        if progress is not None:
            progress(len(_complete(study)), study)
    sample_until(n_trials)
    best.update(study, _complete(study))  # with the polish's and other processes' last trials


def evaluated_trials(
    study: optuna.Study, space: SearchSpace, evaluate: Evaluator
) -> tuple[tuple[int, Layout, Prediction], ...]:
    """The study's complete trials as (trial number, layout, prediction), whichever process
    ran them (a layout another process priced is priced again here, once)."""
    return tuple(
        (trial.number, layout, evaluate(layout))
        for trial in _complete(study)
        for layout in (space.nearest(trial.params),)
    )


def _polish_round(
    study: optuna.Study, space: SearchSpace, evaluate: Evaluator, budget: int
) -> int:
    """Price the unseen neighbours of the best layouts (at most ``budget``) and add them to
    the study as complete trials; the number added."""
    seen = {space.nearest(t.params) for t in _complete(study)}
    fitting = sorted(
        (lay for lay in seen if evaluate(lay).fits), key=lambda lay: evaluate(lay).step_time_s
    )
    fresh = list(
        dict.fromkeys(
            near
            for incumbent in fitting[:POLISH_INCUMBENTS]
            for near in space.neighbours(incumbent)
            if near not in seen
        )
    )[: min(budget, POLISH_ROUND)]
    priced = list(zip(fresh, evaluate.price(fresh), strict=True))
    add_priced_trials(study, space, priced, origin="polish")
    return len(fresh)


def add_priced_trials(
    study: optuna.Study,
    space: SearchSpace,
    priced: list[tuple[Layout, Prediction]],
    origin: str,
) -> None:
    """Write layouts priced outside Optuna's loop (the exhaustive grid, the polish) into the
    study as complete trials, so Optuna's plots and optuna-dashboard show them."""
    from optuna.distributions import BaseDistribution
    from optuna.distributions import CategoricalDistribution

    distributions: dict[str, BaseDistribution] = {
        name: CategoricalDistribution(space.choices[name]) for name in FIELDS
    }
    multi = len(study.directions) > 1
    trials = [
        optuna.trial.create_trial(
            params=space.values_of(layout),
            distributions=distributions,
            values=[pred.step_time_s, pred.memory_gib] if multi else [pred.step_time_s],
            constraints={"memory_gib": pred.memory_gib - pred.memory_capacity_gib},
            user_attrs={
                "layout": layout.describe(),
                "memory_gib": pred.memory_gib,
                "fits": pred.fits,
                "autotune.worker": this_process(),
                "autotune.origin": origin,
            },
        )
        for layout, pred in priced
    ]
    study.add_trials(trials)
    BestFeasibleRecord().update(study, _complete(study))
