"""Pricing layouts: once each, in the simulator's batches, in parallel processes."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from collections.abc import Sequence

from autotune._process import pool_worker
from autotune.catalog import PricedJob
from autotune.simulators import Layout
from autotune.simulators import Prediction
from autotune.simulators import Simulator

__all__ = ["POLL_S", "Evaluator", "price_in_processes"]

POLL_S = 0.2  # seconds between two looks for a signal while other processes price


class Evaluator:
    """Simulates layouts once each: samplers re-propose seen points, the cache answers them.

    ``price`` prices many layouts through the simulator's ``simulate_many``, ``batch_size``
    at a time (the analytical simulator's thousands, vectorized; one by one by default).
    """

    def __init__(self, priced: PricedJob) -> None:
        self.job = priced.job
        self.simulator: Simulator = priced.simulator
        self._cache: dict[Layout, Prediction] = {}
        self.simulations = 0
        self.seconds = 0.0

    def __call__(self, layout: Layout) -> Prediction:
        prediction = self._cache.get(layout)
        if prediction is None:
            started = time.perf_counter()
            prediction = self.simulator.simulate(self.job, layout)
            self.seconds += time.perf_counter() - started
            self._cache[layout] = prediction
            self.simulations += 1
        return prediction

    def price(
        self, layouts: Sequence[Layout], progress: Callable[[int, int], None] | None = None
    ) -> list[Prediction]:
        """Predictions of ``layouts``, in order (each simulated once)."""
        return [prediction for _, prediction in self.priced(layouts, progress)]

    def priced(
        self,
        layouts: Sequence[Layout],
        progress: Callable[[int, int], None] | None = None,
        stop: Callable[[], bool] = lambda: False,
    ) -> list[tuple[Layout, Prediction]]:
        """``layouts`` with their predictions, in order (each simulated once); once ``stop()``
        is true, checked after each of the simulator's batches (``batch_size`` layouts), only
        the leading layouts priced so far (the first one at least). ``progress(done, total)``
        follows the batches."""
        fresh = [lay for lay in dict.fromkeys(layouts) if lay not in self._cache]
        size = self.simulator.batch_size
        for start in range(0, len(fresh), size):
            chunk = fresh[start : start + size]
            started = time.perf_counter()
            batch = self.simulator.simulate_many(self.job, chunk)
            for index, layout in enumerate(chunk):
                self._cache[layout] = batch.prediction(index)
            self.simulations += len(chunk)
            self.seconds += time.perf_counter() - started
            if progress is not None:
                progress(start + len(chunk), len(fresh))
            if stop():
                break
        pairs = []
        for layout in layouts:
            prediction = self._cache.get(layout)
            if prediction is None:  # stopped before it
                break
            pairs.append((layout, prediction))
        return pairs

    def seconds_per_layout(
        self,
        sample: Sequence[Layout],
        warm: bool = False,
        stop: Callable[[], bool] = lambda: False,
    ) -> float:
        """Measured cost of one layout over ``sample`` (priced, so it is not wasted; once
        ``stop()`` is true, over the layouts priced so far).

        ``warm``: the cost of pricing ``sample`` again once the simulator has done the work it
        does once per job and pattern (the analytical simulator's runs of the interleaved
        schedule, :mod:`autotune.simulators.interleaving`), which a sample would otherwise charge
        to every layout of the space.
        """
        started = time.perf_counter()
        sample = [layout for layout, _ in self.priced(sample, stop=stop)]
        if warm and sample:
            started = time.perf_counter()
            self.simulator.simulate_many(self.job, sample)
        return (time.perf_counter() - started) / max(1, len(sample))


def _price_chunk(priced: PricedJob, layouts: Sequence[Layout]) -> list[Prediction]:
    return [priced.simulator.simulate(priced.job, lay) for lay in layouts]


def price_in_processes(
    priced: PricedJob,
    layouts: Sequence[Layout],
    workers: int,
    stop: Callable[[], bool] = lambda: False,
) -> list[Prediction] | None:
    """Predictions of ``layouts`` by ``priced.simulator`` in ``workers`` processes, in order; None
    once ``stop()`` is true (checked after each layout in this process, every
    :data:`POLL_S` while other processes price; those are then ended at once).

    Layouts that share their per-layer shapes go to the same process, so each process
    compiles (hierarchical) a shape once.
    """
    order = sorted(range(len(layouts)), key=lambda i: layouts[i].layer_key())
    count = max(1, min(workers, len(order)))
    bounds = [len(order) * k // count for k in range(count + 1)]
    chunks = [order[bounds[k] : bounds[k + 1]] for k in range(count) if bounds[k] < bounds[k + 1]]
    results: dict[int, Prediction] = {}
    if len(chunks) == 1:
        for i in chunks[0]:
            if stop():
                return None
            results[i] = _price_chunk(priced, [layouts[i]])[0]
    else:  # leaving the pool ends its processes, whether they are done or not
        with multiprocessing.Pool(len(chunks), pool_worker, (os.getpid(),)) as pool:
            pending = [
                (chunk, pool.apply_async(_price_chunk, (priced, [layouts[i] for i in chunk])))
                for chunk in chunks
            ]
            for chunk, result in pending:
                while not result.ready():
                    if stop():
                        return None
                    result.wait(POLL_S)
                results.update(zip(chunk, result.get(), strict=True))
    return [results[i] for i in range(len(layouts))]
