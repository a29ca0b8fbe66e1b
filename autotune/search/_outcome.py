"""What a search found: every evaluated layout ranked, the best known one, the Pareto front."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from autotune.order import order_key
from autotune.simulators import Layout
from autotune.simulators import Prediction

__all__ = [
    "Outcome",
    "Rerank",
    "SamplerGap",
    "Timings",
    "pareto_front",
    "rank_key",
    "ranked",
    "sampler_gap",
]


def rank_key(prediction: Prediction) -> tuple[bool, bool, float, float]:
    """Layouts that fit first, then by step time, then by memory
    (:func:`autotune.order.order_key`)."""
    return order_key(prediction.fits, prediction.step_time_s, prediction.memory_gib)


def ranked(pairs: Iterable[tuple[Layout, Prediction]]) -> list[tuple[Layout, Prediction]]:
    """Distinct layouts, best first (:func:`rank_key`)."""
    distinct = dict(pairs)
    return sorted(distinct.items(), key=lambda item: rank_key(item[1]))


def pareto_front(
    pairs: Iterable[tuple[Layout, Prediction]],
) -> list[tuple[Layout, Prediction]]:
    """The layouts that fit and that no other beats on both step time and memory, by time."""
    front: list[tuple[Layout, Prediction]] = []
    for layout, prediction in ranked(p for p in pairs if p[1].fits):
        if not front or prediction.memory_gib < front[-1][1].memory_gib:
            front.append((layout, prediction))
    return front


@dataclass(frozen=True, slots=True)
class Rerank:
    """The screened best layouts priced again by a finer simulator.

    ``screened`` are (layout, screening prediction) in screening order; ``reranked`` the same
    layouts with the finer simulator's predictions, ranked by them.
    """

    simulator: str
    screened: list[tuple[Layout, Prediction]]
    reranked: list[tuple[Layout, Prediction]]

    def moves(self) -> list[tuple[Layout, int, int]]:
        """(layout, screening rank, final rank) of the layouts whose rank changed (1-based)."""
        before = {layout: rank for rank, (layout, _) in enumerate(self.screened, start=1)}
        return [
            (layout, before[layout], rank)
            for rank, (layout, _) in enumerate(self.reranked, start=1)
            if before[layout] != rank
        ]


@dataclass(frozen=True, slots=True)
class SamplerGap:
    """How close an Optuna sampler itself came to the exhaustive optimum of the same simulator.

    ``found`` is the best layout of the sampler's own trials (its polish included, as
    ``benchmarks/bench_autotune.py`` measures it), before any exhaustive pricing or re-ranking;
    ``optimum`` the best of every valid layout by the same simulator (None when they were not
    all priced). ``unknown`` says why there is no gap (None when there is one): the gap is then
    unknown, never zero.
    """

    sampler: str
    found: tuple[Layout, Prediction]
    optimum: tuple[Layout, Prediction] | None
    unknown: str | None = None

    @property
    def pct(self) -> float | None:
        """The sampler's best step time over the optimum's, minus 1, in percent (None when
        unknown)."""
        if self.unknown is not None or self.optimum is None:
            return None
        return 100 * (self.found[1].step_time_s / self.optimum[1].step_time_s - 1)

    def text(self) -> str:
        """One line: the gap with both step times, or why it is unknown."""
        found = f"{self.sampler}'s own best {self.found[1].step_time_s:.3f} s"
        pct = self.pct
        if pct is None:
            return f"Sampler gap: unknown ({self.unknown}); {found}"
        assert self.optimum is not None
        return (
            f"Sampler gap: {pct:.2f}% ({found} against the exhaustive optimum "
            f"{self.optimum[1].step_time_s:.3f} s of the same simulator)"
        )


def sampler_gap(
    sampler: str,
    sampled: Iterable[tuple[Layout, Prediction]],
    every: Iterable[tuple[Layout, Prediction]] | None,
    unknown: str | None = None,
) -> SamplerGap | None:
    """The gap of the sampler's layouts ``sampled`` to the best of ``every`` layout (None when
    they were not all priced, saying why in ``unknown``); None when it sampled nothing."""
    found = ranked(sampled)
    if not found:
        return None
    optimum = ranked(every)[0] if every is not None else None
    if optimum is not None and not optimum[1].fits:
        unknown = "no valid layout fits in memory"
    elif optimum is not None and not found[0][1].fits:
        unknown = "none of the sampler's layouts fits in memory; the optimum does"
    elif optimum is None and unknown is None:
        unknown = "not every layout was priced"
    return SamplerGap(sampler, found[0], optimum, unknown)


@dataclass(slots=True)
class Timings:
    """What one search spent: the search itself, the MLflow record, the whole command."""

    search_s: float = 0.0
    record_s: float = 0.0
    total_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """A finished (or stopped) search.

    ``ranked`` holds every evaluated layout, best first; the answer is its first entry, the
    best layout the tool knows of (with a rerank, by the finer simulator). ``evaluated`` is
    every layout in the order the search priced it. ``mode`` is ``grid`` when every valid
    layout was priced, else the sampler. ``exhaustive`` says that every valid layout was
    priced (by the search or beside it), so the answer is the simulator's optimum; ``trials``
    counts the complete trials of ``study`` (the Optuna study, for its plots). ``gap`` is how
    close an Optuna sampler came by itself (None for the grid and the screen).
    """

    mode: str
    valid: int
    evaluated: list[tuple[Layout, Prediction]]
    ranked: list[tuple[Layout, Prediction]]
    exhaustive: bool
    trials: int
    stopped: bool
    study: Any
    rerank: Rerank | None = None
    launch_files: tuple[str, ...] = ()  # written for the best layouts (launch_dir)
    config_file: str | None = None  # the config the search ran with (launch_dir/config.yaml)
    gap: SamplerGap | None = None

    @property
    def best_layout(self) -> Layout:
        return self.ranked[0][0]

    @property
    def best(self) -> Prediction:
        return self.ranked[0][1]

    def top(self, k: int) -> list[tuple[Layout, Prediction]]:
        return self.ranked[:k]

    def pareto(self) -> list[tuple[Layout, Prediction]]:
        return pareto_front(self.ranked)
