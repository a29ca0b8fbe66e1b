"""Views: the simulated timeline as a Chrome trace (open it in https://ui.perfetto.dev).

One process per pipeline rank, one thread (lane) each for compute blocks, P2P transfers and
DP gradient buckets, so the pipeline bubble is visible as gaps on the compute lanes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from autotune.simulators.files import write_atomically
from autotune.simulators.prediction import Prediction
from autotune.simulators.schedule import LANES
from autotune.simulators.schedule import Event
from autotune.simulators.schedule import Timeline

__all__ = ["chrome_trace", "write_chrome_trace"]

_US = 1e6


def chrome_trace(events: Iterable[Event]) -> dict[str, object]:
    """The Chrome trace-event document (``traceEvents`` with complete ``X`` events, in µs)."""
    spans, ranks = [], set()
    for event in events:
        ranks.add(event.rank)
        spans.append(
            {
                "name": event.name,
                "cat": event.lane,
                "ph": "X",
                "pid": event.rank,
                "tid": LANES.index(event.lane),
                "ts": event.start_s * _US,
                "dur": event.duration_s * _US,
            }
        )
    names = []
    for rank in sorted(ranks):
        names.append(
            {
                "name": "process_name",
                "ph": "M",
                "pid": rank,
                "args": {"name": f"pipeline rank {rank}"},
            }
        )
        names.append(
            {"name": "process_sort_index", "ph": "M", "pid": rank, "args": {"sort_index": rank}}
        )
        for tid, lane in enumerate(LANES):
            names.append(
                {"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": lane}}
            )
    return {"traceEvents": names + spans, "displayTimeUnit": "ms"}


def write_chrome_trace(source: Prediction | Iterable[Event], path: str | Path) -> Path:
    """Write the timeline of a hierarchical prediction (or of ``Event`` records) as JSON.

    The file is written whole or not at all (``autotune.simulators.files.write_atomically``).

    Raises:
        ValueError: ``source`` is a prediction without a timeline (another simulator's).
    """
    if isinstance(source, Prediction):
        timeline = source.detail.get("timeline")
        if not isinstance(timeline, Timeline):
            raise ValueError("this prediction has no timeline; use simulator=hierarchical")
        source = timeline.events()
    return write_atomically(path, json.dumps(chrome_trace(source)))
