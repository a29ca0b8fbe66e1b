"""A search stopped by a signal or killed outright loses at most the trial in flight.

SIGINT and SIGTERM: the best layout so far is printed, the MLflow run ends KILLED, the command
exits 130 or 143 without a traceback. ``kill -9`` at random moments, then the same command:
the study ends with exactly ``n_trials`` complete trials, nothing RUNNING in the study or in
MLflow. ``AUTOTUNE_TEST_KILLS=20 python -m pytest -k kill_9 tests/autotune_tests`` kills 20
times (CI: 4).
"""

from __future__ import annotations

import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import optuna
import pytest

SEARCH = (
    "model=llama2_7b",
    "cluster=ascend",
    "cluster.num_nodes=1",
    "search.sampler=tpe",
    "search.grid_budget_s=0.001",  # no exhaustive pricing beside the sampler
    "search.study_name=faults",
)
REPO = Path(__file__).resolve().parents[2]


def _command(folder: Path, n_trials: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "autotune",
        *SEARCH,
        f"search.n_trials={n_trials}",
        f"search.storage=sqlite:///{folder / 'study.db'}",
        f"tracking.uri=sqlite:///{folder / 'mlflow.db'}",
    ]


def _start(folder: Path, n_trials: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        _command(folder, n_trials),
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _complete_trials(folder: Path) -> int:
    """Complete trials so far, read without writing: Optuna's ``load_study`` would create the
    schema itself and race the search that is creating it."""
    database = folder / "study.db"
    if not database.exists():
        return 0
    try:
        with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)) as db:
            query = "SELECT COUNT(*) FROM trials WHERE state = 'COMPLETE'"
            (count,) = db.execute(query).fetchone()
    except sqlite3.OperationalError:  # the schema is not there yet, or a writer holds the lock
        return 0
    return int(count)


def _runs(folder: Path) -> list[Any]:
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{folder / 'mlflow.db'}")
    return mlflow.search_runs(experiment_names=["autotune"], output_format="list")


@pytest.mark.slow
@pytest.mark.parametrize(("number", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_search_with_its_best_layout(
    tmp_path: Path, number: int, code: int
) -> None:
    proc = _start(tmp_path, n_trials=5000)
    try:
        deadline = time.monotonic() + 120
        while _complete_trials(tmp_path) < 5 and time.monotonic() < deadline:
            time.sleep(0.5)
        proc.send_signal(number)
        out, err = proc.communicate(timeout=120)
    finally:  # a failure here must not leave the search running into the next test
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, err
    assert "Traceback" not in err and "stopping after the trial in flight" in err
    assert "Top 5 of " in out  # the best layout so far
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert {t.state for t in study.trials} == {optuna.trial.TrialState.COMPLETE}
    runs = _runs(tmp_path)
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.status == "KILLED"  # the top layouts below it are complete runs
    assert all(r.info.status == "FINISHED" for r in runs if r is not parent)


@pytest.mark.slow
def test_kill_9_at_random_moments_then_resume_loses_at_most_the_trial_in_flight(
    tmp_path: Path,
) -> None:
    kills = int(os.environ.get("AUTOTUNE_TEST_KILLS", "4"))
    n_trials = 60  # a run that finishes before its kill records, and the next one resumes
    moments = random.Random(0)
    for _ in range(kills):
        proc = _start(tmp_path, n_trials)
        time.sleep(moments.uniform(2.0, 12.0))  # imports, study creation, trials, recording
        proc.kill()
        proc.communicate()
    proc = _start(tmp_path, n_trials)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{tmp_path / 'study.db'}")
    states = [t.state for t in study.trials]
    assert states.count(optuna.trial.TrialState.COMPLETE) == n_trials  # n_trials in all
    assert states.count(optuna.trial.TrialState.FAIL) <= kills  # the trials in flight
    assert optuna.trial.TrialState.RUNNING not in states
    progress = [(int(a), int(b)) for a, b in re.findall(r"(\d+)/(\d+) trials", err)]
    assert all(done <= total == n_trials for done, total in progress)  # none past n_trials
    assert all(run.info.status != "RUNNING" for run in _runs(tmp_path))
