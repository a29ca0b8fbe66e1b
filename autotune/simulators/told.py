"""How a problem names many lines or values in one message: the first few, then how many
more (a file with 3,000 wrong cells in a column is one short problem, not 3,000 lines)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from collections.abc import Sequence

__all__ = ["capped", "lines_text"]

RUNS_SHOWN = 8  # runs of lines (2-28, 31) named in one problem before "and N more runs"


def capped(items: Sequence[str], rest: str, shown: int = 3) -> str:
    """The first ``shown`` items, then ``and N <rest>``.

    Example:
        >>> capped(["'a'", "'b'", "'c'", "'d'"], "more")
        "'a', 'b', 'c' and 1 more"
    """
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {more} {rest}" if more > 0 else "")


def lines_text(numbers: Iterable[int]) -> str:
    """``line 7``, or ``lines 2-28, 31`` (the first runs, then how many more).

    Example:
        >>> lines_text([5, 2, 3, 4, 9])
        'lines 2-5, 9'
    """
    runs = [
        [number for _, number in run]
        for _, run in itertools.groupby(
            enumerate(sorted(set(numbers))), key=lambda pair: pair[1] - pair[0]
        )
    ]
    if len(runs) == 1 and len(runs[0]) == 1:
        return f"line {runs[0][0]}"
    text = [str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs]
    return "lines " + capped(text, "more runs", RUNS_SHOWN)
