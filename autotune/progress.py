"""Progress of a long loop on stderr: how far, how long so far, and about how long is left.

One helper for every loop that can run for a while (the benchmark's simulations today):

    progress = Progress("hierarchical", total=1661, unit="layouts")
    for done, item in enumerate(items, start=1):
        work(item)
        progress.update(done)

logs ``hierarchical: 830/1661 layouts, 8.1 s elapsed, ~8 s left`` at each tenth of the work
and at least every 10 s, and stays silent when the whole loop ends within two
seconds. The caller reports the end itself.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

__all__ = ["Progress", "duration"]

_MINUTE, _HOUR = 60, 3600


def duration(seconds: float, whole: bool = False) -> str:
    """``8.1 s`` (below 10 s, unless ``whole``), ``42 s``, ``3 min 05 s`` or ``2 h 07 min``."""
    if seconds < 10 and not whole:
        return f"{seconds:.1f} s"
    rounded = round(seconds)
    if rounded < _MINUTE:
        return f"{rounded} s"
    if rounded < _HOUR:
        return f"{rounded // _MINUTE} min {rounded % _MINUTE:02d} s"
    return f"{rounded // _HOUR} h {rounded % _HOUR // _MINUTE:02d} min"


class Progress:
    """Logs where a loop of ``total`` steps stands, with elapsed time and an estimate of the rest.

    A line is due when the work crosses the next ``step`` fraction of ``total`` (a tenth by
    default) or when ``interval_s`` have passed since the last line; none is written before
    ``delay_s`` have elapsed, nor once the work is done. The estimate assumes the remaining
    steps take as long as the finished ones on average.

    Args:
        label: what is being done, the start of each line.
        total: the number of steps.
        unit: what a step is, in the plural.
        log: the logger (stderr with the command line's logging set up).
        step: the fraction of ``total`` between two lines.
        interval_s: the longest wait between two lines, in seconds.
        delay_s: the time before the first line, in seconds.
        clock: the time source, in seconds.
    """

    def __init__(
        self,
        label: str,
        total: int,
        *,
        unit: str = "steps",
        log: logging.Logger | None = None,
        step: float = 0.1,
        interval_s: float = 10.0,
        delay_s: float = 2.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.label, self.total, self.unit = label, total, unit
        self._log = log or logging.getLogger("autotune")
        self._every = max(1, math.ceil(step * total))
        self._interval_s, self._delay_s = interval_s, delay_s
        self._clock = clock
        self._started = self._last = clock()
        self._next = self._every

    def update(self, done: int, left_s: float | None = None) -> None:
        """Record that ``done`` of the ``total`` steps are finished; log a line if one is due.

        ``left_s``: the caller's own estimate of the seconds left, for steps of unequal cost
        (the profiler's operators); by default the finished steps' average.
        """
        if done >= self.total:
            return
        now = self._clock()
        crossed = done >= self._next
        if crossed:
            self._next = (done // self._every + 1) * self._every
        elapsed = now - self._started
        if elapsed < self._delay_s or not (crossed or now - self._last >= self._interval_s):
            return
        self._last = now
        self._log.info(self.line(done, elapsed, left_s))

    def line(self, done: int, elapsed_s: float, left_s: float | None = None) -> str:
        """``<label>: <done>/<total> <unit>, <elapsed> elapsed, ~<left> left``."""
        text = f"{self.label}: {done}/{self.total} {self.unit}, {duration(elapsed_s)} elapsed"
        if left_s is None and done > 0:
            left_s = elapsed_s / done * (self.total - done)
        if left_s is not None:
            text += f", ~{duration(left_s, whole=True)} left"
        return text
