"""The one order of layouts, wherever they are listed: those that fit first, then the fastest,
then (between equally fast ones) the one with the most memory to spare.

A layout predicted not to fit in memory must never look best: the search's top layouts, its
``trials.csv`` and ``top_k.csv``, its MLflow child runs and plots, and the benchmark's picks
and ``predictions.csv`` all sort with :func:`order_key`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

__all__ = ["order_key", "sort_frame"]


def order_key(
    fits: bool, cost: float, memory_gib: float = math.nan
) -> tuple[bool, bool, float, float]:
    """Sort key of one layout: smaller comes first.

    Args:
        fits: whether the layout is predicted to fit in device memory.
        cost: lower is better: the predicted step time in seconds, or a ranker's score;
            NaN (no prediction) comes after every number.
        memory_gib: the predicted peak memory; breaks ties in ``cost`` (equally fast
            layouts, such as two layer splits whose slowest stage is the same, leave the
            most headroom first). NaN (not known) ranks as no tie-break.
    """
    unknown = math.isnan(cost)
    memory = math.inf if math.isnan(memory_gib) else memory_gib
    return (not fits, unknown, 0.0 if unknown else cost, memory)


def sort_frame(
    frame: pd.DataFrame,
    fits: str,
    cost: str,
    memory: str | None = None,
    within: Sequence[str] = (),
) -> pd.DataFrame:
    """``frame`` with its rows in :func:`order_key` order, renumbered from 0.

    Args:
        frame: one row per layout.
        fits: the boolean column that says whether a layout fits.
        cost: the column to order by after ``fits`` (lower first).
        memory: the predicted peak memory column that breaks ties in ``cost``, if any.
        within: columns whose groups keep their order of first appearance; the rows are
            ordered inside each group.
    """
    groups = (
        frame.groupby(list(within), sort=False, dropna=False).ngroup()
        if within
        else pd.Series(0, index=frame.index)
    )
    memories = frame[memory] if memory else pd.Series(math.nan, index=frame.index)
    keys = [
        (group, *order_key(bool(f), float(c), float(m)))
        for group, f, c, m in zip(groups, frame[fits], frame[cost], memories, strict=True)
    ]
    order = sorted(range(len(frame)), key=keys.__getitem__)
    return frame.iloc[order].reset_index(drop=True)
