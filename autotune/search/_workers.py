"""Several processes on one study: ``search.workers`` local workers, or one command per host.

Every worker opens the same storage and study and runs Optuna's sampler on it, with its own
seed (``search.seed + k``), until the study holds the target number of complete trials; the
first worker (this process) then spends the polish. Optuna's storages hand each trial to one
process (a RUNNING trial is never popped twice), so no trial is lost or run twice: a worker
stopped in the middle of a trial leaves it to the heartbeat (RDB storages) or to the requeue
of dead local processes (:func:`autotune.search._study.open_study`).

Workers are started with the ``spawn`` method: the parent holds an RDB storage's heartbeat
thread and database connections, which a forked child must not inherit. They start with
SIGINT and SIGTERM ignored and take them once their own handlers are set, so a signal stops a
worker after its trial in flight and never prints a traceback in the middle of its start (the
parent repeats its SIGTERM until the worker is gone). A worker follows its parent out, even
after ``kill -9`` (:func:`autotune._process.die_with_parent`).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from autotune._process import die_with_parent
from autotune._signals import SIGNALS
from autotune.catalog import PricedJob
from autotune.config import AutotuneConfig
from autotune.config import SearchConfig
from autotune.config import fixed_layout_values
from autotune.search._price import Evaluator
from autotune.search._space import build_space
from autotune.search._study import StopFlag
from autotune.search._study import name_metrics
from autotune.search._study import open_study
from autotune.search._study import sample

__all__ = ["StudyPlace", "in_memory_copy", "shared_study", "start_workers", "stop_workers"]

log = logging.getLogger("autotune")
_RESEND_S = 1.0  # seconds between two SIGTERMs to a stopped worker that is still starting


@dataclass(frozen=True, slots=True)
class StudyPlace:
    """Where the workers find the study: a storage URL and the study's name and binding."""

    url: str
    study_name: str
    sampler: str
    fingerprint: dict[str, Any]


@contextlib.contextmanager
def shared_study(url: str | None, parallel: bool) -> Iterator[str | None]:
    """``url``; for a parallel search without storage, a journal file that lives as long as
    the search (Optuna's JournalStorage: safe for several local processes)."""
    if url is not None or not parallel:
        yield url
        return
    with tempfile.TemporaryDirectory(prefix="autotune-study-") as folder:
        yield f"journal:{Path(folder) / 'study.log'}"


def start_workers(
    config: AutotuneConfig, priced: PricedJob, place: StudyPlace, count: int, target: int
) -> list[multiprocessing.process.BaseProcess]:
    """Start ``count`` worker processes that sample the study until it holds ``target``
    complete trials."""
    context = multiprocessing.get_context("spawn")
    processes: list[multiprocessing.process.BaseProcess] = [
        context.Process(
            target=_work,
            args=(
                config.search,
                fixed_layout_values(config.parallel),
                priced,
                place,
                config.search.seed + k,
                target,
                os.getpid(),
            ),
            name=f"autotune-worker-{k}",
            daemon=True,
        )
        for k in range(1, count + 1)
    ]
    # Ignored signals stay ignored in a spawned child; held back here meanwhile, not lost.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    handlers = {number: signal.signal(number, signal.SIG_IGN) for number in SIGNALS}
    try:
        for process in processes:
            process.start()
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return processes


def stop_workers(processes: list[multiprocessing.process.BaseProcess], stopped: bool) -> None:
    """Wait for the workers; when the search was stopped, ask them to stop after their trial
    in flight (SIGTERM). A worker that failed is named; its trial is requeued on resume."""
    for process in processes:
        if stopped and process.is_alive() and process.pid is not None:
            os.kill(process.pid, signal.SIGTERM)
    for process in processes:
        process.join(_RESEND_S if stopped else None)
        while process.exitcode is None and process.pid is not None:  # it was still starting
            os.kill(process.pid, signal.SIGTERM)
            process.join(_RESEND_S)
        if process.exitcode not in (0, -signal.SIGTERM, 128 + signal.SIGTERM):
            log.warning(f"  {process.name} ended with exit code {process.exitcode}")


def _work(
    search: SearchConfig,
    fixed: dict[str, Any],
    priced: PricedJob,
    place: StudyPlace,
    seed: int,
    target: int,
    parent: int,
) -> None:
    """One worker: the same space, the same study, its own sampler seed; no polish. It stops
    after its trial in flight on SIGINT, SIGTERM, or when ``parent`` (its pid) is gone."""
    stop = StopFlag()
    for number in SIGNALS:
        signal.signal(number, lambda sig, _: stop.set(sig))
    die_with_parent(parent, lambda: stop.set(signal.SIGTERM))
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    space = build_space(priced.job, search, fixed)
    study = open_study(place.url, place.study_name, place.sampler, seed, place.fingerprint)
    sample(study, space, Evaluator(priced), n_trials=target, polish_fraction=0.0, stop=stop)


def in_memory_copy(study: optuna.Study) -> optuna.Study:
    """``study`` copied into memory (its temporary journal file is about to be removed)."""
    copy = optuna.create_study(directions=study.directions, study_name=study.study_name)
    name_metrics(copy)
    copy.add_trials(study.get_trials(deepcopy=False))
    for key, value in study.user_attrs.items():
        copy.set_user_attr(key, value)
    return copy
