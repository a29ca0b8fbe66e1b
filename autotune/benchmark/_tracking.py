"""Record one benchmark in MLflow: a parent run with the report, one child run per ranker.

Each simulator, baseline and peer gets its own child run with the same metric names
(``regret_at_1_mean``, ``mape``, ..., and ``<source>.<figure>`` per source) and tags for its
kind and protocol, so the MLflow UI compares them side by side.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.config import TrackingConfig
from autotune.tracking import Recorded
from autotune.tracking import TrackedRun
from autotune.tracking import record

__all__ = ["log_benchmark_run"]

_UNSAFE = re.compile(r"[^0-9A-Za-z_\-. /]")


def _metrics(summary: Mapping[str, Any]) -> dict[str, Any]:
    """``<figure>`` and ``<source>.<figure>`` of one ranker (the run keeps the numbers)."""
    scopes = {"": summary, **{f"{s}.": v for s, v in summary["by_source"].items()}}
    return {
        _UNSAFE.sub("_", f"{scope}{key}"): value
        for scope, figures in scopes.items()
        for key, value in figures.items()
    }


def log_benchmark_run(
    tracking: TrackingConfig,
    params: Mapping[str, Any],
    summaries: Mapping[str, Mapping[str, Any]],
    config_yaml: str,
    report_files: Sequence[Path],
    protocol: str = "zero_shot",
    curves: Mapping[str, list[tuple[int, float]]] | None = None,
) -> Recorded:
    """Record the benchmark with the report's files (those written, nothing else of their
    folder); MLflow's failures are reported in the result, never raised."""

    def fill(run: TrackedRun) -> None:
        run.params(params)
        run.text("config.yaml", config_yaml)
        run.files(report_files, "report")
        for name, summary in summaries.items():
            mine = summary.get("protocol", protocol)
            run.child(
                f"{name} ({mine})",
                {"ranker": name, "kind": summary["kind"], "protocol": mine, **params},
                _metrics(summary),
            )
        for key, values in (curves or {}).items():  # a curve: the metric's history by K
            run.history(_UNSAFE.sub("_", key), values)

    return record(
        tracking,
        "benchmark",
        fill,
        tags={"autotune.command": "benchmark", "autotune.protocol": protocol},
    )
