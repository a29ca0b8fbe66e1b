"""SIGINT and SIGTERM, honoured from a command's start to its exit.

Outside a command's run (while Python imports the command, and while the interpreter exits) a
signal prints one line and ends the process at once: nothing is open then that needs cleaning
up. During the run (:func:`honoured`, entered by :func:`autotune.cli.run_command`) it raises
:class:`Interrupted` in the main thread, so every ``with`` and ``finally`` on the way out runs:
a temporary folder is removed, an open MLflow run is ended KILLED (``autotune.tracking``),
worker processes are stopped; ``run_command`` then prints one line (the signal, and what was
recorded in MLflow) and returns 130 (SIGINT) or 143 (SIGTERM), as a shell reports a process
killed by the signal. A loop that can stop cleanly between its steps (the search's trials, its
grid, the MLflow record, whose database a signal in the middle of a transaction could leave
locked) takes the signals itself for a while (:func:`deferred`): the first stops it at its next
safe step, a second interrupts at once. Once a signal has interrupted the work, another ends
the process at once, without cleaning up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from typing import Any

__all__ = [
    "SIGNALS",
    "Interrupted",
    "deferred",
    "exit_on_signals",
    "exit_status",
    "honoured",
    "interrupt",
    "interrupted",
    "note_recorded",
    "received",
    "signal_name",
    "summary",
]

SIGNALS = (signal.SIGINT, signal.SIGTERM)  # the signals a command honours


class Interrupted(KeyboardInterrupt):
    """A SIGINT or SIGTERM that interrupts a command. A ``KeyboardInterrupt``, so that a
    library which cleans up after Ctrl-C (Optuna fails the trial in flight) does it for SIGTERM
    too."""

    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.number = number

    @property
    def name(self) -> str:
        """``SIGINT`` or ``SIGTERM``."""
        return signal_name(self.number)


@dataclass
class _State:
    """The signals of the command being run (one per process: signals are process-wide)."""

    received: int = 0  # the first signal (0: none)
    interrupted: bool = False  # an Interrupted was raised: another signal exits at once
    recorded: list[str] = field(default_factory=list)  # MLflow runs written, for the line


_state = _State()


def signal_name(number: int) -> str:
    """``SIGINT`` for 2."""
    return signal.Signals(number).name


def exit_status(number: int) -> int:
    """What a shell reports for a process ended by signal ``number``: 128 + its number."""
    return 128 + number


def received() -> int:
    """The first signal the running command received (0: none)."""
    return _state.received


def interrupted() -> bool:
    """Whether a signal has cut the running command's work short (:class:`Interrupted`)."""
    return _state.interrupted


def note_recorded(text: str) -> None:
    """Remember ``text`` (an MLflow run written, and how it ended) for the line a signal
    prints."""
    _state.recorded.append(text)


def summary(number: int) -> str:
    """The line a signal leaves: which one, and what was recorded in MLflow."""
    done = "; ".join(_state.recorded) or "nothing was recorded in MLflow"
    return f"interrupted by {signal_name(number)}: {done}"


def exit_on_signals() -> None:
    """From now on, SIGINT and SIGTERM print one line and end the process at once (a command
    sets this first thing, so that a signal during its imports leaves no traceback)."""
    if threading.current_thread() is threading.main_thread():
        for number in SIGNALS:
            signal.signal(number, _exit_now)


def _exit_now(number: int, frame: Any) -> None:
    _say(summary(number))
    os._exit(exit_status(number))


def _say(line: str) -> None:
    with contextlib.suppress(Exception):  # a closed or broken stream must not stop the exit
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.write(f"\n{line}\n")
        sys.stderr.flush()


@contextlib.contextmanager
def honoured() -> Iterator[None]:
    """A command's run: a signal raises :class:`Interrupted` (a second one exits at once).

    The previous handlers, and the signals seen before, come back afterwards: what one
    command received does not stop the next one run in the same process. Outside the main
    thread, where Python delivers no signal, nothing changes.
    """
    global _state
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before, _state = _state, _State()
    previous = {number: signal.signal(number, _interrupt) for number in SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        _state = before


def interrupt(number: int) -> None:
    """Cut the work short for signal ``number``: raise :class:`Interrupted` (a step that
    deferred the signal calls it at a point where stopping is safe).

    Raises:
        Interrupted: always.
    """
    _state.received = _state.received or number
    _state.interrupted = True
    raise Interrupted(number)


def _interrupt(number: int, frame: Any) -> None:
    if _state.interrupted:
        _say(f"{signal_name(number)} again: exiting without cleaning up")
        os._exit(exit_status(_state.received or number))
    interrupt(number)


@contextlib.contextmanager
def deferred(on_first: Callable[[int], None]) -> Iterator[None]:
    """Within: the first signal calls ``on_first(number)``, and the work stops at its next
    safe step (after the trial in flight; before the next call to a database, which a signal
    in the middle of a transaction could leave locked); a second one raises
    :class:`Interrupted` at once. Afterwards, signals raise it again."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[int] = []

    def first(number: int, frame: Any) -> None:
        if seen or _state.interrupted:
            _interrupt(number, frame)
        seen.append(number)
        _state.received = _state.received or number
        on_first(number)

    previous = {number: signal.signal(number, first) for number in SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
