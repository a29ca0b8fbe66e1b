"""Pricing layouts: once each, in batches where the simulator can, in parallel processes."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from collections.abc import Sequence

from catalog import Job
from simulators import Layout
from simulators import Prediction
from simulators import Simulator

__all__ = ["Evaluator", "price_in_processes"]


class Evaluator:
    """Simulates layouts once each: samplers re-propose seen points, the cache answers them.

    ``price`` prices many layouts at once through the simulator's ``simulate_many`` when it
    has one (the analytical simulator, vectorized), else one by one.
    """

    def __init__(self, job: Job) -> None:
        self.job = job
        self.simulator: Simulator = job.simulator
        self.model, self.cluster, self.train = job.model, job.cluster, job.train
        self._cache: dict[Layout, Prediction] = {}
        self.simulations = 0
        self.seconds = 0.0

    def __call__(self, layout: Layout) -> Prediction:
        prediction = self._cache.get(layout)
        if prediction is None:
            started = time.perf_counter()
            prediction = self.simulator.simulate(self.model, self.cluster, self.train, layout)
            self.seconds += time.perf_counter() - started
            self._cache[layout] = prediction
            self.simulations += 1
        return prediction

    def price(
        self, layouts: Sequence[Layout], progress: Callable[[int, int], None] | None = None
    ) -> list[Prediction]:
        """Predictions of ``layouts``, in order (each simulated once)."""
        fresh = [lay for lay in dict.fromkeys(layouts) if lay not in self._cache]
        many = getattr(self.simulator, "simulate_many", None)
        started = time.perf_counter()
        if many is not None and fresh:
            batch = many(self.model, self.cluster, self.train, fresh)
            for index, layout in enumerate(fresh):
                self._cache[layout] = batch.prediction(index)
            self.simulations += len(fresh)
            self.seconds += time.perf_counter() - started
        else:
            for done, layout in enumerate(fresh, start=1):
                self(layout)
                if progress is not None:
                    progress(done, len(fresh))
        return [self._cache[layout] for layout in layouts]

    def seconds_per_layout(self, sample: Sequence[Layout], warm: bool = False) -> float:
        """Measured cost of one layout over ``sample`` (priced, so it is not wasted).

        ``warm``: the cost of pricing ``sample`` again once the simulator has done the work it
        does once per job and pattern (the analytical simulator's runs of the interleaved
        schedule, :mod:`simulators.interleaving`), which a sample would otherwise charge to
        every layout of the space.
        """
        started = time.perf_counter()
        self.price(sample)
        if warm and sample:
            started = time.perf_counter()
            many = getattr(self.simulator, "simulate_many", None)
            if many is not None:
                many(self.model, self.cluster, self.train, list(sample))
            else:
                for layout in sample:
                    self.simulator.simulate(self.model, self.cluster, self.train, layout)
        return (time.perf_counter() - started) / max(1, len(sample))


def _price_chunk(job: Job, layouts: Sequence[Layout]) -> list[Prediction]:
    return [job.simulator.simulate(job.model, job.cluster, job.train, lay) for lay in layouts]


def price_in_processes(job: Job, layouts: Sequence[Layout], workers: int) -> list[Prediction]:
    """Predictions of ``layouts`` by ``job.simulator`` in ``workers`` processes, in order.

    Layouts that share their per-layer shapes go to the same process, so each process
    compiles (hierarchical) a shape once.
    """
    order = sorted(range(len(layouts)), key=lambda i: layouts[i].layer_key())
    count = max(1, min(workers, len(order)))
    bounds = [len(order) * k // count for k in range(count + 1)]
    chunks = [order[bounds[k] : bounds[k + 1]] for k in range(count) if bounds[k] < bounds[k + 1]]
    results: dict[int, Prediction] = {}
    if len(chunks) == 1:
        priced = _price_chunk(job, [layouts[i] for i in chunks[0]])
        results.update(zip(chunks[0], priced, strict=True))
    else:
        with concurrent.futures.ProcessPoolExecutor(max_workers=len(chunks)) as pool:
            futures = {
                pool.submit(_price_chunk, job, [layouts[i] for i in chunk]): chunk
                for chunk in chunks
            }
            for future in concurrent.futures.as_completed(futures):
                for i, prediction in zip(futures[future], future.result(), strict=True):
                    results[i] = prediction
    return [results[i] for i in range(len(layouts))]
