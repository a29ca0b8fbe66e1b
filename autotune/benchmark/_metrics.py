"""Scores of one ranking of one scenario's measured layouts, and their aggregates.

A scenario is a set of measured layouts of one job. A ranker (simulator, baseline or peer)
orders them; the pick is its first. Regret is the measured time of the pick over the best
measured time, minus one. A layout that really ran out of memory has no time: picking it is a
*false-feasible pick*, charged a fixed penalty regret.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np
from scipy import stats

from autotune.order import order_key

# Kendall tau over all pairs costs n^2 / 2 sign products; below this many points that is faster
# than scipy's O(n log n) kendalltau with its ~1 ms of overhead per call.
_PAIRWISE_LIMIT = 2000
_PAIR_BLOCK = 256  # rows of the pair matrix formed at once (256 x 2000 x 8 bytes = 4 MB)

__all__ = [
    "Summary",
    "ape",
    "average_ranks",
    "expected_random_regret",
    "feasibility_rates",
    "kendall_tau_b",
    "layout_regrets",
    "pick_order",
    "rank_correlations",
    "regret_at_k",
    "summarize",
]


def layout_regrets(measured_s: np.ndarray, ok: np.ndarray, oom_penalty: float) -> np.ndarray:
    """Regret of picking each layout: ``t / t_best - 1`` if it ran, ``oom_penalty`` if not.

    Args:
        measured_s: measured step times (NaN where the layout did not run).
        ok: whether each layout ran (status ``ok``); the others ran out of memory.
        oom_penalty: the regret charged for picking a layout that ran out of memory.
    """
    best = np.min(measured_s[ok])
    return np.where(ok, measured_s / best - 1.0, oom_penalty)


def pick_order(
    score: np.ndarray, fits: np.ndarray, memory_gib: np.ndarray | None = None
) -> np.ndarray:
    """Indices from first pick to last: predicted to fit first, then by score, NaN last, then
    by predicted memory (:func:`autotune.order.order_key`).

    Remaining ties keep the table's order (a stable sort), so a ranking is deterministic.
    """
    memory = np.full(len(score), np.nan) if memory_gib is None else memory_gib
    keys = [
        order_key(bool(f), float(c), float(m)) for f, c, m in zip(fits, score, memory, strict=True)
    ]
    return np.array(sorted(range(len(keys)), key=keys.__getitem__), dtype=int)


def regret_at_k(regrets: np.ndarray, order: np.ndarray, k: int) -> float:
    """Regret of the best of the first ``k`` picks."""
    return float(np.min(regrets[order[:k]]))


def expected_random_regret(regrets: np.ndarray, k: int) -> float:
    """Exact expected regret@k of ``k`` layouts drawn uniformly without replacement.

    With regrets sorted ascending, the i-th smallest (1-based) is the best of the draw with
    probability C(n - i, k - 1) / C(n, k).
    """
    n = len(regrets)
    k = min(k, n)
    ordered = np.sort(regrets)
    weights = np.array([comb(n - i, k - 1) for i in range(1, n + 1)], dtype=float) / comb(n, k)
    return float(np.dot(weights, ordered))


def ape(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Absolute percentage error as a fraction: ``|p - m| / m``."""
    return np.abs(predicted - measured) / measured


def rank_correlations(predicted: np.ndarray, measured: np.ndarray) -> tuple[float, float]:
    """Kendall tau-b and Spearman rho; NaN below two points or for a constant input.

    Computed with numpy: scipy's functions cost about a millisecond per call, which, once per
    scenario, dominated the scoring of large files (same values; tested against scipy).
    """
    keep = np.isfinite(predicted) & np.isfinite(measured)
    predicted, measured = predicted[keep], measured[keep]
    if len(predicted) < 2 or _constant(predicted) or _constant(measured):
        return float("nan"), float("nan")
    rho = _pearson(average_ranks(predicted), average_ranks(measured))
    return kendall_tau_b(predicted, measured), rho


def _constant(values: np.ndarray) -> bool:
    return bool((values == values[0]).all())


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their average rank (``scipy.stats.rankdata``'s default)."""
    order = values.argsort(kind="stable")
    ordered = values[order]
    first = np.empty(len(values), dtype=bool)  # where a run of equal values starts
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    starts = first.nonzero()[0]
    counts = np.diff(starts, append=len(values))
    ranks = np.empty(len(values))
    ranks[order] = np.repeat(starts + (counts + 1) / 2, counts)
    return ranks


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall tau-b of two non-constant samples: over all pairs, the sum of the products of
    their sign differences over the root of (pairs untied in x) * (pairs untied in y).

    Pairs are formed in blocks of rows, so memory stays ``O(_PAIR_BLOCK * n)``; beyond
    ``_PAIRWISE_LIMIT`` points scipy's O(n log n) algorithm takes over.
    """
    n = len(x)
    if n > _PAIRWISE_LIMIT:
        return float(stats.kendalltau(x, y).statistic)
    agree = untied_x = untied_y = 0.0
    for start in range(0, n, _PAIR_BLOCK):
        dx = np.sign(x[start : start + _PAIR_BLOCK, None] - x)
        dy = np.sign(y[start : start + _PAIR_BLOCK, None] - y)
        agree += (dx * dy).sum()
        untied_x += (dx * dx).sum()
        untied_y += (dy * dy).sum()
    return _clip(agree / (untied_x * untied_y) ** 0.5)


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    dx, dy = x - x.mean(), y - y.mean()
    return _clip(dx.dot(dy) / (dx.dot(dx) * dy.dot(dy)) ** 0.5)


def _clip(value: float) -> float:
    """A correlation within [-1, 1] (rounding can step just outside)."""
    return float(min(1.0, max(-1.0, value)))


def feasibility_rates(fits: np.ndarray, ok: np.ndarray) -> tuple[float, float]:
    """False-feasible rate (oom layouts predicted to fit, over oom layouts) and false-infeasible
    rate (layouts that ran but predicted not to fit, over layouts that ran); NaN without any."""
    oom = ~ok
    false_feasible = float(np.mean(fits[oom])) if oom.any() else float("nan")
    false_infeasible = float(np.mean(~fits[ok])) if ok.any() else float("nan")
    return false_feasible, false_infeasible


@dataclass(frozen=True, slots=True)
class Summary:
    """Mean, median, worst (max) and a bootstrap 95% interval of the mean of finite values."""

    n: int
    mean: float
    median: float
    worst: float
    ci_low: float
    ci_high: float


def summarize(values: np.ndarray, rng: np.random.Generator, samples: int) -> Summary:
    """Summary of ``values`` (NaN dropped); the interval resamples values with replacement."""
    values = values[np.isfinite(values)]
    if len(values) == 0:
        nan = float("nan")
        return Summary(0, nan, nan, nan, nan, nan)
    means = rng.choice(values, size=(samples, len(values)), replace=True).mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return Summary(
        n=len(values),
        mean=float(values.mean()),
        median=float(np.median(values)),
        worst=float(values.max()),
        ci_low=float(low),
        ci_high=float(high),
    )
