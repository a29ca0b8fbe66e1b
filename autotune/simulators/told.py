"""How a file's problems are told: each once with all its lines, many lines or values by the
first few and how many more (a file with 3,000 wrong cells in a column is one short problem,
not 3,000 lines), and at most :data:`PROBLEMS_SHOWN` problems in one message."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from collections.abc import Sequence

__all__ = ["Problems", "capped", "lines_text"]

RUNS_SHOWN = 8  # runs of lines (2-28, 31) named in one problem before "and N more runs"
VALUES_SHOWN = 3  # different wrong cells of one kind quoted before "and N other values"
CELL_SHOWN = 40  # characters of a wrong cell quoted
PROBLEMS_SHOWN = 40  # problems listed in one message before "and N more problem(s)"


class Problems:
    """A file's problems, in the order met.

    A cell's problem is its line, its column, what was expected and the wrong cell. Those that
    differ only in their line are told once with every line (a column filled with one wrong
    value says so once), and a column with more than :data:`VALUES_SHOWN` different wrong
    cells of one kind is told once, with its lines and its first cells.

    Example:
        >>> problems = Problems("runs.csv")
        >>> for line in (2, 3, 4):
        ...     problems.add(line, "tp", "expected an integer", "two")
        >>> problems.texts()
        ["runs.csv, lines 2-4, column tp: expected an integer, got 'two'"]
    """

    def __init__(self, name: str) -> None:
        self.name = name  # how each problem names the file
        # (column, what) -> wrong cell (None: no cell quoted) -> its lines; a note -> {}
        self._met: dict[tuple[str | None, str] | str, dict[str | None, list[int]]] = {}
        self._added = 0

    def __len__(self) -> int:
        """How many problems were added, before they are told together."""
        return self._added

    def add(self, line: int, column: str | None, what: str, got: str | None = None) -> None:
        """Line ``line`` (column ``column``; None: the whole row) has problem ``what`` (what
        was expected); ``got`` is the wrong cell, quoted after it (None: no cell to quote)."""
        self._met.setdefault((column, what), {}).setdefault(got, []).append(line)
        self._added += 1

    def note(self, problem: str) -> None:
        """A problem told as ``problem`` says it (it names the file and where)."""
        self._met.setdefault(problem, {})
        self._added += 1

    def texts(self) -> list[str]:
        """Each problem as one line of text, in the order met."""
        told: list[str] = []
        for key, cells in self._met.items():
            if isinstance(key, str):
                told.append(key)
                continue
            column, what = key
            where = "" if column is None else f", column {column}"
            if sum(got is not None for got in cells) > VALUES_SHOWN:
                every = sorted(line for lines in cells.values() for line in lines)
                quoted = [_quoted(got) for got in cells if got is not None]
                got = f", got {capped(quoted, 'other values', VALUES_SHOWN)}"
                told.append(f"{self.name}, {lines_text(every)}{where}: {what}{got}")
                continue
            for value, lines in cells.items():
                got = "" if value is None else f", got {_quoted(value)}"
                told.append(f"{self.name}, {lines_text(lines)}{where}: {what}{got}")
        return told

    def message(self, head: str, thing: str) -> str:
        """``head: N problem(s); the <thing> was not loaded:`` and the problems, one a line
        (the first :data:`PROBLEMS_SHOWN`, then how many more)."""
        told = self.texts()
        shown = told[:PROBLEMS_SHOWN]
        if len(told) > len(shown):
            shown.append(f"and {len(told) - len(shown)} more problem(s)")
        return "\n  - ".join(
            [f"{head}: {len(told)} problem(s); the {thing} was not loaded:", *shown]
        )


def _quoted(cell: str) -> str:
    return repr(cell if len(cell) <= CELL_SHOWN else cell[: CELL_SHOWN - 3] + "...")


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
