"""What optuna-dashboard and ``trials_dataframe()`` read from a stored study: named objectives,
each trial's parameters as the layout the command priced, the best feasible trial."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.catalog import priced_job_from_config
from autotune.config import AutotuneConfig
from autotune.search import Evaluator
from autotune.search import StopFlag
from autotune.search import open_study
from autotune.search import optimize
from autotune.search._best import BEST_FEASIBLE
from autotune.search._best import best_feasible
from autotune.search._space import FIELDS
from autotune.search._space import SearchSpace
from autotune.search._space import build_space
from autotune.search._study import SNAPPED
from autotune.simulators import Layout

REPO = Path(__file__).resolve().parents[2]
SMALL = ("model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1", "tracking.enabled=false")
TRIALS = 30


def _space(make_cfg: Callable[..., AutotuneConfig]) -> tuple[SearchSpace, Evaluator]:
    cfg = make_cfg(*SMALL)
    priced = priced_job_from_config(cfg)
    return build_space(priced.job, cfg.search, {}), Evaluator(priced)


def _search(tmp_path: Path, storage: str, *overrides: str) -> dict[str, Any]:
    """The command's JSON object; every distinct layout it priced is in its ``top_k``."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            *SMALL,
            f"search.storage={storage}",
            "search.study_name=s",
            "launch_dir=null",
            "output=json",
            *overrides,
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    payload: dict[str, Any] = json.loads(proc.stdout)
    return payload


def _assert_recorded_as_reported(
    study: optuna.Study, payload: dict[str, Any], space: SearchSpace
) -> None:
    """Each complete trial holds the layout the command reports, with its prediction, as its
    user attributes and, but for GP and NSGA-II, as its parameters; the best feasible trial is
    the command's best (the command ranks only the study's trials)."""
    reported = {
        Layout.from_dict(entry["layout"]): entry["prediction"] for entry in payload["top_k"]
    }
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert {space.nearest(trial.params) for trial in trials} == set(reported)
    for trial in trials:
        layout = space.nearest(trial.params)
        if payload["mode"] in (*SNAPPED, "grid"):
            assert trial.params == space.values_of(layout)  # a valid layout's values, unmoved
        prediction = reported[layout]
        assert trial.user_attrs["layout"] == layout.describe()
        assert trial.values[0] == prediction["step_time_s"]
        assert trial.user_attrs["memory_gib"] == prediction["memory_gib"]
        assert (trial.constraints["memory_gib"] <= 0) == trial.user_attrs["fits"]
        assert trial.user_attrs["fits"] == prediction["fits"]
    best = study.user_attrs[BEST_FEASIBLE]
    trial = study.trials[best["number"]]
    assert trial.constraints["memory_gib"] <= 0 and payload["prediction"]["fits"]
    assert Layout.from_dict(payload["best"]) == space.nearest(trial.params)
    assert best == {
        "number": trial.number,
        "step_time_s": payload["prediction"]["step_time_s"],
        "memory_gib": payload["prediction"]["memory_gib"],
        "layout": trial.user_attrs["layout"],
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "metrics"),
    [
        # a budget too small to price every layout beside the sampler: the answer is a trial's
        (("search.sampler=tpe", "search.grid_budget_s=1e-9"), ["step_time_s"]),
        (("search.sampler=nsga2", "search.grid_budget_s=1e-9"), ["step_time_s", "memory_gib"]),
        ((), ["step_time_s"]),  # auto, here grid: the study holds its best TRIALS layouts
    ],
)
def test_a_stored_study_shows_what_the_command_priced(
    make_cfg: Callable[..., AutotuneConfig],
    tmp_path: Path,
    overrides: tuple[str, ...],
    metrics: list[str],
) -> None:
    space, _ = _space(make_cfg)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    for n_trials in (TRIALS, TRIALS + 5):  # then resumed: the names are kept, nothing refused
        more = (f"search.n_trials={n_trials}", f"search.top_k={n_trials}")
        payload = _search(tmp_path, storage, *overrides, *more)
        study = optuna.load_study(study_name="s", storage=storage)
        assert study.metric_names == metrics
        complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
        assert len(complete) == (TRIALS if payload["mode"] == "grid" else n_trials)
        _assert_recorded_as_reported(study, payload, space)
        if payload["mode"] == "grid":
            break  # a resumed grid study keeps its trials
    frame = study.trials_dataframe()
    assert {f"params_{name}" for name in FIELDS} <= set(frame.columns)
    named = "values" if len(metrics) > 1 else "value"
    assert {f"{named}_{metric}" for metric in metrics} <= set(frame.columns)


def test_the_sampler_proposes_what_it_proposed_before_only_valid_layouts_are_stored(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    """A seeded sampler draws the same proposals with the move to the nearest valid layout as
    without it; the study stores the layouts, each moved proposal beside its trial."""
    space, evaluate = _space(make_cfg)
    raw = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=4))
    raw.optimize(
        lambda t: sum(len(str(t.suggest_categorical(n, space.choices[n]))) for n in FIELDS),
        n_trials=40,
    )
    study = open_study(None, "t", "random", 4, {"job": "test"})
    optimize(study, space, evaluate, n_trials=40, polish_fraction=0.0, stop=StopFlag())
    moved = 0
    for before, trial in zip(raw.trials, study.trials, strict=True):
        proposal = trial.user_attrs.get("sampler_proposal", trial.params)
        moved += "sampler_proposal" in trial.user_attrs
        assert proposal == before.params
        assert trial.params == space.values_of(space.nearest(before.params))
    assert 0 < moved < 40


def test_the_best_feasible_trial_is_the_searchs_best_and_never_out_of_memory(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    """Llama-2-13B on one node: 184 of its 918 layouts run out of memory faster than the best
    that fits, and the storage's best value (optuna-dashboard's "Best Trial") is one of them."""
    cfg = make_cfg("model=llama2_13b", "cluster=ascend", "cluster.num_nodes=1")
    priced = priced_job_from_config(cfg)
    space = build_space(priced.job, cfg.search, {})
    study = open_study(None, "t", "tpe", 0, {"job": "test"})
    result = optimize(
        study, space, Evaluator(priced), n_trials=40, polish_fraction=0.1, stop=StopFlag()
    )
    fitting = [(p.step_time_s, p.memory_gib, n) for n, _, p in result.evaluated if p.fits]
    fastest = min(fitting)
    assert study.user_attrs[BEST_FEASIBLE]["number"] == fastest[2]
    assert best_feasible(study.trials) == study.trials[fastest[2]]
    dashboard_best = min(study.trials, key=lambda t: t.values[0])  # constraints ignored
    assert dashboard_best.constraints["memory_gib"] > 0
