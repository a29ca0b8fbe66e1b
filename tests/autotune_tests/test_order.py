"""The one order of layouts: those that fit first, then the fastest, unknown times last, and
between equally fast layouts the one with the most memory to spare."""

from __future__ import annotations

import pandas as pd

from autotune.order import order_key
from autotune.order import sort_frame

NAN = float("nan")


def test_a_layout_that_does_not_fit_never_comes_first_however_fast() -> None:
    keys = [
        order_key(False, 0.1),
        order_key(True, 9.0),
        order_key(True, NAN),
        order_key(True, 2.0),
    ]
    assert sorted(range(4), key=keys.__getitem__) == [3, 1, 2, 0]


def test_frames_sort_inside_their_groups_and_keep_ties_in_order() -> None:
    frame = pd.DataFrame(
        {
            "scenario": ["b", "b", "a", "b", "a", "b"],
            "fits": [False, True, True, True, False, True],
            "step_time_s": [0.5, 2.0, 3.0, 1.0, 0.1, 1.0],
            "trial": [0, 1, 2, 3, 4, 5],
        }
    )
    whole = sort_frame(frame, "fits", "step_time_s")
    assert list(whole["trial"]) == [3, 5, 1, 2, 4, 0]
    grouped = sort_frame(frame, "fits", "step_time_s", within=("scenario",))
    assert list(grouped["trial"]) == [3, 5, 1, 0, 2, 4]  # group b first: it appears first
    assert list(grouped.index) == list(range(6))


def test_equally_fast_layouts_leave_the_most_headroom_first() -> None:
    keys = [
        order_key(True, 18.0, 73.0),
        order_key(True, 18.0, 67.4),
        order_key(True, 18.0),  # memory not known: after those whose memory is known
        order_key(True, 17.9, 77.5),  # faster wins whatever its memory
    ]
    assert sorted(range(4), key=keys.__getitem__) == [3, 1, 0, 2]
    frame = pd.DataFrame(
        {
            "fits": [True, True, True],
            "step_time_s": [18.0, 18.0, 18.0],
            "memory_gib": [73.0, 67.4, 70.8],
            "trial": [0, 1, 2],
        }
    )
    assert list(sort_frame(frame, "fits", "step_time_s", "memory_gib")["trial"]) == [1, 2, 0]
    assert list(sort_frame(frame, "fits", "step_time_s")["trial"]) == [0, 1, 2]
