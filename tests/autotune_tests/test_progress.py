"""Progress lines of a long loop: when they come, and what they say."""

from __future__ import annotations

import logging

import pytest

from autotune.progress import Progress
from autotune.progress import duration


class Clock:
    """A clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("seconds", "whole", "text"),
    [
        (8.14, False, "8.1 s"),
        (8.14, True, "8 s"),
        (42.4, False, "42 s"),
        (185.0, False, "3 min 05 s"),
        (7620.0, False, "2 h 07 min"),
    ],
)
def test_duration(seconds: float, whole: bool, text: str) -> None:
    assert duration(seconds, whole=whole) == text


def _run(
    caplog: pytest.LogCaptureFixture, total: int, seconds_per_step: float, **options: float
) -> list[str]:
    """Messages of a loop of ``total`` steps that each take ``seconds_per_step``."""
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="autotune"):
        progress = Progress("hierarchical", total, unit="layouts", clock=clock, **options)
        for done in range(total + 1):
            progress.update(done)
            clock.now += seconds_per_step
    return [record.getMessage() for record in caplog.records]


def test_a_line_every_tenth_with_elapsed_time_and_what_is_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lines = _run(caplog, 1661, 0.0125)
    assert len(lines) == 9  # 10%, 20%, ... 90%: none before 2 s, none once done
    assert lines[3] == "hierarchical: 668/1661 layouts, 8.4 s elapsed, ~12 s left"
    assert lines[-1].startswith("hierarchical: 1503/1661 layouts, ")


def test_silent_when_the_loop_is_short(caplog: pytest.LogCaptureFixture) -> None:
    assert _run(caplog, 1661, 0.0001) == []


def test_a_slow_loop_reports_at_least_every_interval(caplog: pytest.LogCaptureFixture) -> None:
    lines = _run(caplog, 100, 4.0, interval_s=10.0)  # 10% takes 40 s
    assert lines[:3] == [
        "hierarchical: 3/100 layouts, 12 s elapsed, ~6 min 28 s left",
        "hierarchical: 6/100 layouts, 24 s elapsed, ~6 min 16 s left",
        "hierarchical: 9/100 layouts, 36 s elapsed, ~6 min 04 s left",
    ]
    assert "hierarchical: 10/100 layouts, 40 s elapsed, ~6 min 00 s left" in lines


def test_the_caller_may_estimate_what_is_left(caplog: pytest.LogCaptureFixture) -> None:
    """Steps of unequal cost (the profiler's operators, cheapest first) bring their own."""
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="autotune"):
        progress = Progress("profile", 10, unit="operators", clock=clock)
        clock.now += 3.0
        progress.update(1, left_s=125.0)
    assert caplog.records[-1].getMessage() == (
        "profile: 1/10 operators, 3.0 s elapsed, ~2 min 05 s left"
    )
