"""The one order of layouts, wherever they are listed: those that fit first, then the fastest.

A layout predicted not to fit in memory must never look best: the search's top layouts, its
``trials.csv`` and ``top_k.csv``, its MLflow child runs and plots, and the benchmark's picks
and ``predictions.csv`` all sort with :func:`order_key`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

__all__ = ["order_key", "sort_frame"]


def order_key(fits: bool, cost: float) -> tuple[bool, bool, float]:
    """Sort key of one layout: smaller comes first.

    Args:
        fits: whether the layout is predicted to fit in device memory.
        cost: lower is better: the predicted step time in seconds, or a ranker's score;
            NaN (no prediction) comes after every number.
    """
    unknown = math.isnan(cost)
    return (not fits, unknown, 0.0 if unknown else cost)


def sort_frame(
    frame: pd.DataFrame, fits: str, cost: str, within: Sequence[str] = ()
) -> pd.DataFrame:
    """``frame`` with its rows in :func:`order_key` order, renumbered from 0.

    Args:
        frame: one row per layout.
        fits: the boolean column that says whether a layout fits.
        cost: the column to order by after ``fits`` (lower first).
        within: columns whose groups keep their order of first appearance; the rows are
            ordered inside each group.
    """
    groups = (
        frame.groupby(list(within), sort=False, dropna=False).ngroup()
        if within
        else pd.Series(0, index=frame.index)
    )
    keys = [
        (group, *order_key(bool(f), float(c)))
        for group, f, c in zip(groups, frame[fits], frame[cost], strict=True)
    ]
    order = sorted(range(len(frame)), key=keys.__getitem__)
    return frame.iloc[order].reset_index(drop=True)
