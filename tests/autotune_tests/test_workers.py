"""Several processes on one study: local workers and separate commands lose and repeat nothing.

The PostgreSQL case runs where ``AUTOTUNE_TEST_POSTGRES_URL`` names a server (``.ci/run``
starts one on loopback with ``.ci/postgres.sh``).
"""

from __future__ import annotations

import collections
import contextlib
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.storages import BaseStorage

from autotune.catalog import priced_job_from_config
from autotune.config import AutotuneConfig
from autotune.search import StopFlag
from autotune.search import search_job
from autotune.search._best import BEST_FEASIBLE
from autotune.search._best import best_feasible
from autotune.search._study import POLISH_ROUND
from autotune.search._study import open_storage

SMALL = ("model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1", "tracking.enabled=false")
POSTGRES = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL")


def space_key(trial: optuna.trial.FrozenTrial) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(trial.params.items()))


def _assert_clean(study: optuna.Study, trials: int) -> None:
    """``trials`` complete trials, none RUNNING, WAITING or FAILED, from at most 4 processes
    (a worker that starts late may find the study done); each polished layout priced once; the
    best feasible trial recorded from every process's trials."""
    states = collections.Counter(t.state for t in study.trials)
    assert states == {optuna.trial.TrialState.COMPLETE: trials}, states
    best = best_feasible(study.trials)
    assert best is not None and study.user_attrs[BEST_FEASIBLE]["number"] == best.number
    assert 1 <= len({t.user_attrs["autotune.worker"] for t in study.trials}) <= 4
    polished = [
        space_key(t) for t in study.trials if t.user_attrs.get("autotune.origin") == "polish"
    ]
    assert len(polished) == len(set(polished))  # the polish prices each neighbour once


@pytest.mark.parametrize(
    ("backend", "trials"),
    [
        pytest.param("sqlite", 400, marks=pytest.mark.slow),
        ("memory", 100),
        ("postgresql", 100),
    ],
)
def test_four_local_workers_share_one_study(
    make_cfg: Callable[..., AutotuneConfig], tmp_path: Path, backend: str, trials: int
) -> None:
    if backend == "postgresql" and POSTGRES is None:
        pytest.skip("no PostgreSQL server (set AUTOTUNE_TEST_POSTGRES_URL; .ci/run does)")
    url = {
        "sqlite": f"sqlite:///{tmp_path / 'fresh.db'}",
        "memory": None,
        "postgresql": POSTGRES,
    }[backend]
    overrides = [*SMALL, "search.sampler=random", f"search.n_trials={trials}", "search.workers=4"]
    if url is not None:
        overrides += [f"search.storage={url}", f"search.study_name=w-{uuid.uuid4().hex[:8]}"]
    cfg = make_cfg(*overrides)
    with _storage(url) as storage:
        outcome = search_job(cfg, priced_job_from_config(cfg), StopFlag(), storage)
        assert outcome.trials == trials and not outcome.stopped
        _assert_clean(outcome.study, trials)
    if url is not None:  # what the storage holds, read back by another process's connection
        with _storage(url) as storage:
            stored = optuna.load_study(study_name=cfg.search.study_name, storage=storage)
            _assert_clean(stored, trials)


@contextlib.contextmanager
def _storage(url: str | None) -> Iterator[BaseStorage | None]:
    """The search's storage, its database connections closed after (psycopg warns otherwise)."""
    storage = open_storage(url)
    try:
        yield storage
    finally:
        if isinstance(storage, optuna.storages.RDBStorage):
            storage.engine.dispose()


@pytest.mark.slow
def test_four_commands_on_a_fresh_database_share_one_study(tmp_path: Path) -> None:
    """The same command started four times at once, as on four hosts: one study of 400."""
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    command = [
        sys.executable,
        "-m",
        "autotune",
        *SMALL,
        "search.sampler=random",
        "search.n_trials=400",
        f"search.storage={url}",
        "search.study_name=shared",
        "output=json",
    ]
    procs = [
        subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()
    study = optuna.load_study(study_name="shared", storage=url)
    states = collections.Counter(t.state for t in study.trials)
    assert set(states) == {optuna.trial.TrialState.COMPLETE}, states
    # each command stops once the study holds 400; the others' trials in flight still finish,
    # and each polish round adds at most POLISH_ROUND trials
    assert 400 <= len(study.trials) <= 400 + 3 * POLISH_ROUND
    assert 2 <= len({t.user_attrs["autotune.worker"] for t in study.trials}) <= 4


def test_a_fresh_sqlite_file_read_by_another_worker_opens_without_waiting_for_wal(
    tmp_path: Path,
) -> None:
    """A worker opens a study file that is not in WAL mode yet while another worker reads it
    (a shared lock): switching to WAL waits only briefly for the exclusive lock, then the
    connection goes on without it (it waited a minute, then failed: "database is locked");
    once the reader is done, the next connection switches the file to WAL."""
    path = tmp_path / "fresh.db"
    url = f"sqlite:///{path}"
    optuna.storages.RDBStorage(url).engine.dispose()  # Optuna's tables, SQLite's default mode
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM studies").fetchall()
    start = time.perf_counter()
    storage = open_storage(url)
    assert isinstance(storage, optuna.storages.RDBStorage)
    with storage.engine.connect() as connection:
        mode = connection.exec_driver_sql("PRAGMA journal_mode").scalar()
    assert mode == "delete" and time.perf_counter() - start < 10
    reader.execute("COMMIT")
    reader.close()
    storage.engine.dispose()
    with storage.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
