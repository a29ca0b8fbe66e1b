"""Record one benchmark as one MLflow run: settings as params, summaries as metrics, the
report folder as artifacts."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.config import TrackingConfig
from autotune.tracking import tracked_run

__all__ = ["log_benchmark_run"]

_UNSAFE = re.compile(r"[^0-9A-Za-z_\-. /]")


def _metrics(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """``<ranker>.<figure>`` and ``<ranker>.<source>.<figure>`` for every finite number."""
    found: dict[str, float] = {}
    for name, summary in summaries.items():
        scopes = {name: summary, **{f"{name}.{s}": v for s, v in summary["by_source"].items()}}
        for scope, figures in scopes.items():
            for key, value in figures.items():
                if isinstance(value, int | float) and math.isfinite(value):
                    found[_UNSAFE.sub("_", f"{scope}.{key}")] = float(value)
    return found


def log_benchmark_run(
    tracking: TrackingConfig,
    params: Mapping[str, Any],
    summaries: Mapping[str, Mapping[str, Any]],
    config_yaml: str,
    report_dir: Path,
) -> str:
    """Log the run and return its id; a failure inside marks the run FAILED, never RUNNING."""
    with tracked_run(tracking, run_name="benchmark") as run:
        assert run is not None
        run.params(params)
        run.metrics(_metrics(summaries))
        run.text("config.yaml", config_yaml)
        run.folder(report_dir, "report")
        return run.run_id
